"""What each stage's output must satisfy: expectations over the rows a run wrote or touched.

Every check reads its rows with a named query of sql/queries/checks.sql, bound to the scope
of the partition(s) being materialized (never the whole table): `partition_keys`, `start`
and `end` (their time window), `run_id`, plus what the asset adds (the users or sessions it
wrote, the embedding model). The query computes per row what an expectation tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psycopg

from memory_pipelines.core.chunk_packing import CHUNK_MAX_CHARS, CHUNK_MESSAGE_MAX_CHARS
from memory_pipelines.db import checks as checks_db
from memory_pipelines.core.knowledge_entries import CONSENT, KINDS, SCOPES
from memory_pipelines.records import (
    MAX_KEY_DECISIONS, MAX_KEYS, MAX_PAST_DISCUSSIONS, ROLES, SUMMARY_FIELDS, QuarantineReason,
)
from memory_pipelines.quality_gates.expectations import FrameValidation, QualityResult
from memory_pipelines.rules.noise import DROP_THRESHOLD
from memory_pipelines.rules.text import TEXT_SEARCH_CONFIGS
from memory_pipelines.core.turn_index import INDEXED_ROLES


@dataclass(frozen=True)
class QualityCheck:
    name: str
    rows: str  # the named query listing the rows in scope
    key: tuple[str, ...]  # the columns that name a failing row in the summary
    expectations: tuple[tuple, ...]
    blocking: bool  # a failure means corrupt data: stop it before it is embedded or served
    description: str
    rows_where: str | None = None  # a boolean column: only those rows are checked


# rows of one frame a check validates at a time: a year's range never in memory at once
CHECK_FRAME_ROWS = 200_000

# Constants the check queries bind besides the scope.
QUERY_CONSTANTS = {
    "drop_threshold": DROP_THRESHOLD,
    "chunk_max": CHUNK_MAX_CHARS,
    # a chunk holding one message may exceed the chunk size, up to the message cap and its prefix
    "chunk_single_max": CHUNK_MESSAGE_MAX_CHARS + 200,
}

SUMMARY_SCHEMA = {
    "type": "object",
    "required": list(SUMMARY_FIELDS),
    "additionalProperties": False,
    "properties": {
        "key_decisions": {"type": "array", "maxItems": MAX_KEY_DECISIONS,
                          "items": {"type": "string", "pattern": "^(Do|Don't): "}},
        "past_discussions": {"type": "array", "maxItems": MAX_PAST_DISCUSSIONS, "items": {"type": "string"}},
        "current_discussion": {"type": "string"},
        "keys": {"type": "array", "maxItems": MAX_KEYS, "items": {"type": "string"}},
        "language": {"type": "string", "minLength": 1},
    },
}


def _not_null(*columns: str) -> tuple[tuple, ...]:
    return tuple(("not_null", column) for column in columns)


LINEAGE = ("session_id", "run_id", "model", "prompt_version")

CHECKS: dict[str, tuple[QualityCheck, ...]] = {
    "transcripts": (
        QualityCheck(
            "messages_valid", "message_check_rows", ("session_id", "seq"),
            (("unique", ("session_id", "seq")), ("in_set", "role", ROLES), ("true", "in_window"),
             *_not_null("user_id", "source_file", "source_line", "ingested_run_id", "content_hash")),
            blocking=True,
            description="The window's messages and all messages of the sessions this run wrote into: "
                        "(session_id, seq) unique, role allowed, every message this run wrote inside the partition "
                        "window, user, source file/line, run id and content hash present."),
        QualityCheck(
            "sessions_single_user", "session_check_rows", ("session_id",), (("true", "single_user"),),
            blocking=True,
            description="Every touched session's messages belong to one user, the one its sessions row names."),
        QualityCheck(
            "sessions_match_messages", "session_check_rows", ("session_id",), (("true", "counts_match"),),
            blocking=False,
            description="Every touched session's message count, first and last times agree with its messages."),
        QualityCheck(
            "quarantine_valid", "quarantine_check_rows", ("source_file", "source_line"),
            (("in_set", "reason", tuple(r.value for r in QuarantineReason)),
             ("unique", ("source_file", "source_line", "reason", "raw_md5")),
             *_not_null("source_file", "source_line", "detail", "run_id")),
            blocking=False,
            description="The partition's quarantined records still open (not resolved by a later run): a known "
                        "reason with its detail, source file/line unique per reason and content, run id present."),
    ),
    "conversation_segments": (
        QualityCheck(
            "segments_valid", "segment_check_rows", ("segment_id",),
            (("unique", ("segment_id",)), ("between", "confidence", 0, 1), ("true", "dropped_with_reason"),
             ("true", "span_ordered"), ("true", "within_day"), ("true", "single_user")),
            blocking=True,
            description=f"The partition's segments: unique, confidence in 0..1, a dropped segment is judged noise "
                        f"with a reason and confidence >= {DROP_THRESHOLD}, seq and time spans ordered and inside "
                        f"the day, one user (the session's)."),
    ),
    "session_summaries": (
        QualityCheck(
            "summaries_valid", "summary_check_rows", ("session_id",),
            (("json_schema", "summary", SUMMARY_SCHEMA), ("between", "version", 1, None),
             ("true", "cursor_in_session"), ("true", "session_user"), ("true", "latest_version"),
             *_not_null("cursor_seq", "cursor_ts", "partition_key", "run_id")),
            blocking=True,
            description="The current summary of every session with messages in the window: the five sections "
                        "in shape, version >= 1 and the latest one, cursor present and not after the session's "
                        "last message, the session's user, lineage present."),
        QualityCheck(
            "summary_versions_valid", "summary_version_check_rows", ("session_id", "version"),
            (("json_schema", "summary", SUMMARY_SCHEMA), ("between", "version", 1, None), ("true", "span_ordered"),
             ("true", "cursor_in_session"), ("true", "session_user")),
            blocking=True,
            description="The versions built for the partition's days (and rebuilt by this run): the summary in "
                        "shape, version >= 1, first_seq <= last_seq <= cursor, cursor not after the session's "
                        "last message, the session's user."),
    ),
    "memory_facts": (
        QualityCheck(
            "facts_unique_visible", "fact_check_rows", ("id",), (("unique", ("user_id", "category", "key")),),
            blocking=True, rows_where="visible",
            description="No two visible facts of a user share (category, key)."),
        QualityCheck(
            "facts_valid", "fact_check_rows", ("id",),
            (("between", "confidence", 0, 100), ("true", "merge_target_visible"), ("true", "span_ordered"),
             ("true", "same_user"), *_not_null(*LINEAGE, "seq_start", "seq_end")),
            blocking=True,
            description="Confidence in 0..100, every merged_into points at a visible row of the same user, seq "
                        "spans ordered, facts belong to their session's user, lineage present."),
    ),
    "memory_chunks": (
        QualityCheck(
            "chunks_valid", "chunk_check_rows", ("id",),
            (("true", "span_in_session"), ("true", "same_user"), *_not_null(*LINEAGE, "content_hash")),
            blocking=True,
            description="Seq spans within their session, the session's user, lineage present."),
        QualityCheck(
            "chunk_sizes", "chunk_check_rows", ("id",), (("true", "within_cap"),),
            blocking=False,
            description=f"No chunk over {CHUNK_MAX_CHARS} characters, except a one-message chunk up to the "
                        f"message cap."),
    ),
    "sketches": (
        QualityCheck(
            "sketches_valid", "sketch_check_rows", ("id",),
            (("in_set", "scope", ("session", "user")), ("in_set", "source", ("transcript",)),
             ("true", "scope_key_matches"), ("true", "written_by_user"), ("not_null", "source_seq")),
            blocking=True,
            description="The partition's scratchpad notes: from transcripts, scope key as the scope says, "
                        "written by the recorded message (source_seq) of the note's own user."),
    ),
    "knowledge_entries": (
        QualityCheck(
            "entries_valid", "entry_check_rows", ("id",),
            (("in_set", "kind", KINDS), ("in_set", "scope", SCOPES),
             ("in_set", "consent_basis", CONSENT), ("between", "confidence", 0, 1), ("between", "importance", 0, 1),
             ("true", "scope_id_matches"), ("true", "session_user"), ("true", "span_ordered"),
             *_not_null(*LINEAGE)),
            blocking=True,
            description="The partition's entries: kind, scope and consent basis allowed, confidence and "
                        "importance in 0..1, scope_id as the scope says, the source session's user (none for a "
                        "global entry), seq span ordered, lineage present."),
    ),
    "entity_graph": (
        QualityCheck(
            "graph_valid", "graph_check_rows", ("id",),
            (("between", "confidence", 0, 1), ("true", "session_user"), ("true", "span_ordered"),
             ("true", "validity_ordered"), ("true", "closed_by_same_user"), *_not_null(*LINEAGE)),
            blocking=True,
            description="The partition's triples and those it closed: confidence in 0..1, the source session's "
                        "user, seq span and validity ordered, a closed triple points at the newer triple of the "
                        "same user, subject and relation that closed it, lineage present."),
    ),
    "error_memory": (
        QualityCheck(
            "errors_valid", "error_check_rows", ("id",),
            (*_not_null("tool", "error", "fix"), ("true", "texts_present"), ("true", "span_ordered"),
             ("true", "expires_after_seen"), ("true", "session_user")),
            blocking=True,
            description="The partition's resolved errors: tool, error and fix present and not blank, the error "
                        "before its fix, expiry after the observation, the session's user."),
    ),
    "memory_turns": (
        QualityCheck(
            "turns_valid", "turn_check_rows", ("session_id", "seq"),
            (("in_set", "role", INDEXED_ROLES), ("in_set", "language", ("simple", *TEXT_SEARCH_CONFIGS.values())),
             ("true", "session_user"), ("true", "has_message"), ("true", "pos_unique")),
            blocking=True,
            description="The indexed sessions' turns: a user, assistant or tool message of the archive, in a "
                        "known text search configuration, the session's user, one turn per position."),
    ),
    "memory_tree": (
        QualityCheck(
            "tree_valid", "tree_check_rows", ("tree_kind", "tree_key", "node_key"),
            (("true", "parent_above"), ("true", "spans_of_user"), ("true", "leaf_is_chunk")),
            blocking=True,
            description="The grown users' trees: every node under a parent one level up or at the top, its "
                        "spans turns of its own user's sessions, a session tree's leaf the span of a chunk."),
    ),
    "memory_embeddings": (
        QualityCheck(
            "embeddings_current", "embedding_check_rows", ("source_table", "id"),
            (("not_null", "embedding_model"), ("equal", "embedding_model", "current_model"),
             ("equal", "dimension", "current_dimension")),
            blocking=True,
            description="Every served row of the partition (visible facts, chunks, entries, turns) and every row this "
                        "run embedded carries a vector of the configured embedder's model and dimension."),
    ),
    "memory_decay": (
        QualityCheck(
            "archive_valid", "archive_check_rows", ("source_table", "source_id"),
            (("in_set", "source_table", ("knowledge_entries", "memory_facts", "error_memory")),
             ("in_set", "reason", ("decayed", "expired", "ttl", "pii_retention", "merged_with")),
             ("not_null", "source_id"), ("true", "row_matches_source"), ("true", "same_user"),
             ("true", "out_of_source")),
            blocking=False,
            description="The partition's archive rows keep their source table, id, reason and user, and their "
                        "source row is gone from the served table."),
    ),
}


def frame_columns(checks: Sequence[QualityCheck]) -> tuple[str, ...] | None:
    """The columns the rows of checks sharing one query are grouped by when cut into frames:
    those every unique expectation of theirs includes (rows equal on them stay in one frame);
    () when none has a unique expectation (cut anywhere); None when their unique expectations
    share no column (not to be cut)."""
    uniques = [spec[1] for check in checks for spec in check.expectations if spec[0] == "unique"]
    if not uniques:
        return ()
    shared = tuple(c for c in uniques[0] if all(c in columns for columns in uniques))
    return shared or None


def run_checks(conn: psycopg.Connection, checks: Sequence[QualityCheck],
               scope: Mapping) -> list[tuple[QualityCheck, QualityResult]]:
    """Each check over its rows in scope, read in frames of CHECK_FRAME_ROWS; checks reading
    the same query share each frame."""
    params = {**QUERY_CONSTANTS, **scope}
    validations = [FrameValidation(check.name, check.expectations, check.key) for check in checks]
    by_query: dict[str, list[int]] = {}
    for index, check in enumerate(checks):
        by_query.setdefault(check.rows, []).append(index)
    for rows_query, indexes in by_query.items():
        columns = frame_columns([checks[i] for i in indexes])
        for frame in checks_db.check_frames(conn, rows_query, params, columns, CHECK_FRAME_ROWS):
            for i in indexes:
                where = checks[i].rows_where
                validations[i].add(frame[frame[where]] if where is not None and not frame.empty else frame)
    return [(check, validation.result()) for check, validation in zip(checks, validations)]
