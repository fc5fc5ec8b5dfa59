"""`forget`, `export`, `archive`, `fork` and `merge`: delete, export and restore memory, branch sessions
and merge them back."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memory_pipelines.cli.common import UsageError, _connect_url, _parse_moment, _require_session, _require_user
from memory_pipelines.config import Settings
from memory_pipelines.records import ARCHIVE_REASONS, MERGE_MODES


def _confirmed(args: argparse.Namespace, question: str) -> bool:
    """--yes, or a yes typed at a terminal; never silently on a pipe."""
    if args.yes:
        return True
    if args.dry_run or not sys.stdin.isatty():
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _print_removed(headline: str, removed: dict[str, int]) -> None:
    print(f"{headline}: {sum(removed.values())} rows")
    for table, count in removed.items():
        if count:
            print(f"  {table:<28} {count:>7}")


def cmd_forget(args: argparse.Namespace, settings: Settings) -> int:
    import psycopg

    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.lifecycle import forget, unforget

    pool = get_pool(_connect_url(settings))
    target = f"session {args.session} of user {args.user}" if args.session else f"user {args.user}"
    with pool.connection() as conn:
        if args.undo:
            with conn.transaction():
                lifted = unforget(conn, args.user, args.session)
            print("tombstone lifted: the transcripts can be ingested again" if lifted else "nothing was forgotten")
            return 0
        _require_user(conn, args.user)
        if args.session:
            _require_session(conn, args.session, args.user)
        # the same statements either way: counted, then kept or rolled back
        with conn.transaction():
            removed = forget(conn, args.user, args.session)
            if not args.yes:
                _print_removed(f"would forget {target}", removed)
            confirmed = _confirmed(args, f"Delete these {sum(removed.values())} rows for good?")
            if not confirmed:
                raise psycopg.Rollback()
    if confirmed:
        _print_removed(f"forgot {target}", removed)
        return 0
    if args.dry_run:
        print("dry run: nothing deleted")
        return 0
    raise UsageError("nothing deleted: pass --yes to delete, or --dry-run to only list what would go")


def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.lifecycle import export_markdown

    pool = get_pool(_connect_url(settings))
    with pool.connection() as conn:
        written = export_markdown(conn, Path(args.dir), args.user)
    print(f"wrote {len(written)} file(s) to {Path(args.dir).resolve()}")
    return 0


def _archive_selection(args: argparse.Namespace):
    from memory_pipelines.lifecycle import ArchiveSelection

    return ArchiveSelection(reason=args.reason, since=_parse_moment(args.since, "--since"), run_id=args.run,
                            user_id=args.user, ids=tuple(getattr(args, "ids", None) or ()),
                            limit=getattr(args, "limit", None))


def _archived_line(row) -> str:
    score = "" if row.score is None else f" score {row.score:.3f}"
    return (f"  #{row.id:<6} {row.archived_at:%Y-%m-%d %H:%M} {row.reason:<14} {row.source_table} {row.source_id}"
            f" · {row.user_id or 'global'} · {row.label[:60]!r}{score} · run {row.run_id}")


def cmd_archive_list(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import asdict

    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.lifecycle import archived_rows

    with get_pool(_connect_url(settings)).connection() as conn:
        rows = archived_rows(conn, _archive_selection(args))
    if args.json:
        print(json.dumps([asdict(r) for r in rows], default=str, ensure_ascii=False, indent=2))
        return 0
    print(f"{len(rows)} archived row(s)" + (f" (first {args.limit})" if args.limit and len(rows) == args.limit else ""))
    for row in rows:
        print(_archived_line(row))
    return 0


def cmd_archive_restore(args: argparse.Namespace, settings: Settings) -> int:
    import psycopg

    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.lifecycle import restore_selected

    selection = _archive_selection(args)
    if selection.empty:
        raise UsageError("say what to restore: archive row ids, --run RUN, --reason R and/or --since T (or --user U)")
    with get_pool(_connect_url(settings)).connection() as conn:
        with conn.transaction():
            results = restore_selected(conn, selection)
            if not args.yes:
                raise psycopg.Rollback()  # a dry run: the same restores, undone
    missing = sorted(set(selection.ids) - {r.row.id for r in results})
    restored = [r for r in results if r.conflict is None]
    print(f"{'restored' if args.yes else 'would restore'} {len(restored)} of {len(results)} archived row(s)")
    for result in results:
        extra = f" (with {len(result.restored) - 1} hidden fact row(s))" if len(result.restored) > 1 else ""
        print(_archived_line(result.row) + (f"  NOT RESTORED: {result.conflict}" if result.conflict else extra))
    for archive_id in missing:
        print(f"  #{archive_id}: no such archived row (a merged fact row comes back with its survivor)")
    if not args.yes:
        print("dry run: nothing restored; add --yes to restore these")
    if missing or len(restored) < len(results):
        return 1
    return 0


def cmd_fork(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.forks import ForkError, fork_session

    with get_pool(_connect_url(settings)).connection() as conn:
        try:
            fork = fork_session(conn, args.session, args.as_, args.at, actor=args.by)
        except ForkError as exc:
            raise UsageError(str(exc)) from None
    print(f"forked {fork.parent_session_id} after turn {fork.fork_seq} as {fork.session_id} (user {fork.user_id}): "
          f"its own turns start at seq {fork.fork_seq + 1} in the transcripts")
    return 0


def cmd_merge(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.forks import ForkError, merge_fork, restore_merge
    from memory_pipelines.llm import build_backend
    from memory_pipelines.llm.config import chat_config

    pool = get_pool(_connect_url(settings))
    if args.restore:
        if args.dry_run:
            raise UsageError("--restore takes no --dry-run: it undoes the merge in force")
        with pool.connection() as conn:
            try:
                restored = restore_merge(conn, args.fork, args.into, actor=args.by)
            except ForkError as exc:
                raise UsageError(str(exc)) from None
        print(f"restored merge #{restored.merge.id} ({restored.merge.mode}) of {args.fork} into {args.into}: "
              f"{restored.removed} merged turn(s) removed, {restored.brought_back} set-aside turn(s) back")
        print(f"next: {restored.merge.next_step} (distils {args.into} again from that day)")
        return 0
    if args.mode is None:
        raise UsageError("merge needs --mode append|replace|summarize (or --restore)")
    writer = build_backend(chat_config(settings)) if args.mode == "summarize" else None
    try:
        with pool.connection() as conn:
            report = merge_fork(conn, args.fork, args.into, args.mode, actor=args.by, dry_run=args.dry_run,
                                writer=writer)
    except ForkError as exc:
        raise UsageError(str(exc)) from None
    finally:
        if writer is not None:
            writer.close()
    merge = report.merge
    if report.already:
        print(f"already merged: #{merge.id} ({merge.mode}) by {merge.merged_by} at {merge.merged_at:%Y-%m-%d %H:%M}; "
              "nothing changed")
        return 0
    verb = "would merge" if report.dry_run else f"merged (#{merge.id})"
    aside = (f", {report.superseded} parent turn(s) {merge.superseded_first_seq}–{merge.superseded_last_seq} set aside"
             if report.superseded else "")
    print(f"{verb} {args.fork} turns {merge.fork_first_seq}–{merge.fork_last_seq} into {args.into} "
          f"({merge.mode}): parent turns {merge.parent_first_seq}–{merge.parent_last_seq}{aside}")
    for turn in report.written:
        text = " ".join(turn.content.split())
        print(f"  {turn.session_id}#{turn.seq} {turn.role}: {text[:100]}{'...' if len(text) > 100 else ''}")
    if not report.dry_run:
        print(f"next: {report.merge.next_step} (distils {args.into} again from that day)")
    return 0


def register_forget(sub: argparse._SubParsersAction) -> None:
    forget = sub.add_parser("forget", help="delete a user's (or session's) messages and everything derived; lists "
                                           "what would go and asks first (--yes to skip, --dry-run to stop there)")
    forget.add_argument("--user", required=True)
    forget.add_argument("--session")
    confirm = forget.add_mutually_exclusive_group()
    confirm.add_argument("--yes", action="store_true", help="delete without asking")
    confirm.add_argument("--dry-run", action="store_true", help="only list what would be deleted")
    forget.add_argument("--undo", action="store_true", help="lift the tombstone so the transcripts can be ingested again")
    forget.set_defaults(func=cmd_forget)


def register_export(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser("export", help="export knowledge entries")
    export.add_argument("format", choices=["markdown"])
    export.add_argument("dir")
    export.add_argument("--user", help="that user's entries and global ones (default: all)")
    export.set_defaults(func=cmd_export)


def register_archive(sub: argparse._SubParsersAction) -> None:
    archive = sub.add_parser("archive", help="memory_archive: list what decay, expiry and retention moved out, "
                                             "and restore it (in bulk, dry run first)")
    archive_actions = archive.add_subparsers(dest="action", required=True)
    for action, text in (("list", "archived rows, newest last"),
                         ("restore", "put archived rows back: ids, or every row of a run, reason or time; a dry run "
                                     "unless --yes")):
        command = archive_actions.add_parser(action, help=text)
        if action == "restore":
            command.add_argument("ids", nargs="*", type=int, help="archive row ids (as `archive list` shows them)")
        command.add_argument("--run", help="the rows one run archived (its run id)")
        command.add_argument("--reason", choices=ARCHIVE_REASONS, help="the rows archived for this reason")
        command.add_argument("--since", help="the rows archived at or after this date or time (UTC unless given)")
        command.add_argument("--user", help="one user's rows")
        if action == "list":
            command.add_argument("--limit", type=int, default=200, help="at most this many rows (default 200)")
            command.add_argument("--json", action="store_true")
            command.set_defaults(func=cmd_archive_list)
        else:
            command.add_argument("--yes", action="store_true", help="restore them (without it: only show what would)")
            command.set_defaults(func=cmd_archive_restore, limit=None)


def register_fork(sub: argparse._SubParsersAction) -> None:
    fork = sub.add_parser("fork", help="fork a session: a new session sharing its turns up to --at")
    fork.add_argument("session")
    fork.add_argument("--at", type=int, help="the last shared turn (default: the session's last)")
    fork.add_argument("--as", dest="as_", required=True, metavar="NEW", help="the fork's session id")
    fork.add_argument("--by", default="cli", help="who forks (recorded)")
    fork.set_defaults(func=cmd_fork)


def register_merge(sub: argparse._SubParsersAction) -> None:
    merge = sub.add_parser("merge", help="merge a fork's turns into its parent (append, replace or summarize), "
                                         "or --restore the merge in force")
    merge.add_argument("fork")
    merge.add_argument("--into", required=True, metavar="PARENT")
    merge.add_argument("--mode", choices=MERGE_MODES)
    merge.add_argument("--dry-run", action="store_true", help="print what the merge would write; change nothing")
    merge.add_argument("--restore", action="store_true", help="undo the merge in force of FORK into PARENT")
    merge.add_argument("--by", default="cli", help="who merges (recorded)")
    merge.set_defaults(func=cmd_merge)
