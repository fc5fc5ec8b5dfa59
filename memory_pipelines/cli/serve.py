"""`serve` and `keys`: serve memory to agents over MCP or the REST API, and the API keys they act with."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from dataclasses import replace

from memory_pipelines.cli.common import CliError, UsageError, _connect_url, _say_default_embedder
from memory_pipelines.config import Settings
from memory_pipelines.interrupts import STOP_SIGNALS, Interrupted


def cmd_keys(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.api.keys import create_key, list_keys, revoke_key
    from memory_pipelines.db import inventory as inventory_db
    from memory_pipelines.db.connection import get_pool

    pool = get_pool(_connect_url(settings))
    with pool.connection() as conn, conn.transaction():
        if args.action == "create":
            if args.admin == (args.user is not None):
                raise UsageError("name the key's user (--user U), or make an admin key (--admin): one of the two")
            if args.user is not None and not inventory_db.user_known(conn, args.user):
                print(f"memory-pipelines: warning: nothing is stored for user {args.user!r} yet; the key may write "
                      "their first memory", file=sys.stderr)
            key, secret = create_key(conn, args.user, admin=args.admin, name=args.name)
            print(f"created API key {key.id} for {'every user (admin)' if key.admin else 'user ' + key.user_id}; "
                  "it is shown once, here:", file=sys.stderr)
            print(secret)
            return 0
        if args.action == "revoke":
            try:
                key = revoke_key(conn, args.id)
            except LookupError as exc:
                raise CliError(f"{exc} (`memory-pipelines keys list` shows them)") from None
            print(f"revoked API key {key.id} ({key.prefix}…): requests with it now get 401")
            return 0
        keys = list_keys(conn)
    if args.json:
        print(json.dumps([vars(k) for k in keys], indent=2, default=str))
        return 0
    print(f"{'id':>4}  {'user':<14} {'name':<16} {'key':<13} {'created':<17} {'last used':<17} state")
    for k in keys:
        state = f"revoked {k.revoked_at:%Y-%m-%d %H:%M}" if k.revoked_at else "live"
        used = f"{k.last_used_at:%Y-%m-%d %H:%M}" if k.last_used_at else "never"
        print(f"{k.id:>4}  {'(admin)' if k.admin else k.user_id:<14} {k.name or '':<16} {k.prefix + '…':<13} "
              f"{k.created_at:%Y-%m-%d %H:%M}  {used:<17} {state}")
    if not keys:
        print("no API keys: `memory-pipelines keys create --user U` makes one")
    return 0


def _serving_database(settings: Settings) -> Settings:
    """Start (or find) the database and migrate it once, before any server process opens a
    pool: the settings the server processes are handed, naming it by MEMORY_DATABASE_URL."""
    from memory_pipelines.db.migrations import migrate

    url = _connect_url(settings)
    migrate(url)
    return replace(settings, database_url=url)


def _uvicorn_logging() -> dict:
    """uvicorn's own lines and the API's (one access line per request) on stderr, in every
    worker process; uvicorn's access log is off: it prints query strings, which hold what
    users ask."""
    handler = {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stderr"}
    return {"version": 1, "disable_existing_loggers": False,
            "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
            "handlers": {"stderr": handler},
            "loggers": {name: {"handlers": ["stderr"], "level": "INFO", "propagate": False}
                        for name in ("uvicorn", "memory_pipelines.api")}}


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from memory_pipelines.config import ApiSettings, handed_off

    settings = _serving_database(settings)
    _say_default_embedder(settings, "memory-pipelines: embedder ", sys.stderr)
    api = ApiSettings.from_settings(settings)
    if args.protocol == "mcp" and not args.http:
        import anyio

        from memory_pipelines.api.mcp_server import build_server
        from memory_pipelines.api.service import MemoryService

        if not settings.api_key:
            raise UsageError("MCP over stdio acts with the key in MEMORY_API_KEY: "
                             "`memory-pipelines keys create --user U` makes one")
        service = MemoryService.open(settings)
        try:
            anyio.run(build_server(service).run_stdio_async)
        finally:
            service.close()
        return 0
    if args.protocol == "mcp":
        from memory_pipelines.api.mcp_server import http_app
        from memory_pipelines.api.service import MemoryService

        if args.workers != 1:
            raise UsageError("--workers is for `serve http`; MCP over HTTP runs one process")
        service = MemoryService.open(settings)
        app: object = http_app(service, args.host)
        print(f"MCP over streamable HTTP at http://{args.host}:{args.port}/mcp", file=sys.stderr)
    else:
        app = "memory_pipelines.api.http:build_app"
        print(f"memory API at http://{args.host}:{args.port}/v1 (docs: /docs), {args.workers} worker(s)",
              file=sys.stderr)
    # uvicorn ends on SIGTERM or SIGINT gracefully (no new connections, requests in flight
    # finish), then raises the signal again, which uvicorn.run swallows: note it to say so
    stopped_by = []

    def note(signum, _frame):
        stopped_by.append(signum)
        raise Interrupted(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, note)
    with handed_off(settings):  # each worker process of `serve http` loads them
        uvicorn.run(app, factory=isinstance(app, str), host=args.host, port=args.port, workers=args.workers,
                    access_log=False, log_config=_uvicorn_logging(), timeout_graceful_shutdown=int(api.timeout) + 5)
    if stopped_by:
        raise Interrupted(stopped_by[0])
    return 0


def register_serve(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="serve memory to agents: MCP (stdio or HTTP) or the REST API; every "
                                         "request acts as one API key's user")
    protocols = serve.add_subparsers(dest="protocol", required=True)
    for protocol, text in (("mcp", "an MCP server: stdio (the key in MEMORY_API_KEY), or streamable HTTP with --http"),
                           ("http", "the REST API (/v1/…, OpenAPI docs at /docs)")):
        command = protocols.add_parser(protocol, help=text)
        if protocol == "mcp":
            command.add_argument("--http", action="store_true", help="streamable HTTP at /mcp instead of stdio")
        command.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
        command.add_argument("--port", type=int, default=8765 if protocol == "mcp" else 8080)
        command.add_argument("--workers", type=int, default=1, help="server processes (HTTP API)")
        command.set_defaults(func=cmd_serve)


def register_keys(sub: argparse._SubParsersAction) -> None:
    keys = sub.add_parser("keys", help="API keys for `serve`: create (shown once), list, revoke")
    key_actions = keys.add_subparsers(dest="action", required=True)
    create = key_actions.add_parser("create", help="a key for one user (or --admin: every user); prints it once")
    create.add_argument("--user", help="the user the key reads and writes memory of")
    create.add_argument("--admin", action="store_true", help="a key that may act for every user (searches are logged)")
    create.add_argument("--name", help="a label, e.g. the agent that holds it")
    listing = key_actions.add_parser("list", help="every key: user, label, first characters, last use, state")
    listing.add_argument("--json", action="store_true")
    revoke = key_actions.add_parser("revoke", help="revoke a key: its requests get 401 from then on")
    revoke.add_argument("id", type=int, help="the key's id (as `keys list` shows it)")
    for command in (create, listing, revoke):
        command.set_defaults(func=cmd_keys, json=False)
