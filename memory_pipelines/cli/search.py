"""`context`, `search`, `turns` and `tree`: read memory as an agent would be served it."""

from __future__ import annotations

import argparse
import json
import sys

from memory_pipelines.cli.common import (CliError, UsageError, _connect_url, _parse_moment, _require_session,
                                         _require_user)
from memory_pipelines.config import DecaySettings, Settings
from memory_pipelines.records import DEFAULT_BUDGET_CHARS, SEARCH_SCOPES


def cmd_context(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.llm import build_backend
    from memory_pipelines.llm.config import decision_config
    from memory_pipelines.session_context import context_for

    pool = get_pool(_connect_url(settings))
    with pool.connection() as conn:
        _require_session(conn, args.session)
    decision = None if args.all else build_backend(decision_config(settings))
    try:
        with pool.connection() as conn:
            context = context_for(conn, args.session, args.request, decision=decision,
                                  limit=settings.context_messages if args.limit is None else args.limit,
                                  include_forks=args.include_forks)
    finally:
        if decision is not None:
            decision.close()
    if args.json:
        print(json.dumps(context.to_json(args.request or ""), ensure_ascii=False, indent=2))
        return 0
    print(f"# context for {context.session_id} ({len(context.messages)} messages, summary: {context.relevance})")
    for message in context.chat_messages(args.request or ""):
        print(f"\n[{message['role']}]\n{message['content']}")
    return 0


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.embed import build_embedder, embed_config
    from memory_pipelines.search import UnifiedMemorySearch, format_served

    if args.user is None and not args.admin:
        raise UsageError("--user is required (searching every user needs --admin)")
    if args.mode == "forest" and args.user is None:
        raise UsageError("--mode forest descends one user's trees: name --user")
    pool = get_pool(_connect_url(settings))
    with pool.connection() as conn:
        if args.user is not None:
            _require_user(conn, args.user)
        if args.session is not None:
            _require_session(conn, args.session, args.user)
    embedder = build_embedder(embed_config(settings))
    try:
        with pool.connection() as conn:
            search = UnifiedMemorySearch(conn, embedder, admin=args.admin)
            served = search.serve(args.query, scope=args.scope, k=args.k, user_id=args.user,
                                  session_id=args.session, current_session_id=args.session,
                                  budget_chars=args.budget or None, budget_tokens=args.budget_tokens,
                                  now=_parse_moment(args.now, "--now"), mode=args.mode,
                                  include_forks=args.include_forks)
    finally:
        embedder.close()
    for warning in search.warnings:
        print(f"memory-pipelines: warning: {warning.message}", file=sys.stderr)
    if args.json:
        print(json.dumps(served.to_json(args.query, args.scope), ensure_ascii=False, indent=2))
    else:
        print(format_served(args.query, args.scope, served))
    return 0


def cmd_turns(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.search import get_turns_by_score

    if not 1 <= args.k <= 100:
        raise UsageError(f"--k must be between 1 and 100, not {args.k}")
    with get_pool(_connect_url(settings)).connection() as conn:
        _require_user(conn, args.user)
        if args.session is not None:
            _require_session(conn, args.session, args.user)
        scores = get_turns_by_score(conn, args.user, args.session, args.k, rules=DecaySettings.from_settings(settings))
    if args.json:
        print(json.dumps(scores.to_json(), ensure_ascii=False, indent=2))
        return 0
    scope = f"session {args.session}" if args.session else f"user {args.user}"
    as_of = f"{scores.as_of:%Y-%m-%d %H:%M}" if scores.as_of else "never (nothing ingested)"
    print(f"{len(scores.turns)} of {scores.considered} turn(s) of {scope} by decay score, as of {as_of} "
          f"(base rate {scores.base_rate}/h)")
    for s in scores.turns:
        cited = ", ".join(sorted({c.kind for c in s.cited_by})) or "nothing"
        text = " ".join(s.turn.body.split())
        print(f"  {s.score:6.3f}  importance {s.importance:.2f} (cited by {cited}), {s.age_hours / 24:.1f} days old, "
              f"{s.turn.access_count} access(es)  {s.turn.session_id}#{s.turn.seq} {s.turn.role}: "
              f"{text[:100]}{'...' if len(text) > 100 else ''}")
    return 0


def _print_tree(title: str, nodes, depth: int | None) -> None:
    from memory_pipelines.rules.text import clip

    children: dict[str | None, list] = {}
    for node in nodes:
        children.setdefault(node.parent_key, []).append(node)
    print(title)

    def show(node, indent: int) -> None:
        spans = ", ".join(f"{s.session_id}#{s.seq_start}-{s.seq_end}" for s in node.spans[:3])
        more = f" +{len(node.spans) - 3} span(s)" if len(node.spans) > 3 else ""
        print(f"{'  ' * indent}- {node.node_key}  {node.started_at:%Y-%m-%d %H:%M} .. {node.ended_at:%Y-%m-%d %H:%M}"
              f"  {spans}{more}  keys: {', '.join(node.keys[:4]) or '-'}")
        print(f"{'  ' * indent}  {clip(node.summary, 160)}")
        if depth is None or indent < depth:  # the top is level 1
            for child in sorted(children.get(node.node_key, []), key=lambda c: c.position):
                show(child, indent + 1)

    for top in sorted(children.get(None, []), key=lambda n: (n.started_at, n.position)):
        show(top, 1)


def cmd_tree_show(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.db import tree as tree_db
    from memory_pipelines.db.connection import get_pool

    from memory_pipelines.core.temporal_tree import entity_tree_key

    if args.depth is not None and args.depth < 1:
        raise UsageError(f"--depth must be at least 1, not {args.depth}")
    with get_pool(_connect_url(settings)).connection() as conn:
        _require_user(conn, args.user)
        if args.entity is not None:
            nodes = tree_db.tree_nodes(conn, args.user, "entity", entity_tree_key(args.user, args.entity))
            if not nodes:
                known = tree_db.user_entity_trees(conn, [args.user])
                names = ", ".join(k.removeprefix(f"{args.user}:") for k in sorted(known)[:10]) or "none yet"
                raise CliError(f"no entity tree of {args.entity!r} for {args.user}: entities with a tree: {names}")
            leaves = sum(n.level == 0 for n in nodes)
            _print_tree(f"entity tree of {args.entity} ({args.user}): {leaves} item(s) (relations, entries, facts) "
                        "by day, month and year", nodes, args.depth)
            return 0
        if args.session is not None:
            _require_session(conn, args.session, args.user)
            sessions = [args.session]
            scene = None
        else:
            sessions = tree_db.user_session_trees(conn, args.user)
            scene = tree_db.tree_nodes(conn, args.user, "scene", args.user)
        trees = {s: tree_db.tree_nodes(conn, args.user, "session", s) for s in sessions}
    if not any(trees.values()) and not scene:
        raise CliError(f"no tree of {args.session or args.user!r} yet: its chunks are grown into trees by "
                       "`memory-pipelines run` (asset memory_tree) once a session has chunks")
    if scene:
        leaves = sum(n.level == 0 for n in scene)
        _print_tree(f"scene tree of {args.user}: {leaves} session(s) by day, week and month", scene, args.depth)
    for session_id, nodes in trees.items():
        if nodes:
            levels = max(n.level for n in nodes) + 1
            _print_tree(f"session tree of {session_id}: {sum(n.level == 0 for n in nodes)} chunk(s), "
                        f"{levels} level(s)", nodes, args.depth)
    return 0


def register_context(sub: argparse._SubParsersAction) -> None:
    ctx = sub.add_parser("context", help="a session's turn context: last messages and the prior summary")
    ctx.add_argument("session")
    ctx.add_argument("--request", help="the incoming user input (the decision model keeps relevant entries)")
    ctx.add_argument("--limit", type=int, help="last messages to include (default: the context window, "
                                               "MEMORY_CONTEXT_MESSAGES, 16)")
    ctx.add_argument("--all", action="store_true", help="keep every summary entry (no decision model)")
    ctx.add_argument("--include-forks", action="store_true",
                     help="name the session's forks too (other branches), each with what it is about")
    ctx.add_argument("--json", action="store_true")
    ctx.set_defaults(func=cmd_context)


def register_search(sub: argparse._SubParsersAction) -> None:
    search = sub.add_parser("search", help="unified memory search: facts, raw excerpts, sketches")
    search.add_argument("query")
    search.add_argument("--user", help="whose memory (required unless --admin)")
    search.add_argument("--scope", default="all", choices=SEARCH_SCOPES,
                        help="all (default), facts, raw, sketches or knowledge")
    search.add_argument("--k", type=int, default=5, help="hits per store at most, 1-20 (default 5)")
    search.add_argument("--budget", type=int, default=DEFAULT_BUDGET_CHARS,
                        help=f"characters the hits may take, in tier order (default {DEFAULT_BUDGET_CHARS:,}; "
                             "0: no budget)")
    search.add_argument("--budget-tokens", type=int, help="the budget in tokens instead (estimated, 4 characters each)")
    search.add_argument("--now", help="what times in the query count from (default: the user's newest turn)")
    search.add_argument("--session", help="narrow raw excerpts to one session (and rank its notes first)")
    search.add_argument("--mode", default="flat", choices=("flat", "forest"),
                        help="how passages are found: the flat turn index (default) or forest recall down the "
                             "temporal tree (each passage with its path of node summaries)")
    search.add_argument("--include-forks", action="store_true",
                        help="serve forked sessions' passages too, each labelled with its fork point")
    search.add_argument("--admin", action="store_true", help="search every user")
    search.add_argument("--json", action="store_true")
    search.set_defaults(func=cmd_search)


def register_turns(sub: argparse._SubParsersAction) -> None:
    turns = sub.add_parser("turns", help="a user's (or session's) turns by decay score: importance from the entries "
                                         "and facts citing them, age, accesses (each listed turn counts an access)")
    turns.add_argument("--user", required=True)
    turns.add_argument("--session", help="one of the user's sessions")
    turns.add_argument("--k", type=int, default=10, help="turns to list, 1-100 (default 10)")
    turns.add_argument("--json", action="store_true", help="every score's parts too")
    turns.set_defaults(func=cmd_turns)


def register_tree(sub: argparse._SubParsersAction) -> None:
    tree = sub.add_parser("tree", help="the temporal tree: a user's scene tree and session trees")
    tree_actions = tree.add_subparsers(dest="action", required=True)
    show = tree_actions.add_parser("show", help="print a user's scene tree and session trees (or one session's "
                                               "tree) with time spans, seq spans, keys and summaries")
    show.add_argument("--user", required=True)
    target = show.add_mutually_exclusive_group()
    target.add_argument("--session", help="only this session's tree")
    target.add_argument("--entity", help="an entity's tree: what memory holds about it, by day, month and year")
    show.add_argument("--depth", type=int, help="levels to print from the top (default: all)")
    show.set_defaults(func=cmd_tree_show)
