"""What each stage's output must satisfy: expectations over the rows a run wrote."""

from __future__ import annotations

from memory_pipelines.chunks import CHUNK_MAX_CHARS, CHUNK_MESSAGE_MAX_CHARS

LINEAGE = ("session_id", "run_id", "model", "prompt_version")

FACTS_UNIQUE = [("unique", ("user_id", "category", "key"))]  # over visible rows
FACTS_VALID = [
    ("between", "confidence", 0, 100),
    ("true", "merge_target_visible"),
    ("true", "span_ordered"),
    ("true", "same_user"),
    *[("not_null", column) for column in (*LINEAGE, "seq_start", "seq_end")],
]
CHUNKS_VALID = [
    ("true", "within_cap"),
    ("true", "span_in_session"),
    ("true", "same_user"),
    *[("not_null", column) for column in (*LINEAGE, "content_hash")],
]
# a chunk holding one message may exceed the chunk size, up to the message cap and its prefix
CHUNK_SINGLE_MAX = CHUNK_MESSAGE_MAX_CHARS + 200
CHUNK_MAX = CHUNK_MAX_CHARS
