"""`db`, `ui`, `doctor` and `config`: the database server, the Dagster UI, and what to check when
something is wrong."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from pathlib import Path

from memory_pipelines.cli.common import CliError, _connect_url
from memory_pipelines.config import ConfigError, Settings
from memory_pipelines.interrupts import Interrupted


def cmd_db(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.db import embedded
    from memory_pipelines.db.migrations import has_extension, migrate

    external = settings.database_url is not None
    if args.action == "url":
        print(_connect_url(settings))
    elif args.action == "start":
        if external:
            print("MEMORY_DATABASE_URL is set: nothing to start")
        else:
            url = embedded.start(settings.home)
            migrate(url)
            print(f"running: {url}")
    elif args.action == "stop":
        if external:
            print("MEMORY_DATABASE_URL is set: nothing to stop")
        else:
            print("stopped" if embedded.stop(settings.home) else "not running")
    elif args.action == "migrate":
        url = _connect_url(settings)
        applied = migrate(url)
        print(f"applied {len(applied)} migration(s)" + "".join(f"\n  {m.version:04d}_{m.name}" for m in applied))
    elif args.action == "status":
        import psycopg

        if external:
            url = settings.database_url
            print("database: external (MEMORY_DATABASE_URL)")
        else:
            state = embedded.status(settings.home)
            print(f"database: embedded, data in {state.pgdata}")
            print(f"server:   {'running, pid ' + str(state.pid) if state.running else 'stopped'}")
            if not state.running:
                return 0
            url = state.url
        try:
            with psycopg.connect(url, connect_timeout=5) as conn:
                version = conn.execute("SHOW server_version").fetchone()[0]
                print(f"postgres: {version}")
                for ext in ("vector", "pg_trgm"):
                    print(f"{ext + ':':<9} {'installed' if has_extension(conn, ext) else 'missing'}")
        except psycopg.Error as exc:
            raise CliError(f"cannot connect: {str(exc).strip().splitlines()[0]}") from None
    return 0


def _workspace_args() -> list[str]:
    for folder in (Path.cwd(), Path(__file__).resolve().parents[2]):  # the checkout holding memory_pipelines/
        if (folder / "workspace.yaml").exists() and (folder / "assets" / "definitions.py").exists():
            return ["-w", str(folder / "workspace.yaml")]
    return ["-m", "assets.definitions"]


def cmd_ui(args: argparse.Namespace, settings: Settings) -> int:
    from assets.run.runner import ensure_dagster_home

    # start the embedded server before Dagster's processes join it: its runs and events live there
    ensure_dagster_home(settings.home, _connect_url(settings), max_concurrent_runs=settings.max_concurrent_runs)
    command = [sys.executable, "-m", "dagster", "dev", *_workspace_args(), "-h", args.host, "-p", str(args.port)]
    # A shell that started us in the background leaves SIGINT ignored, and dagster dev maps
    # SIGTERM to SIGINT: restore the default in the child so both stop it.
    child = subprocess.Popen(command, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    stopped_by = []

    def forward(signum, _frame):
        stopped_by.append(signum)
        child.send_signal(signal.SIGINT)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        status = child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    if stopped_by:
        raise Interrupted(stopped_by[0])
    return status


def _derived_values(settings: Settings) -> dict[str, object]:
    """What the settings that follow others resolve to: the model and embedder families."""
    from memory_pipelines.embed import embed_config
    from memory_pipelines.llm.config import FIELD_BY_SUFFIX, chat_config, decision_config

    from assets.partition_start import derived_start

    values: dict[str, object] = {"MEMORY_HOME": settings.home, "MEMORY_PARTITION_START": derived_start(settings)}
    for prefix, model in (("MEMORY_LLM", chat_config(settings)), ("MEMORY_DECISION", decision_config(settings))):
        values.update({f"{prefix}_{suffix}": getattr(model, name) for suffix, name in FIELD_BY_SUFFIX.items()})
    embed = embed_config(settings)
    values.update({f"MEMORY_EMBED_{suffix}": getattr(embed, name) for suffix, name in (
        ("BACKEND", "backend"), ("BASE_URL", "base_url"), ("MODEL", "model"), ("API_KEY", "api_key"),
        ("DIM", "dimension"), ("BATCH", "batch_size"))})
    return values


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.doctor import FAIL, as_json, diagnose

    checks = diagnose(settings, echo=None if args.json else lambda check: print(check.line(), flush=True))
    if args.json:
        print(json.dumps(as_json(checks), indent=2))
    return 1 if any(check.status == FAIL for check in checks) else 0


def cmd_config(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.config import SPECS, mask_url, unreadable, variable_text

    problems, values = unreadable(settings), {}
    for name, spec in SPECS.items():
        try:
            values[name] = getattr(settings, spec.field)
        except ConfigError:
            pass
    derived = {} if problems else _derived_values(settings)
    rows = []
    for name, spec in SPECS.items():
        if name not in values:
            rows.append((name, "(invalid)", "environment"))
            continue
        value, source = values[name], "environment" if variable_text(name) is not None else "default"
        if variable_text(name) is None and spec.derived and name in derived:
            value, source = derived[name], f"derived: {spec.derived}"
        if value is None or value == "":
            shown = "-"
        elif "://" in str(value):
            shown = mask_url(str(value))  # a postgresql:// transcript source names its password too
        elif spec.secret:
            shown = "***"
        else:
            shown = str(value)
        rows.append((name, shown, source))
    width = max(len(name) for name, _, _ in rows)
    for name, shown, source in rows:
        print(f"{name:<{width}}  {shown:<36}  {source}")
    if problems:
        raise ConfigError("\n".join(problems))
    return 0


def register_db(sub: argparse._SubParsersAction) -> None:
    db = sub.add_parser("db", help="the database: status, start, stop, migrate, url")
    db.add_argument("action", choices=["status", "start", "stop", "migrate", "url"])
    db.set_defaults(func=cmd_db)


def register_ui(sub: argparse._SubParsersAction) -> None:
    ui = sub.add_parser("ui", help="the Dagster UI on workspace.yaml")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=3000)
    ui.set_defaults(func=cmd_ui)


def register_doctor(sub: argparse._SubParsersAction) -> None:
    doctor = sub.add_parser("doctor", help="what to check when something is wrong: the settings, this CPU, the "
                                           "database (and a self-test on a throwaway server), disk, the embedder, "
                                           "model servers, Dagster's home; a line each, ok/warn/fail with the fix; "
                                           "exit 1 on a fail")
    doctor.add_argument("--json", action="store_true", help="the checks as a JSON list")
    doctor.set_defaults(func=cmd_doctor)


def register_config(sub: argparse._SubParsersAction) -> None:
    config = sub.add_parser("config", help="the effective settings (secrets masked) and where each came from; "
                                           "exit 2 when one is invalid")
    config.set_defaults(func=cmd_config)
