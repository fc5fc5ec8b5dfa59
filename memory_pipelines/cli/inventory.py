"""`quarantine`, `embeddings`, `users`, `sessions`, `lineage` and `formats`: what is stored, refused
or about to be read."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memory_pipelines.cli.common import CliError, _connect_url, _positive_int, _require_user
from memory_pipelines.config import Settings


def _quarantine_line(row) -> str:
    record = f" · {row.session_id} seq {row.seq}" if row.seq is not None else (
        f" · {row.session_id}" if row.session_id else "")
    resolved = (f"  resolved {row.resolved_at:%Y-%m-%d %H:%M} by run {row.resolved_by_run}"
                if row.resolved_at is not None else "")
    return (f"  {row.source_file}:{row.source_line}  {row.reason}  {row.detail}{record}"
            f" · run {row.run_id} {row.quarantined_at:%Y-%m-%d %H:%M}{resolved}")


def cmd_quarantine(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import asdict

    from memory_pipelines.db import transcripts as transcripts_db
    from memory_pipelines.db.connection import get_pool

    open_rows, resolved = not args.resolved, args.resolved or args.all
    with get_pool(_connect_url(settings)).connection() as conn:
        rows = transcripts_db.quarantine_rows(conn, open_rows=open_rows, resolved=resolved, reason=args.reason,
                                              limit=args.limit)
        open_count, resolved_count = transcripts_db.quarantine_totals(conn, args.reason)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], default=str, ensure_ascii=False, indent=2))
        return 0
    shown = f" (first {args.limit})" if len(rows) == args.limit else ""
    of = f" {args.reason}" if args.reason else ""
    if args.resolved:
        print(f"{resolved_count}{of} refusal(s) resolved by a later run{shown}; {open_count} still open")
    else:
        where = "listed after them" if args.all else "--resolved lists them"
        print(f"{open_count}{of} refusal(s) open{shown}"
              + (f"; {resolved_count} resolved by a later run ({where})" if resolved_count else ""))
    for row in rows:
        print(_quarantine_line(row))
    return 0


def cmd_embeddings(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.db import search as search_db
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.embed import EmbeddingError, build_embedder, embed_config

    embedder = build_embedder(embed_config(settings))
    try:
        configured = embedder.model_id
    except EmbeddingError as exc:
        configured = f"{embedder.config.backend}:{embedder.config.model}:? ({exc})"
    finally:
        embedder.close()
    with get_pool(_connect_url(settings)).connection() as conn:
        rows = search_db.embedding_model_counts(conn)
    print(f"configured embedder: {configured}")
    for table, model, count in rows:
        if model is None:
            state = "not embedded yet: the next run embeds them"
        elif model == configured:
            state = "configured"
        else:
            state = "another model: the next run re-embeds them; search uses text until then"
        print(f"  {table:<18} {model or '-':<40} {count:>8}  {state}")
    if not rows:
        print("  nothing stored yet")
    return 0


def cmd_users(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.db import inventory as inventory_db
    from memory_pipelines.db.connection import get_pool

    with get_pool(_connect_url(settings)).connection() as conn:
        rows = inventory_db.stored_users(conn)
    print(f"{len(rows)} user(s)")
    if rows:
        print(f"  {'user':<24} {'sessions':>8} {'messages':>9} {'facts':>6} {'entries':>7} {'chunks':>6} "
              f"{'archived':>8}  first .. last message")
    for user, sessions, messages, first, last, facts, entries, chunks, archived in rows:
        print(f"  {user:<24} {sessions:>8} {messages:>9} {facts:>6} {entries:>7} {chunks:>6} {archived:>8}  "
              f"{first:%Y-%m-%d} .. {last:%Y-%m-%d}")
    return 0


def cmd_sessions(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.db import inventory as inventory_db
    from memory_pipelines.db.connection import get_pool

    with get_pool(_connect_url(settings)).connection() as conn:
        _require_user(conn, args.user)
        rows = inventory_db.user_sessions(conn, args.user)
    forks = sum(r[8] is not None for r in rows)
    subagents = sum(r[10] is not None for r in rows)
    print(f"{len(rows)} session(s) of {args.user}" + (f", {forks} of them forks" if forks else "")
          + (f", {subagents} subagents' sessions" if subagents else "")
          + (" (under their parent)" if forks or subagents else ""))
    children: dict[str, list[tuple]] = {}
    for row in rows:
        children.setdefault(row[8] or row[10], []).append(row)

    def show(row: tuple, depth: int) -> None:
        session, agent, first, last, messages, chunks, version, extracted, fork_parent, fork_seq, launcher, at = row
        parent = fork_parent or launcher
        when = f"{first:%Y-%m-%d %H:%M} .. {last:%Y-%m-%d %H:%M}" if first else f"{'no turns of its own yet':<34}"
        how = (f"fork after turn {fork_seq}" if fork_parent else
               f"subagent launched at turn {at}" if at is not None else "subagent")
        name = f"└─ {session} ({how})" if parent else session
        state = "facts extracted" if extracted else "facts with a merge" if fork_parent else "not extracted yet"
        print(f"  {'   ' * max(depth - 1, 0)}{name:<{32 if not depth else 38}} {agent or '-':<10} {when}  "
              f"{messages:>5} messages  {chunks:>3} chunks  summary v{version or 0}  {state}")
        for child in children.get(session, []):
            show(child, depth + 1)

    known = {r[0] for r in rows}
    for row in rows:  # mainline sessions, and forks or subagents whose parent is another user's or gone
        parent = row[8] or row[10]
        if parent is None or parent not in known:
            show(row, 0 if parent is None else 1)
    return 0


def cmd_lineage(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.lineage import lineage, render

    pool = get_pool(_connect_url(settings))
    with pool.connection() as conn:
        try:
            report = lineage(conn, args.kind, args.id)
        except (LookupError, ValueError) as exc:
            raise CliError(str(exc)) from None
    print(json.dumps(report, default=str, ensure_ascii=False, indent=2) if args.json else render(report))
    return 0


def cmd_formats(args: argparse.Namespace, settings: Settings) -> int:
    """The format each transcript file would be read in, and what decided it: before a first run,
    or when a file is refused as canonical."""
    from memory_pipelines.formats import detect
    from memory_pipelines.sources.base import TranscriptSourceError
    from memory_pipelines.sources.local import LocalStore

    forced = settings.transcript_format
    found = []
    for path in map(Path, args.paths):
        store = LocalStore(path)
        try:
            listing = store.list_objects()
        except TranscriptSourceError as exc:
            raise CliError(str(exc)) from None
        for obj in listing.objects:
            detection = detect(obj.name, store.read(obj).data)
            found.append({"file": obj.name, "format": forced if forced != "auto" else detection.format,
                          "detected": detection.format, "saw": detection.saw})
        found.extend({"file": name, "format": None, "detected": None, "saw": "not a transcript file (skipped)"}
                     for name in listing.skipped)
    if args.json:
        print(json.dumps(found, ensure_ascii=False, indent=2))
        return 0
    for row in found:
        print(f"{row['file']}: {row['format'] or '-'} — {row['saw']}")
    if forced != "auto":
        print(f"MEMORY_TRANSCRIPT_FORMAT={forced}: every file is read as {forced}, whatever was detected")
    return 0


def register_quarantine(sub: argparse._SubParsersAction) -> None:
    from memory_pipelines.records import QuarantineReason

    quarantine = sub.add_parser("quarantine", help="refused records still open (file and line, reason, detail, run); "
                                                   "--resolved: those a later run stored, with when and which run")
    shown = quarantine.add_mutually_exclusive_group()
    shown.add_argument("--resolved", action="store_true", help="only the refusals a later run resolved")
    shown.add_argument("--all", action="store_true", help="open and resolved refusals")
    quarantine.add_argument("--reason", choices=[r.value for r in QuarantineReason], help="one reason's refusals")
    quarantine.add_argument("--limit", type=_positive_int, default=200, help="at most this many rows (default 200)")
    quarantine.add_argument("--json", action="store_true", help="the rows as JSON, raw text included")
    quarantine.set_defaults(func=cmd_quarantine)


def register_embeddings(sub: argparse._SubParsersAction) -> None:
    embeddings = sub.add_parser("embeddings", help="stored vectors per table and model, against the configured embedder")
    embeddings.add_argument("action", choices=["status"])
    embeddings.set_defaults(func=cmd_embeddings)


def register_users(sub: argparse._SubParsersAction) -> None:
    users = sub.add_parser("users", help="the users memory is stored for, with counts")
    users.set_defaults(func=cmd_users)


def register_sessions(sub: argparse._SubParsersAction) -> None:
    sessions = sub.add_parser("sessions", help="a user's sessions: times, messages, chunks, summary, extraction")
    sessions.add_argument("--user", required=True)
    sessions.set_defaults(func=cmd_sessions)


def register_lineage(sub: argparse._SubParsersAction) -> None:
    lin = sub.add_parser("lineage", help="where a row came from: source messages, run, model, calls, merges")
    lin.add_argument("kind", choices=["fact", "chunk", "entry", "turn", "summary"])
    lin.add_argument("id", help="the row id (a session id for summary)")
    lin.add_argument("--json", action="store_true")
    lin.set_defaults(func=cmd_lineage)


def register_formats(sub: argparse._SubParsersAction) -> None:
    formats = sub.add_parser("formats", help="the format each transcript file is read in and what decided it "
                                             "(reads files only, no database)")
    formats.add_argument("paths", nargs="+", metavar="PATH", help="a transcript file or a folder (read recursively)")
    formats.add_argument("--json", action="store_true")
    formats.set_defaults(func=cmd_formats)
