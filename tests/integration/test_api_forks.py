"""Forks, merges and forest recall served: the HTTP API and the MCP server (through the SDK's
own client, over stdio) on the branched sample, each answer checked against the query module
and kept to the key's user."""

from __future__ import annotations

import anyio
import httpx
import psycopg
import pytest

from assets.definitions import all_assets
from memory_pipelines.config import PACKAGE_DIR
from memory_pipelines.search import UnifiedMemorySearch
from memory_pipelines.session_context import context_for
from tests.helpers import free_port, materialize_partitions, start_server
from tests.integration.test_api_http import keys_cli, server_env
from tests.integration.test_api_mcp import stdio_session, structured

PARENT, FORK = "s-gina-0001", "s-gina-0001-fly"


@pytest.fixture(scope="module")
def served(make_module_database, tmp_path_factory):
    url = make_module_database()
    materialize_partitions(all_assets, ["2026-11-02"], url, PACKAGE_DIR / "sample_data" / "branched")
    home = tmp_path_factory.mktemp("forks-api")
    env = server_env(url, home)
    keys = {who: keys_cli(env, "create", "--user", who).stdout.strip() for who in ("gina", "bob")}
    assert all(k.startswith("mpk_") for k in keys.values())
    return url, env, keys, home


def test_http_forks_merges_and_restores_for_the_keys_user_only(served):
    url, env, keys, home = served
    server = start_server(["http", "--port", str(free_port())], env, home / "server.log")
    try:
        gina = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['gina']}"}, timeout=60)
        bob = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['bob']}"}, timeout=60)
        hidden = gina.get("/v1/search", params={"q": "Fly.io volume billing_data", "scope": "raw"}).json()
        assert hidden["hits"] and all(h["session_id"] != FORK for h in hidden["hits"])
        shown = gina.get("/v1/search", params={"q": "Fly.io volume billing_data", "scope": "raw",
                                               "include_forks": "true"}).json()
        assert shown["hits"][0]["session_id"] == FORK and shown["hits"][0]["fork"]["parent_session_id"] == PARENT
        assert "⑂ fork of s-gina-0001 after turn 6" in shown["text"]
        forest = gina.post("/v1/search", json={"q": "billing-worker Kubernetes helm", "scope": "raw",
                                               "mode": "forest"}).json()
        assert forest["hits"] and forest["hits"][0]["path"][0].startswith("month:2026-11")
        made = gina.post("/v1/forks", json={"session_id": PARENT, "new_session_id": "s-gina-0001-b", "at": 2})
        assert made.status_code == 200 and made.json()["fork"]["fork_seq"] == 2, made.text
        assert bob.post("/v1/forks", json={"session_id": PARENT, "new_session_id": "x"}).status_code == 403
        context = gina.get(f"/v1/context/{PARENT}", params={"include_forks": "true", "limit": 2}).json()
        assert [f["session_id"] for f in context["forks"]] == [FORK, "s-gina-0001-b"]
        assert gina.get(f"/v1/context/{PARENT}", params={"limit": 2}).json()["forks"] == []
        assert bob.post("/v1/merges", json={"fork_session_id": FORK, "parent_session_id": PARENT,
                                            "mode": "append"}).status_code == 403
        refused = gina.post("/v1/merges", json={"fork_session_id": FORK, "parent_session_id": PARENT})
        assert refused.status_code == 400 and "mode is required" in refused.text
        dry = gina.post("/v1/merges", json={"fork_session_id": FORK, "parent_session_id": PARENT, "mode": "replace",
                                            "dry_run": True}).json()
        assert dry["dry_run"] and [t["seq"] for t in dry["written"]] == [7, 8, 9, 10] and dry["superseded"] == 4
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT count(*) FROM session_merges").fetchone()[0] == 0
        merged = gina.post("/v1/merges", json={"fork_session_id": FORK, "parent_session_id": PARENT,
                                               "mode": "replace"}).json()
        assert merged["merge"]["merged_by"].startswith("api:key-") and merged["next_step"].endswith("2026-11-02")
        assert gina.post("/v1/merges", json={"fork_session_id": FORK, "parent_session_id": PARENT,
                                             "mode": "replace"}).json()["already"]
        restored = gina.post("/v1/merges", json={"fork_session_id": FORK, "parent_session_id": PARENT,
                                                 "restore": True}).json()
        assert (restored["removed"], restored["brought_back"]) == (4, 4)
    finally:
        assert server.stop(), server.output()[-2000:]


def test_mcp_tree_search_fork_and_merge_answer_as_the_query_module(served):
    url, env, keys, _ = served

    async def calls() -> dict:
        async with stdio_session(env, keys["gina"]) as session:
            tools = {t.name for t in (await session.list_tools()).tools}
            return {"tools": tools,
                    "tree": await session.call_tool("tree_search", {"query": "billing-worker Kubernetes helm"}),
                    "forks": await session.call_tool("memory_search", {
                        "query": "Fly.io volume billing_data", "scope": "raw", "include_forks": True}),
                    "fork": await session.call_tool("fork_session", {"session_id": PARENT,
                                                                     "new_session_id": "s-gina-0001-c"}),
                    "context": await session.call_tool("context", {"session_id": PARENT, "limit": 2,
                                                                   "include_forks": True}),
                    "dry": await session.call_tool("merge_fork", {"fork_session_id": FORK,
                                                                  "parent_session_id": PARENT, "mode": "append",
                                                                  "dry_run": True})}

    out = anyio.run(calls)
    assert {"tree_search", "fork_session", "merge_fork"} <= out["tools"]
    with psycopg.connect(url) as conn:
        expected = UnifiedMemorySearch(conn).serve("billing-worker Kubernetes helm", "raw", 5, "gina", mode="forest")
    tree = structured(out["tree"])
    assert [(h["session_id"], h["start_seq"], h["path"]) for h in tree["hits"]] == [
        (h.session_id, h.start_seq, list(h.path)) for h in expected.hits] and expected.hits
    assert structured(out["forks"])["hits"][0]["fork"]["session_id"] == FORK
    with psycopg.connect(url) as conn:
        assert structured(out["context"]) == context_for(conn, PARENT, limit=2, include_forks=True).to_json("")
    assert structured(out["fork"])["fork"] == {"session_id": "s-gina-0001-c", "parent_session_id": PARENT,
                                               "fork_seq": 10, "user_id": "gina"}
    assert [t["seq"] for t in structured(out["dry"])["written"]] == [11, 12, 13, 14]
