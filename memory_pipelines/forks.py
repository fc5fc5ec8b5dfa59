"""Forked sessions and their merges (navra's fork and merge of working memory).

A fork shares its parent's turns up to `fork_seq` and then has its own (seq > fork_seq);
the pipeline distils it from its parent's state at the fork point and keeps it apart: its
turns never reach the parent's summaries, chunks or search, nor the user's facts and
knowledge, until a merge brings them into the parent:

- `append`: the fork's turns become new parent turns after the parent's last one;
- `replace`: the parent's turns after the fork point are set aside (kept in
  `superseded_messages`, restorable) and the fork's turns take their seqs;
- `summarize`: one turn condensing the fork's (by the configured writer) is appended.

A merge is one transaction, recorded in `session_merges`, done once (a second call finds the
merge in force and changes nothing), and leaves the parent to be distilled again from its
first changed day: the derived rows of that day on (turn index, chunks, segments) are
cleared at once, so search stops serving what the merge replaced before the next run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from datetime import datetime

import psycopg

from memory_pipelines.db import forks as forks_db
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.db import transcripts as transcripts_db
from memory_pipelines.llm.backends import ModelBackend, ModelCall
from memory_pipelines.records import MERGE_MODES, ForkPoint, Message, Summary
from memory_pipelines.core.transcript_scan import hash_message

MERGE_SOURCE = "merge"  # source_file of the parent turns a merge wrote


class ForkError(ValueError):
    """A fork or merge that cannot be done as asked; the message names what to fix."""


@dataclass(frozen=True)
class Merge:
    """A merge as recorded (or, in a dry run, as it would be)."""

    id: int | None  # None: a dry run
    fork_session_id: str
    parent_session_id: str
    user_id: str
    mode: str
    fork_seq: int
    fork_first_seq: int
    fork_last_seq: int
    parent_first_seq: int
    parent_last_seq: int
    superseded_first_seq: int | None
    superseded_last_seq: int | None
    first_changed_day: str
    merged_by: str
    merged_at: datetime | None = None

    @property
    def next_step(self) -> str:
        """The run that distils the parent again from the first day the merge changed."""
        return f"memory-pipelines run --start {self.first_changed_day}"


@dataclass(frozen=True)
class MergeReport:
    merge: Merge
    written: tuple[Message, ...] = ()  # the parent turns the merge writes
    superseded: int = 0  # parent turns set aside
    already: bool = False  # the merge was in force before: nothing changed
    dry_run: bool = False
    calls: tuple[ModelCall, ...] = ()


@dataclass(frozen=True)
class RestoreReport:
    merge: Merge
    removed: int  # the parent turns the merge had written
    brought_back: int  # the superseded turns back in the archive


def _messages_after(conn: psycopg.Connection, session_id: str, after_seq: int) -> list[Message]:
    return summaries_db.sessions_messages_after(conn, {session_id: after_seq}).get(session_id, [])


def fork_session(conn: psycopg.Connection, session_id: str, new_session_id: str, at: int | None = None,
                 actor: str = "cli") -> ForkPoint:
    """A new session sharing `session_id`'s turns up to `at` (default: its last); its own
    turns, written to transcripts under `new_session_id`, start at seq at + 1."""
    with conn.transaction():
        summaries_db.lock_sessions(conn, [session_id, new_session_id])
        found = forks_db.session_seq_range(conn, session_id)
        if found is None:
            raise ForkError(f"no session {session_id!r} in the archive: fork a session that has turns")
        first, last, user_id = found
        if session_id in transcripts_db.fork_points(conn, [session_id]):
            raise ForkError(f"{session_id} is itself a fork: fork its parent, or merge it first")
        if (forks_db.session_seq_range(conn, new_session_id) is not None
                or transcripts_db.fork_points(conn, [new_session_id])):
            raise ForkError(f"session {new_session_id!r} already exists: name the fork anew with --as")
        at = last if at is None else at
        if not first <= at <= last:
            raise ForkError(f"--at {at} is outside {session_id}'s turns {first}..{last}")
        fork = ForkPoint(new_session_id, session_id, at, user_id)
        transcripts_db.insert_fork_points(conn, [fork], actor)
    return fork


def merge_fork(conn: psycopg.Connection, fork_session_id: str, parent_session_id: str, mode: str, *,
               actor: str = "cli", dry_run: bool = False, writer: ModelBackend | None = None) -> MergeReport:
    """Merge a fork's own turns into its parent (module docstring), in one transaction."""
    if mode not in MERGE_MODES:
        raise ForkError(f"unknown merge mode {mode!r}: use one of {', '.join(MERGE_MODES)}")
    if mode == "summarize" and writer is None:
        raise ForkError("merge --mode summarize needs a writer back end")
    with conn.transaction():
        summaries_db.lock_sessions(conn, [fork_session_id, parent_session_id])
        fork = transcripts_db.fork_points(conn, [fork_session_id]).get(fork_session_id)
        if fork is None or fork.parent_session_id != parent_session_id:
            parent = f"it forks {fork.parent_session_id}" if fork else "it is no fork"
            raise ForkError(f"{fork_session_id} cannot merge into {parent_session_id}: {parent}")
        existing = forks_db.merge_in_force(conn, fork_session_id, parent_session_id)
        if existing is not None:
            return MergeReport(Merge(**existing), already=True, dry_run=dry_run)
        own = _messages_after(conn, fork_session_id, fork.fork_seq)
        if not own:
            raise ForkError(f"{fork_session_id} has no turns of its own yet: nothing to merge")
        parent_range = forks_db.session_seq_range(conn, parent_session_id)
        parent_last = parent_range[1] if parent_range else fork.fork_seq
        later = _messages_after(conn, parent_session_id, fork.fork_seq) if mode == "replace" else []
        calls: tuple[ModelCall, ...] = ()
        if mode == "replace":
            turns = own  # at their own seqs: the fork's timeline becomes the parent's
        elif mode == "append":
            turns = [replace(m, seq=parent_last + i) for i, m in enumerate(own, start=1)]
        else:
            summary, call = writer.summarize(Summary(language="auto"), own, "auto")
            calls = (call,)
            turns = [replace(own[-1], seq=parent_last + 1, role="assistant", content=_summary_turn(fork, own, summary),
                             tool_name=None, tool_args=None, tool_call_id=None)]
        changed = min([*(m.ts for m in turns), *(m.ts for m in later)])
        merge = Merge(None, fork_session_id, parent_session_id, fork.user_id, mode, fork.fork_seq, own[0].seq,
                      own[-1].seq, turns[0].seq, turns[-1].seq, later[0].seq if later else None,
                      later[-1].seq if later else None, changed.date().isoformat(), actor)
        if dry_run:
            return MergeReport(merge, tuple(_as_parent_turn(m, o, merge) for m, o in zip(turns, own)),
                               len(later), dry_run=True, calls=calls)
        stored = forks_db.insert_merge(conn, {k: v for k, v in asdict(merge).items() if k not in ("id", "merged_at")})
        merge = replace(merge, **stored)
        if later:
            forks_db.set_aside_messages(conn, merge.id, parent_session_id, later[0].seq, later[-1].seq)
        written = tuple(_as_parent_turn(m, o, merge) for m, o in zip(turns, own))
        transcripts_db.insert_messages(conn, written, f"merge-{merge.id}")
        transcripts_db.refresh_sessions(conn, [parent_session_id])
        forks_db.clear_derived(conn, parent_session_id, min(m.seq for m in (*turns, *later)), merge.first_changed_day)
        if calls:
            summaries_db.insert_llm_calls(conn, [(c, merge.first_changed_day, parent_session_id) for c in calls],
                                          run_id=f"merge-{merge.id}", asset="session_merges")
    return MergeReport(merge, written, len(later), calls=calls)


def restore_merge(conn: psycopg.Connection, fork_session_id: str, parent_session_id: str, *,
                  actor: str = "cli") -> RestoreReport:
    """Undo the merge in force of a fork into its parent: the turns it wrote leave the
    parent, the turns it set aside come back; the parent is distilled again from the day."""
    with conn.transaction():
        summaries_db.lock_sessions(conn, [fork_session_id, parent_session_id])
        row = forks_db.merge_in_force(conn, fork_session_id, parent_session_id)
        if row is None:
            raise ForkError(f"no merge of {fork_session_id} into {parent_session_id} is in force: nothing to restore")
        merge = Merge(**row)
        removed = forks_db.delete_session_messages(conn, parent_session_id, merge.parent_first_seq,
                                                   merge.parent_last_seq)
        back = forks_db.bring_back_messages(conn, merge.id)
        forks_db.mark_merge_restored(conn, merge.id, actor)
        transcripts_db.refresh_sessions(conn, [parent_session_id])
        first = min(s for s in (merge.parent_first_seq, merge.superseded_first_seq) if s is not None)
        forks_db.clear_derived(conn, parent_session_id, first, merge.first_changed_day)
    return RestoreReport(merge, removed, back)


def _summary_turn(fork: ForkPoint, own: list[Message], summary: Summary) -> str:
    """The text of a summarize merge's turn: what the writer condensed of the fork's turns."""
    said = [*summary.key_decisions, *summary.past_discussions,
            *([summary.current_discussion] if summary.current_discussion else [])]
    return (f"Summary of fork {fork.session_id} (its turns {own[0].seq}–{own[-1].seq} after turn {fork.fork_seq}): "
            + " ".join(said))


def _as_parent_turn(turn: Message, source: Message, merge: Merge) -> Message:
    """A parent turn a merge writes, with lineage to the fork turn(s) it came from."""
    lineage = {"session_id": merge.fork_session_id, "mode": merge.mode, "merge_id": merge.id,
               "seqs": [source.seq] if merge.mode != "summarize" else list(range(merge.fork_first_seq,
                                                                                  merge.fork_last_seq + 1))}
    metadata = {**turn.metadata, "merged_from": lineage}
    fields = {"user_id": turn.user_id, "role": turn.role, "content": turn.content, "ts": turn.ts.isoformat(),
              "agent_id": turn.agent_id, "tool_name": turn.tool_name, "tool_args": turn.tool_args,
              "tool_call_id": turn.tool_call_id, "metadata": metadata}
    return replace(turn, session_id=merge.parent_session_id, metadata=metadata, content_hash=hash_message(fields),
                   source_file=f"{MERGE_SOURCE}:{merge.id}", source_line=source.seq, parent_session_id=None,
                   fork_seq=None)
