"""Stage `memory_embeddings`: every visible fact, chunk, knowledge entry and turn whose
embedding is missing or from another model, embedded in batches. No vector index: every search is scoped to one
user, where an exact scan of that user's rows is exact and faster than HNSW (migration 0010)."""

from __future__ import annotations

from collections import Counter, OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from psycopg_pool import ConnectionPool

from memory_pipelines.db import search as search_db
from memory_pipelines.embed import Embedder
from memory_pipelines.shards import ALL_USERS, Shard
from memory_pipelines.stages.common import Backends, Counts, StageReport, Window

ASSET = "memory_embeddings"

# table -> the named query that lists its rows needing an embedding (id, text)
EMBEDDED_TABLES = {"memory_facts": "facts_needing_embedding", "memory_chunks": "chunks_needing_embedding",
                   "knowledge_entries": "entries_needing_embedding", "memory_turns": "turns_needing_embedding"}
PAGE_ROWS = 2048
REUSED_TEXTS = 20_000  # about 30 MB of vectors at 384 dimensions
NO_MODEL = ""  # no row is embedded by it: the listings then name every row


@dataclass(frozen=True)
class Settings:
    page_rows: int = PAGE_ROWS  # rows read, embedded and written per transaction
    reused_texts: int = REUSED_TEXTS  # vectors kept to reuse for a text met again in the run


@dataclass
class EmbeddingCounts(Counts):
    model: str = ""
    embedded: Counter = field(default_factory=Counter)  # table -> rows embedded
    re_embedded: Counter = field(default_factory=Counter)  # of them, replacing another model's vector

    def metadata(self) -> dict[str, Any]:
        """Flat, one number per kind of row: `facts_embedded`, `facts_re_embedded`, ..."""
        flat: dict[str, Any] = {"model": self.model}
        for table, name in COUNTED_AS.items():
            flat[f"{name}_embedded"] = self.embedded[table]
            flat[f"{name}_re_embedded"] = self.re_embedded[table]
        return flat


# table -> how the metadata names its rows
COUNTED_AS = {"memory_facts": "facts", "memory_chunks": "chunks", "knowledge_entries": "entries",
              "memory_turns": "turns"}


class _Reused:
    """The run's embedder, keeping the vectors of the newest `size` texts it embedded: a text
    repeated on a later page (a fact many users state, the window of a stock reply) is
    embedded once a run. Within a page the embedder itself embeds a text once."""

    def __init__(self, embedder: Embedder, size: int):
        self._embedder, self._size = embedder, size
        self._kept: OrderedDict[str, np.ndarray] = OrderedDict()

    def embed(self, texts: list[str]) -> np.ndarray:
        distinct = list(dict.fromkeys(texts))
        found = {t: self._kept[t] for t in distinct if t in self._kept}
        missing = [t for t in distinct if t not in found]
        if missing:
            found.update(zip(missing, self._embedder.embed(missing).astype(np.float32)))
        for text in distinct:
            self._kept[text] = found[text]
            self._kept.move_to_end(text)
        while len(self._kept) > self._size:
            self._kept.popitem(last=False)
        return np.stack([found[t] for t in texts])


def _store_page(pool: ConnectionPool, table: str, ids: list[int], vectors: np.ndarray, model_id: str) -> None:
    with pool.connection() as conn, conn.transaction():
        search_db.store_embeddings(conn, table, ids, vectors, model_id)


def texts_embedded(pool: ConnectionPool, shard: Shard = ALL_USERS, page_rows: int = PAGE_ROWS) -> list[str]:
    """Every text the stage embeds, as it reads them (each table's rows of no model), for
    timing an embedder alone on the pipeline's own texts (`bench distill`)."""
    texts: list[str] = []
    for listing in EMBEDDED_TABLES.values():
        after = 0
        while rows := _rows_needing_embedding(pool, listing, NO_MODEL, after, page_rows, shard):
            texts += [text for _, text, _ in rows]
            after = rows[-1][0]
    return texts


def _rows_needing_embedding(pool: ConnectionPool, listing: str, model_id: str, after: int, limit: int,
                            shard: Shard) -> list[tuple]:
    with pool.connection() as conn:
        return search_db.rows_needing_embedding(conn, listing, model_id, after, limit, shard)


def run(pool: ConnectionPool, window: Window, settings: Settings,
        backends: Backends) -> StageReport[EmbeddingCounts]:
    """Embed what is missing or stale, page by page (each page its own transaction, so an
    interrupted run keeps what it finished); safe to run again. Not bound to the window's
    days: what any run left unembedded (of the window's shard) is embedded now. A page is written while the next is
    read and embedded (the writer waits on the server, the embedder works in Python), unless the
    embedder's own threads use every core (a local model)."""
    embedder = backends.embedder
    reused = _Reused(embedder, settings.reused_texts)
    counts = EmbeddingCounts(model=embedder.model_id)
    embedded_ids: dict[str, list[int]] = {table: [] for table in EMBEDDED_TABLES}
    with ThreadPoolExecutor(max_workers=1) as writer:
        writing: Future | None = None
        for table, listing in EMBEDDED_TABLES.items():
            after = 0
            while True:
                rows = _rows_needing_embedding(pool, listing, embedder.model_id, after, settings.page_rows,
                                               window.shard)
                if not rows:
                    break
                vectors = reused.embed([text for _, text, _ in rows])
                if writing is not None:
                    writing.result()  # one page in flight: a failed write stops the run here
                ids = [row_id for row_id, _, _ in rows]
                if embedder.uses_every_core:
                    # its threads take both cores: a write beside them stalls them all (on 2 cores
                    # the stage took 2.5-18 s more than the model alone, written in turn 1.5-2.7 s)
                    _store_page(pool, table, ids, vectors, embedder.model_id)
                else:
                    writing = writer.submit(_store_page, pool, table, ids, vectors, embedder.model_id)
                embedded_ids[table].extend(ids)
                counts.embedded[table] += len(rows)
                counts.re_embedded[table] += sum(1 for _, _, stale in rows if stale)
                after = rows[-1][0]
        if writing is not None:
            writing.result()
    report = StageReport(counts)
    # the id lists bind by table name: the rows this run embedded are checked whatever their partition
    scope: dict[str, Any] = {"model": embedder.model_id, "dimension": embedder.dimension, **embedded_ids}
    report.check_scope = scope
    return report
