"""`memory-pipelines`: run the pipeline, manage the embedded database, open the UI."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from memory_pipelines.cli import bench, curation, database, inventory, run, search, serve
from memory_pipelines.cli.common import CliError, UsageError
from memory_pipelines.cli.database import cmd_config, cmd_doctor
from memory_pipelines.config import ConfigError, Settings, load, unknown_settings, unreadable
from memory_pipelines.interrupts import Interrupted, raise_on_stop_signals


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memory-pipelines", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    # each command's parser is defined next to its handler; added in the order --help lists them
    for register in (run.register_run, run.register_reshard, database.register_db, database.register_ui,
                     search.register_context, search.register_search, bench.register_bench,
                     curation.register_forget, curation.register_export, curation.register_archive,
                     inventory.register_quarantine, inventory.register_embeddings, inventory.register_users,
                     inventory.register_sessions, search.register_turns, curation.register_fork,
                     curation.register_merge, search.register_tree, database.register_doctor,
                     database.register_config, inventory.register_lineage, serve.register_serve,
                     serve.register_keys, inventory.register_formats, run.register_generate):
        register(sub)
    return parser


def _error(message: str) -> None:
    for line in message.splitlines():
        print(f"memory-pipelines: error: {line}", file=sys.stderr)


# what a command was doing when the database went away, as its one-line error says it
DOING = {"run": "running the pipeline", "search": "searching", "context": "reading a session's context",
         "turns": "listing turns", "serve": "serving", "forget": "forgetting", "merge": "merging"}


# commands that only read memory: a bad setting they do not use is a warning for them, not a
# refusal (one they do use still refuses, when it is read)
READING_COMMANDS = frozenset({"users", "sessions", "search", "context", "turns", "tree", "lineage", "embeddings",
                              "export", "formats"})


def _process_settings(command: str, reports_settings: bool) -> tuple[Settings, list[str]]:
    """The command's settings, every one parsed before anything runs, and the warnings to
    print. A command that reports on the settings (`config`, `doctor`) and a reading one get
    their bad values as unreadable (reading one refuses then); any other refuses at once."""
    settings = load(lenient=reports_settings or command in READING_COMMANDS)
    if reports_settings:
        return settings, []
    return settings, [*(f"{line} (ignored unless `{command}` needs it)" for line in unreadable(settings)),
                      *unknown_settings()]


def _server_log(settings: Settings):
    """Where the embedded server's log ends as the command begins (its settings unreadable: none)."""
    from memory_pipelines.db.outage import ServerLog

    try:
        return ServerLog.of_home(settings.home, settings.database_url)
    except ConfigError:
        return ServerLog(None)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        # a pool refilling while the server restarts, a pipeline ended on a lost connection: the
        # command's own error says what happened, in one line
        logging.getLogger("psycopg").setLevel(logging.ERROR)
    try:
        settings, warnings = _process_settings(args.command, args.func in (cmd_config, cmd_doctor))
    except ConfigError as exc:
        _error(str(exc))
        return 2
    server_log = _server_log(settings)
    raise_on_stop_signals()
    try:
        for warning in warnings:
            print(f"memory-pipelines: warning: {warning}", file=sys.stderr)
        return args.func(args, settings)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: stopped, not failed
        stopped = exc if isinstance(exc, Interrupted) else Interrupted()
        print(f"memory-pipelines: stopped by {signal.Signals(stopped.signum).name}"
              + (f": {exc.__cause__}" if exc.__cause__ else ""), file=sys.stderr)
        return stopped.exit_status
    except (UsageError, ConfigError) as exc:
        _error(str(exc))
        return 2
    except CliError as exc:
        _error(str(exc))
        return 1
    except Exception as exc:  # noqa: BLE001 - the CLI promises a one-line reason, never a traceback
        from memory_pipelines.db.outage import DatabaseLost, connection_lost

        if connection_lost(exc):
            _error(str(DatabaseLost(DOING.get(args.command, f"running `{args.command}`"), server_log)))
            if args.verbose:
                raise
            return 1
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"memory-pipelines: error: {type(exc).__name__}: {reason}", file=sys.stderr)
        if args.verbose:
            raise
        return 1
