"""Running the pipeline's stages directly, without Dagster: each stage's `run(pool, window,
settings, backends)` with the settings and back ends its asset gives it by default (the
`rules` model back end built as `ModelResource.backend_for_run` builds it, the hashing
embedder as `EmbedderResource.embedder_for_run` builds it), the stages a stage reads from
run first, and what the tables hold, to compare two runs by."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from memory_pipelines.config import SAMPLE_TRANSCRIPTS, SPECS, DecaySettings
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.embed import EmbedConfig, build_embedder
from memory_pipelines.llm import ModelConfig, build_backend
from memory_pipelines.sources import SourceSettings
from memory_pipelines.stages import (
    chunks, decay, embeddings, error_memory, facts, knowledge, segments, sketches, summaries, transcripts, tree,
    turns,
)
from memory_pipelines.stages.common import Backends, StageReport, Window

SAMPLE = SAMPLE_TRANSCRIPTS
SAMPLE_DAYS = tuple(f"2026-10-{day:02}" for day in range(1, 15))

# each stage and the stages its asset depends on (assets/*.py `deps`)
DEPENDS_ON: dict[str, tuple[str, ...]] = {
    "transcripts": (),
    "conversation_segments": ("transcripts",),
    "session_summaries": ("conversation_segments",),
    "memory_facts": ("transcripts", "conversation_segments", "session_summaries"),
    "memory_chunks": ("transcripts", "session_summaries"),
    "knowledge_entries": ("transcripts", "conversation_segments", "session_summaries"),
    "sketches": ("transcripts",),
    "error_memory": ("transcripts",),
    "memory_turns": ("transcripts", "session_summaries", "memory_chunks"),
    "memory_tree": ("memory_chunks", "memory_facts", "knowledge_entries"),
    "memory_embeddings": ("memory_facts", "memory_chunks", "knowledge_entries", "memory_turns"),
    "memory_decay": ("knowledge_entries", "memory_facts", "error_memory", "memory_embeddings"),
}
ORDER = tuple(DEPENDS_ON)  # a topological order


def upstream(stage: str) -> list[str]:
    """Every stage `stage` reads from, directly or not, in the order they run."""
    needed: set[str] = set()
    todo = list(DEPENDS_ON[stage])
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo.extend(DEPENDS_ON[name])
    return [name for name in ORDER if name in needed]


def window(keys: Sequence[str] | str, run_id: str = "stage-test") -> Window:
    return Window((keys,) if isinstance(keys, str) else tuple(keys), run_id)


@contextmanager
def model_backends(pool: ConnectionPool, run_id: str, embed: EmbedConfig | None = None) -> Iterator[Backends]:
    """The default back ends of a run: `rules` as judge and writer (the token budget counting
    what the run spent, as `ModelResource.backend_for_run` has it) and the hashing embedder."""
    judge = build_backend(ModelConfig(), lambda: summaries_db.run_tokens_spent(pool, run_id))
    writer = build_backend(ModelConfig(), lambda: summaries_db.run_tokens_spent(pool, run_id))
    embedder = build_embedder(embed or EmbedConfig())
    try:
        yield Backends(judge=judge, writer=writer, embedder=embedder)
    finally:
        for closing in (judge, writer, embedder):
            closing.close()


def default_settings(stage: str, source: Path | None = None):
    """What the stage's asset passes with the default resources."""
    match stage:
        case "transcripts":
            return transcripts.Settings(SourceSettings(location=str(source or SAMPLE)))
        case "conversation_segments":
            return segments.Settings(concurrency=ModelConfig().concurrency)
        case "session_summaries":  # no partition start: every day of the window may be folded
            return summaries.Settings(SPECS["MEMORY_SUMMARY_LANGUAGE"].default,
                                      SPECS["MEMORY_SUMMARY_CHUNK_CHARS"].default, ModelConfig().concurrency)
        case "memory_facts":
            return facts.Settings(timedelta(minutes=SPECS["MEMORY_STALE_MINUTES"].default),
                                  ModelConfig().concurrency)
        case "memory_chunks":
            return chunks.Settings(timedelta(minutes=SPECS["MEMORY_STALE_MINUTES"].default),
                                   SPECS["MEMORY_CONTEXT_MESSAGES"].default)
        case "knowledge_entries":
            return knowledge.Settings(SPECS["MEMORY_PII_SANITIZE"].default, None, SPECS["MEMORY_CONSENT_BASIS"].default)
        case "memory_tree":
            return tree.Settings()
        case "memory_embeddings":
            return embeddings.Settings()
        case "memory_decay":
            return DecaySettings()
        case _:
            return None  # sketches, error_memory, memory_turns take none


STAGE_MODULES = {
    "transcripts": transcripts, "conversation_segments": segments, "session_summaries": summaries,
    "memory_facts": facts, "memory_chunks": chunks, "knowledge_entries": knowledge, "sketches": sketches,
    "error_memory": error_memory, "memory_turns": turns, "memory_tree": tree, "memory_embeddings": embeddings,
    "memory_decay": decay,
}


def run_stage(pool: ConnectionPool, stage: str, keys: Sequence[str] | str, *, run_id: str = "stage-test",
              source: Path | None = None, settings=None, embed: EmbedConfig | None = None) -> StageReport:
    """One stage's `run` over the days `keys` (one run for the range, as a backfill's)."""
    module = STAGE_MODULES[stage]
    chosen = default_settings(stage, source) if settings is None else settings
    with model_backends(pool, run_id, embed) as backends:
        return module.run(pool, window(keys, run_id), chosen, backends)


def run_chain(pool: ConnectionPool, stages: Sequence[str], keys: Sequence[str] | str, *,
              run_id: str = "upstream", source: Path | None = None) -> dict[str, StageReport]:
    """The stages in order over the same days, each with its defaults; their reports by stage."""
    return {stage: run_stage(pool, stage, keys, run_id=run_id, source=source) for stage in stages}


def run_upstream(pool: ConnectionPool, stage: str, keys: Sequence[str] | str, *, run_id: str = "upstream",
                 source: Path | None = None) -> dict[str, StageReport]:
    """What `stage` reads, built by the stages before it over the same days."""
    return run_chain(pool, upstream(stage), keys, run_id=run_id, source=source)


# columns that name a run or a moment, or a serial id: two runs that build the same memory differ in these
AUDIT_COLUMNS = frozenset({"id", "run_id", "ingested_run_id", "ingested_at", "created_at", "updated_at",
                           "quarantined_at", "archived_at", "call_id", "latency_ms", "scanned_at",
                           "extracted_at", "resolved_by_run", "closed_by", "source_id", "merged_into"})
# not memory: the migration ledger and the index of scanned transcript files
NOT_MEMORY = ("schema_migrations", "transcript_objects")


def table_contents(url: str, tables: Sequence[str] | None = None) -> dict[str, list[str]]:
    """Every row of each table (every public table by default) as text, without the audit
    columns (nor those keys inside archived row copies), sorted: equal for equal content."""
    with psycopg.connect(url) as conn:
        if tables is None:
            tables = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
                "AND table_type = 'BASE TABLE' AND NOT table_name = ANY(%s) ORDER BY 1", (list(NOT_MEMORY),))]
        out = {}
        for table in tables:
            columns = [r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' "
                "AND table_name = %s ORDER BY ordinal_position", (table,)) if r[0] not in AUDIT_COLUMNS]
            parts = [sql.SQL("({} - {}::text[])::text").format(sql.Identifier(c), sql.Literal(sorted(AUDIT_COLUMNS)))
                     if c == "row_data" else sql.SQL("{}::text").format(sql.Identifier(c)) for c in columns]
            out[table] = sorted(r[0] for r in conn.execute(sql.SQL("SELECT concat_ws('|', {}) FROM {}").format(
                sql.SQL(", ").join(parts), sql.Identifier(table))))
        return out


def sample_inventory(folder: Path = SAMPLE) -> tuple[dict[str, int], set[str]]:
    """What the sample holds, counted from its files without the pipeline: records per user
    folder (JSON Lines lines, Parquet rows, JSON array elements) and the session ids."""
    import pyarrow.parquet as pq

    records: dict[str, int] = {}
    sessions: set[str] = set()
    for path in sorted(folder.rglob("*")):
        if path.suffix == ".jsonl":
            found = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        elif path.suffix == ".json":
            found = json.loads(path.read_text(encoding="utf-8"))
        elif path.suffix == ".parquet":
            found = pq.read_table(path, columns=["session_id"]).to_pylist()
        else:
            continue
        user = path.relative_to(folder).parts[0]
        records[user] = records.get(user, 0) + len(found)
        sessions.update(r["session_id"] for r in found)
    return records, sessions


def sample_files(folder: Path = SAMPLE) -> int:
    return sum(1 for path in folder.rglob("*") if path.is_file())


def rows(url: str, statement: str, params=None) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(statement, params).fetchall()


def scalar(url: str, statement: str, params=None):
    return rows(url, statement, params)[0][0]


def write_session(folder: Path, session_id: str, user_id: str, turns: Sequence[tuple], day: str = "2026-10-01",
                  start: str = "10:00", name: str | None = None) -> Path:
    """A canonical JSON Lines transcript: one record per turn, one minute apart from `start`.
    A turn is (role, content) or (role, content, extra fields)."""
    folder.mkdir(parents=True, exist_ok=True)
    hour, minute = map(int, start.split(":"))
    lines = []
    for seq, (role, content, *extra) in enumerate(turns, start=1):
        total = hour * 60 + minute + seq - 1
        record = {"session_id": session_id, "user_id": user_id, "seq": seq, "role": role, "content": content,
                  "ts": f"{day}T{total // 60:02d}:{total % 60:02d}:00Z"}
        for fields in extra:
            record.update(fields)
        lines.append(json.dumps(record))
    path = folder / (name or f"{session_id}.jsonl")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
