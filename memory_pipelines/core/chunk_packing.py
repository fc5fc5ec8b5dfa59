"""Raw chunks: verbatim messages that left the context window, packed for search.

A session's messages older than its last N (16) are out of the context window; once the
session is stale, all of them are. Packing is greedy from the last packed message: chunks
of up to 4,000 characters, one message capped at 12,000 with its middle elided, each
message prefixed `User:`, `Assistant:` or `Tool result (name):`; system messages, old
summaries and compression markers are skipped. A chunk is emitted once it is closed (the
next message did not fit) or the session is stale, so its boundaries do not depend on how
often the pipeline ran.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from memory_pipelines.breadcrumbs import MAX_BREADCRUMBS, extract_breadcrumbs, merge_breadcrumbs
from memory_pipelines.digests import json_digest
from memory_pipelines.records import Message

CHUNK_MAX_CHARS = 4000
CHUNK_MESSAGE_MAX_CHARS = 12_000
PACKER_VERSION = json_digest(["chunks-v1", CHUNK_MAX_CHARS, CHUNK_MESSAGE_MAX_CHARS])[:12]
SKIPPED_KINDS = {"summary", "compression_marker", "compaction"}


def chunk_line(message: Message) -> str | None:
    """A message as it stands in a chunk, or None when chunks skip it."""
    if message.role == "system" or message.metadata.get("kind") in SKIPPED_KINDS:
        return None
    if message.role == "tool":
        prefix = f"Tool result ({message.tool_name or 'tool'}): "
        body = message.content
    elif message.role == "assistant" and message.tool_name:
        args = json.dumps(message.tool_args or {}, ensure_ascii=False, sort_keys=True)
        body = (message.content + "\n" if message.content.strip() else "") + f"[Tool call] {message.tool_name}({args})"
        prefix = "Assistant: "
    else:
        prefix, body = ("User: " if message.role == "user" else "Assistant: "), message.content
    if len(body) > CHUNK_MESSAGE_MAX_CHARS:
        marker = f" […{len(body) - CHUNK_MESSAGE_MAX_CHARS} characters elided…] "
        keep = CHUNK_MESSAGE_MAX_CHARS - len(marker)
        body = body[: keep // 2] + marker + body[len(body) - (keep - keep // 2):]
    return prefix + body


@dataclass(frozen=True)
class Chunk:
    session_id: str
    user_id: str
    start_seq: int
    end_seq: int
    started_at: datetime
    ended_at: datetime
    content: str
    message_count: int
    breadcrumbs: tuple[str, ...] = ()  # a stored chunk's (the chunks stage adds them): tree leaves read them

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()


def pack_chunks(pending: Sequence[Message], eligible_through: int | None, stale: bool) -> list[Chunk]:
    """Chunks to emit from `pending` (a session's unpacked messages, by seq).

    `eligible_through` is the last seq out of the context window (None: none is); a stale
    session's messages are all eligible and its last, open chunk is emitted too."""
    groups: list[list[tuple[Message, str]]] = [[]]
    size = 0
    for message in pending:
        line = chunk_line(message)
        if line is None:
            continue
        if groups[-1] and size + 1 + len(line) > CHUNK_MAX_CHARS:
            groups.append([])
            size = 0
        groups[-1].append((message, line))
        size += len(line) + (1 if len(groups[-1]) > 1 else 0)
    chunks = []
    for index, group in enumerate(groups):
        if not group:
            continue
        closed = index < len(groups) - 1
        last_seq = group[-1][0].seq
        if not (stale or (closed and eligible_through is not None and last_seq <= eligible_through)):
            break
        messages = [m for m, _ in group]
        chunks.append(Chunk(
            session_id=messages[0].session_id, user_id=messages[0].user_id, start_seq=messages[0].seq,
            end_seq=last_seq, started_at=messages[0].ts, ended_at=messages[-1].ts,
            content="\n".join(line for _, line in group), message_count=len(group),
        ))
    return chunks


def chunk_breadcrumbs(chunk: Chunk, summary_keys: Sequence[str]) -> list[str]:
    """The summary's keys that occur in the chunk, then the extractor's, then the rest of
    the summary's keys: at most 40, most important first."""
    text = chunk.content.casefold()
    present = [k for k in summary_keys if k.casefold() in text]
    absent = [k for k in summary_keys if k.casefold() not in text]
    return merge_breadcrumbs(merge_breadcrumbs(present, extract_breadcrumbs([chunk.content])), absent,
                             MAX_BREADCRUMBS)
