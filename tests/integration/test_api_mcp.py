"""`memory-pipelines serve mcp` through the MCP SDK's own client: over stdio (the server a
child process, its key in MEMORY_API_KEY) and over streamable HTTP (a server the test
starts, each request with its bearer key). Every tool is called and checked against the
query module."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import anyio
import httpx
import psycopg
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from memory_pipelines.config import load
from memory_pipelines.db.vectors import register_vector_types

from memory_pipelines import graph, lineage
from memory_pipelines.embed import build_embedder, embed_config
from memory_pipelines.session_context import context_for
from memory_pipelines.search import UnifiedMemorySearch, format_served, get_turns_by_score
from tests.helpers import ENTRY, free_port, start_server
from tests.integration.test_api_http import create_keys, server_env

TOOLS = {"memory_search", "memory", "context", "recall", "knowledge_search", "entity_graph_query", "decay_score",
         "distill", "write_sketch", "lineage", "turns_by_score", "tree_search", "fork_session", "merge_fork"}


@pytest.fixture(scope="module")
def mcp_setup(make_module_sample_database, tmp_path_factory):
    url = make_module_sample_database()
    home = tmp_path_factory.mktemp("mcp")
    env = server_env(url, home)
    return url, env, create_keys(env), home


@pytest.fixture(scope="module")
def mcp_http(mcp_setup):
    url, env, keys, home = mcp_setup
    server = start_server(["mcp", "--http", "--port", str(free_port())], env, home / "mcp-http.log", ready="/mcp")
    yield server
    assert server.stop(), server.output()[-2000:]


@asynccontextmanager
async def stdio_session(env: dict, key: str):
    params = StdioServerParameters(command=str(ENTRY), args=["serve", "mcp"], env={**env, "MEMORY_API_KEY": key})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        session.initialized = await session.initialize()  # the server's name and version
        yield session


@asynccontextmanager
async def http_session(url: str, key: str):
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as client, \
            streamable_http_client(f"{url}/mcp", http_client=client) as (read, write, *_), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


def structured(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def expected_search(url: str, text: str, user: str, budget: int) -> tuple[list, str]:
    embedder = build_embedder(embed_config(load()))
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            register_vector_types(conn)
            served = UnifiedMemorySearch(conn, embedder).serve(text, "all", 5, user, budget_chars=budget)
    finally:
        embedder.close()
    return [(h.source_type, h.id) for h in served.hits], format_served(text, "all", served)


def test_stdio_lists_every_tool_and_each_answers_as_the_query_module(mcp_setup):
    url, env, keys, _ = mcp_setup

    async def session_calls() -> dict:
        async with stdio_session(env, keys["bob"]) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            out = {"tools": tools, "server": session.initialized.server_info}
            out["search"] = await session.call_tool("memory_search", {"query": "ledger port", "budget": 1500})
            out["saved"] = await session.call_tool("memory", {
                "action": "save", "category": "preferences", "key": "Terminal", "value": "wezterm",
                "source": "user_explicit", "confidence": 80, "expires_days": 30, "source_context": "told in chat",
                "idempotency_key": "t-1"})
            out["saved_again"] = await session.call_tool("memory", {
                "action": "save", "category": "preferences", "key": "Terminal", "value": "wezterm",
                "source": "user_explicit", "confidence": 80, "expires_days": 30, "source_context": "told in chat",
                "idempotency_key": "t-1"})
            out["list"] = await session.call_tool("memory", {"action": "list"})
            out["facts"] = await session.call_tool("memory", {"action": "search", "query": "terminal"})
            out["forget"] = await session.call_tool("memory", {"action": "forget", "key": "terminal"})
            out["context"] = await session.call_tool("context", {"session_id": "s-bob-0005", "limit": 4})
            out["recall"] = await session.call_tool("recall", {"session_id": "s-bob-0008",
                                                               "incoming": "which port is ledger-api on?"})
            out["knowledge"] = await session.call_tool("knowledge_search", {"query": "ledger port"})
            out["graph"] = await session.call_tool("entity_graph_query", {"entity": "ledger-api", "hops": 2})
            out["graph_at"] = await session.call_tool("entity_graph_query", {
                "entity": "ledger-api", "relation": "listens_on", "at": "2026-10-05T00:00:00Z"})
            out["decay"] = await session.call_tool("decay_score", {"limit": 5})
            out["turns"] = await session.call_tool("turns_by_score", {"session_id": "s-bob-0006", "k": 3})
            out["turns_other"] = await session.call_tool("turns_by_score", {"session_id": "s-alice-0001"})
            out["distill"] = await session.call_tool("distill", {"text": "I moved to Madrid in June.", "mode": "rules",
                                                                 "store": True})
            out["sketch"] = await session.call_tool("write_sketch", {"session_id": "s-bob-0005", "section": "todo",
                                                                     "key": "next", "value": "check envoy"})
            fact_id = structured(out["search"])["hits"][0]["id"]
            out["lineage"] = await session.call_tool("lineage", {"kind": "fact", "ident": str(fact_id)})
            out["other_user"] = await session.call_tool("memory_search", {"query": "port", "user_id": "alice"})
            out["resources"] = await session.list_resource_templates()
            out["summary"] = await session.read_resource("memory://users/bob/summary")
            return out

    out = anyio.run(session_calls)
    assert (out["server"].name, out["server"].version) == ("memory-pipelines", importlib.metadata.version("memory-pipelines"))
    tools = out["tools"]
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and len(tool.description) > 60 and tool.input_schema["type"] == "object"
    assert set(tools["memory"].input_schema["properties"]["action"]["enum"]) == {"save", "forget", "list", "search"}

    ids, text = expected_search(url, "ledger port", "bob", 1500)
    search = structured(out["search"])
    assert [(h["source_type"], h.get("id")) for h in search["hits"]] == ids
    assert out["search"].content[0].text == text  # the agent reads what the CLI prints
    assert search["hits"][0]["key"] == "ledger_api_port"

    saved, again = structured(out["saved"]), structured(out["saved_again"])
    assert saved["fact"]["key"] == "terminal" and saved["fact"]["model"] == "api" and again["replayed"] is True
    assert {"category": "preferences", "facts": 1} in structured(out["list"])["categories"]
    assert "terminal" in [h["key"] for h in structured(out["facts"])["facts"]]
    assert structured(out["forget"])["deleted"] == 1

    with psycopg.connect(url, autocommit=True) as conn:
        register_vector_types(conn)
        expected_ctx = context_for(conn, "s-bob-0005", None, limit=4)
        assert structured(out["context"])["messages"] == expected_ctx.chat_messages("")
        assert structured(out["recall"])["hits"] and structured(out["recall"])["session_id"] == "s-bob-0008"
        embedder = build_embedder(embed_config(load()))
        assert [e["id"] for e in structured(out["knowledge"])["entries"]] == [
            h.id for h in UnifiedMemorySearch(conn, embedder).search_knowledge("ledger port", "bob")]
        embedder.close()
        assert structured(out["graph"])["reachable"] == graph.reachable(conn, "bob", "ledger-api", hops=2)
        turns = structured(out["turns"])["turns"]
        assert [t["session_id"] for t in turns] == ["s-bob-0006"] * 3
        assert [t["id"] for t in turns] == [t.turn.id for t in get_turns_by_score(conn, "bob", "s-bob-0006", 3).turns]
        assert out["turns_other"].is_error and "forbidden" in out["turns_other"].content[0].text
        as_of = graph.relations(conn, "bob", "ledger-api", "listens_on", datetime(2026, 10, 5, tzinfo=UTC))
        assert [t["object"] for t in structured(out["graph_at"])["triples"]] == [t.object for t in as_of] == ["8080"]
        report = structured(out["lineage"])
        assert report == json.loads(json.dumps(lineage.lineage(conn, "fact", str(report["row"]["id"])), default=str))
        assert conn.execute("SELECT count(*) FROM knowledge_entries WHERE user_id = 'bob' AND model = 'api'"
                            ).fetchone()[0] == len(structured(out["distill"])["entries"]) > 0
        assert conn.execute("SELECT value FROM sketches WHERE user_id = 'bob' AND section = 'todo'").fetchone() == (
            "check envoy",)
        summary = conn.execute("SELECT content FROM memory_summary WHERE user_id = 'bob'").fetchone()[0]
    decay = structured(out["decay"])
    assert len(decay["entries"]) == 5 and "exp(" in decay["formula"]
    assert out["other_user"].is_error and "forbidden" in out["other_user"].content[0].text
    assert [t.uri_template for t in out["resources"].resource_templates] == ["memory://users/{user_id}/summary"]
    assert out["summary"].contents[0].text == summary


def test_stdio_without_a_live_key_refuses_each_call(mcp_setup):
    url, env, keys, _ = mcp_setup

    async def call() -> object:
        async with stdio_session(env, keys["revoked"]) as session:
            return await session.call_tool("memory_search", {"query": "ledger port"})

    refused = anyio.run(call)
    assert refused.is_error and "unauthorized" in refused.content[0].text
    assert keys["revoked"] not in refused.content[0].text


def test_streamable_http_serves_each_key_its_own_users_memory(mcp_setup, mcp_http):
    url, env, keys, _ = mcp_setup

    async def calls() -> dict:
        out = {}
        async with http_session(mcp_http.url, keys["bob"]) as session:
            out["tools"] = {t.name for t in (await session.list_tools()).tools}
            out["bob"] = await session.call_tool("memory_search", {"query": "ledger port", "budget": 1500})
            out["alice_summary"] = None
            try:
                await session.read_resource("memory://users/alice/summary")
            except Exception as exc:  # noqa: BLE001 - the SDK raises the server's refusal
                out["alice_summary"] = str(exc)
        async with http_session(mcp_http.url, keys["alice"]) as session:
            out["alice"] = await session.call_tool("memory_search", {"query": "ledger port", "budget": 1500})
        return out

    out = anyio.run(calls)
    assert out["tools"] == TOOLS
    ids, _ = expected_search(url, "ledger port", "bob", 1500)
    bob = structured(out["bob"])
    assert [(h["source_type"], h.get("id")) for h in bob["hits"]] == ids and bob["hits"][0]["key"] == "ledger_api_port"
    alice = structured(out["alice"])
    assert alice["hits"] and {h["user_id"] for h in alice["hits"]} == {"alice"}
    assert "forbidden" in out["alice_summary"]

    # without a live key the HTTP request is refused before MCP reads it
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in ({}, {"Authorization": f"Bearer {keys['revoked']}"}, {"Authorization": "Bearer mpk_x"}):
        refused = httpx.post(f"{mcp_http.url}/mcp", json=initialize, headers={**headers, **auth})
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    log = mcp_http.output()
    assert " POST /mcp 401 " in log and " POST /mcp 200 " in log
    assert not any(key in log for key in keys.values())


def test_stdio_needs_a_key_to_start(mcp_setup):
    _, env, _, _ = mcp_setup
    started = subprocess.run([str(ENTRY), "serve", "mcp"], env={k: v for k, v in env.items() if k != "MEMORY_API_KEY"},
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert started.returncode == 2 and "MEMORY_API_KEY" in started.stderr and "keys create" in started.stderr
