"""The REST API through a real `memory-pipelines serve http` on 127.0.0.1, over the
distilled sample: every endpoint against the query module, the auth matrix, hostile
input, idempotent retries, lineage of API writes, the access log."""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import psycopg
import pytest
from memory_pipelines.config import DecaySettings, load
from memory_pipelines.core.turn_index import score_turns
from memory_pipelines.db import turns as turns_db
from memory_pipelines.lifecycle import user_clocks
from memory_pipelines.db.vectors import register_vector_types

from memory_pipelines import graph, lineage
from memory_pipelines.embed import build_embedder, embed_config
from memory_pipelines.session_context import context_for
from memory_pipelines.search import UnifiedMemorySearch, get_turns_by_score
from tests.helpers import ENTRY, Server, free_port, start_server


@dataclass
class Api:
    server: Server
    database_url: str
    keys: dict[str, str]
    env: dict

    def client(self, who: str | None = None, **headers) -> httpx.Client:
        if who is not None:
            headers["Authorization"] = f"Bearer {self.keys[who]}"
        return httpx.Client(base_url=self.server.url, headers=headers, timeout=60)


def keys_cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ENTRY), "keys", *args], env=env, capture_output=True, text=True, timeout=120)


def server_env(url: str, home) -> dict:
    return {**os.environ, "MEMORY_DATABASE_URL": url, "MEMORY_HOME": str(home), "DAGSTER_HOME": str(home / "dg"),
            "MEMORY_EMBED_BACKEND": "hashing", "MEMORY_TRANSCRIPTS": ""}


def create_keys(env: dict) -> dict[str, str]:
    """Keys made as a user makes them: bob's, alice's, an admin's, and a revoked one of bob's."""
    keys = {}
    for who, args in {"bob": ("--user", "bob", "--name", "agent"), "alice": ("--user", "alice"),
                      "admin": ("--admin", "--name", "ops"), "revoked": ("--user", "bob", "--name", "old")}.items():
        made = keys_cli(env, "create", *args)
        assert made.returncode == 0, made.stderr
        keys[who] = made.stdout.strip()
        assert keys[who].startswith("mpk_") and "\n" not in keys[who]
    listed = json.loads(keys_cli(env, "list", "--json").stdout)
    [old] = [k for k in listed if k["name"] == "old"]
    revoked = keys_cli(env, "revoke", str(old["id"]))
    assert revoked.returncode == 0 and "revoked API key" in revoked.stdout
    return keys


@pytest.fixture(scope="module")
def api(make_module_sample_database, tmp_path_factory):
    url = make_module_sample_database()
    home = tmp_path_factory.mktemp("api")
    env = server_env(url, home)
    keys = create_keys(env)
    server = start_server(["http", "--port", str(free_port())], env, home / "server.log")
    yield Api(server, url, keys, env)
    assert server.stop() and "Application shutdown complete" in server.output(), server.output()[-2000:]
    # stopped, and said so in one line (issue 37)
    assert server.proc.returncode == 143 and server.output().rstrip().endswith("memory-pipelines: stopped by SIGTERM")


@pytest.fixture
def query_module(api, monkeypatch):
    """The query module on the server's database, with the server's embedder."""
    monkeypatch.setenv("MEMORY_EMBED_BACKEND", "hashing")
    embedder = build_embedder(embed_config(load()))
    # autocommit: what a search counts (accesses) is not held locked while the server works
    with psycopg.connect(api.database_url, autocommit=True) as conn:
        register_vector_types(conn)
        yield conn, embedder
    embedder.close()


def test_curl_search_serves_bobs_current_port_first_and_alice_nothing_of_bobs(api):
    def curl(who: str) -> dict:
        done = subprocess.run(["curl", "-sS", "-H", f"Authorization: Bearer {api.keys[who]}",
                               f"{api.server.url}/v1/search?q=ledger%20port"], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    bob = curl("bob")
    first = bob["hits"][0]
    assert (first["source_type"], first["key"], first["text"]) == ("fact", "ledger_api_port", "ledger_api_port: 9090")
    assert bob["text"].splitlines()[2].strip().startswith("1. fact #")
    alice = curl("alice")
    assert alice["hits"], "alice's search finds her own memory"
    assert {h["user_id"] for h in alice["hits"]} == {"alice"}
    assert "9090" not in alice["text"] and "bob" not in alice["text"].lower()


def test_search_answers_as_the_query_module(api, query_module):
    conn, embedder = query_module
    served = UnifiedMemorySearch(conn, embedder).serve("which port does ledger-api use", "all", 5, "bob",
                                                        budget_chars=2000).to_json("which port does ledger-api use",
                                                                                   "all")
    with api.client("bob") as client:
        got = client.get("/v1/search", params={"q": "which port does ledger-api use", "budget": 2000}).json()
        posted = client.post("/v1/search", json={"q": "which port does ledger-api use", "budget": 2000}).json()
    for answer in (got, posted):
        assert [(h["source_type"], h.get("id")) for h in answer["hits"]] == [
            (h["source_type"], h.get("id")) for h in served["hits"]]
        assert answer["budget"] == served["budget"] and answer["budget"]["used"] <= 2000


def test_facts_endpoints_save_search_list_and_forget(api, query_module):
    conn, embedder = query_module
    with api.client("bob") as client:
        saved = client.post("/v1/facts", json={"category": "preferences", "key": "Editor", "value": "helix",
                                               "source": "user_explicit", "expires_days": 30})
        assert saved.status_code == 200, saved.text
        fact = saved.json()["fact"]
        assert (fact["category"], fact["key"], fact["value"], fact["model"]) == ("preferences", "editor", "helix", "api")
        found = client.get("/v1/facts", params={"q": "editor"}).json()["facts"]
        expected = UnifiedMemorySearch(conn, embedder).search_facts("editor", "bob")
        assert [h["id"] for h in found] == [h.id for h in expected] and fact["id"] in [h["id"] for h in found]
        categories = client.get("/v1/facts").json()["categories"]
        assert {"category": "preferences", "facts": 1} in categories
        assert client.delete("/v1/facts/editor", params={"category": "preferences"}).json()["deleted"] == 1
        assert client.delete("/v1/facts/editor").json()["deleted"] == 0
    assert conn.execute("SELECT count(*) FROM memory_facts WHERE user_id = 'bob' AND key = 'editor'").fetchone()[0] == 0


def test_context_recall_knowledge_graph_decay_lineage_summary_answer_as_the_query_module(api, query_module):
    conn, embedder = query_module
    with api.client("bob") as client:
        ctx = client.get("/v1/context/s-bob-0005", params={"all_entries": True, "limit": 4}).json()
        expected = context_for(conn, "s-bob-0005", None, limit=4)
        assert ctx["messages"] == expected.chat_messages("") and ctx["summary"] == expected.summary.to_json()

        recalled = client.post("/v1/recall", json={"session_id": "s-bob-0008", "incoming": "ledger-api port?",
                                                   "recent": [{"role": "user", "content": "writing the runbook"}]})
        assert recalled.status_code == 200, recalled.text
        first = recalled.json()["hits"]
        again = client.post("/v1/recall", json={"session_id": "s-bob-0008", "incoming": "ledger-api port?"}).json()
        assert not {h["id"] for h in first} & {h["id"] for h in again["hits"]}, "the ledger returns nothing twice"

        entries = client.get("/v1/knowledge/search", params={"q": "ledger port"}).json()["entries"]
        assert [e["id"] for e in entries] == [
            h.id for h in UnifiedMemorySearch(conn, embedder).search_knowledge("ledger port", "bob")]
        assert entries

        triples = client.get("/v1/graph", params={"entity": "ledger-api"}).json()
        assert [t["id"] for t in triples["triples"]] == [t.id for t in graph.relations(conn, "bob", "ledger-api")]
        assert triples["triples"] and triples["reachable"] is None
        two = client.get("/v1/graph", params={"entity": "ledger-api", "hops": 2}).json()
        assert two["reachable"] == graph.reachable(conn, "bob", "ledger-api", hops=2)
        assert client.get("/v1/graph", params={"entity": "ledger-api", "hops": 3}).status_code == 422

        decay = client.get("/v1/decay-score").json()
        assert decay["entries"] and decay["threshold"] == 0.5
        for row in decay["entries"]:
            assert row["score"] == pytest.approx(row["faded"] + row["boost"], abs=1e-5)
            assert row["verdict"] in ("too_young", "facts_not_decayed", "recently_accessed", "above_threshold",
                                      "decayed", "older_statement_kept", "expired", "pii_retention")
        # the sample's memory is days old: the defaults archive none of it
        assert not any(row["would_archive"] for row in decay["entries"])

        fact_id = conn.execute("SELECT id FROM memory_facts WHERE user_id = 'bob' AND key = 'ledger_api_port'"
                               ).fetchone()[0]
        report = client.get(f"/v1/lineage/fact/{fact_id}").json()
        assert report == json.loads(json.dumps(lineage.lineage(conn, "fact", str(fact_id)), default=str))
        assert client.get("/v1/lineage/fact/999999").json()["error"]["code"] == "not_found"
        assert client.get(f"/v1/lineage/bogus/{fact_id}").json()["error"]["code"] == "invalid_request"

        summary = client.get("/v1/summary").json()
        stored = conn.execute("SELECT content FROM memory_summary WHERE user_id = 'bob'").fetchone()[0]
        assert summary["summary"] == stored and "9090" in stored


def test_turns_by_score_serves_the_query_modules_turns_counts_their_access_and_keeps_to_the_user(api, query_module):
    conn, _ = query_module
    # what the query module ranks now; earlier tests of this module may have counted accesses unevenly
    as_of = user_clocks(conn, ["bob"], datetime.now(UTC))["bob"]
    expected = score_turns(*turns_db.turn_decay_candidates(conn, "bob", None), as_of, DecaySettings().base_rate, 5)
    with api.client("bob") as client:
        got = client.get("/v1/turns/by-score", params={"k": 5}).json()
        assert [t["id"] for t in got["turns"]] == [s.turn.id for s in expected]
        assert len(got["turns"]) == 5 and got["considered"] > 5
        assert {t["session_id"].split("-")[1] for t in got["turns"]} == {"bob"}
        scores = [t["score"] for t in got["turns"]]
        assert scores == sorted(scores, reverse=True)
        for t in got["turns"]:
            assert t["score"] == pytest.approx(t["faded"] + t["boost"], abs=1e-5)
        # the query module keeps the same turns, each counted once more since the server served it (a
        # count's boost is concave, so their order among themselves may change)
        module = {s.turn.id: s.turn.access_count for s in get_turns_by_score(conn, "bob", k=5).turns}
        assert module == {t["id"]: t["access_count"] + 1 for t in got["turns"]}
        assert client.get("/v1/turns/by-score", params={"session_id": "s-alice-0001"}).status_code == 403
        assert client.get("/v1/turns/by-score", params={"k": 0}).status_code == 422
    with api.client("alice") as client:
        alice = client.get("/v1/turns/by-score").json()["turns"]
        assert alice and not {t["id"] for t in alice} & {t["id"] for t in got["turns"]}
    with api.client("admin") as client:
        assert client.get("/v1/turns/by-score").json()["error"]["code"] == "invalid_request"
        by_session = client.get("/v1/turns/by-score", params={"session_id": "s-bob-0006", "k": 2}).json()
        assert by_session["user_id"] == "bob" and {t["session_id"] for t in by_session["turns"]} == {"s-bob-0006"}
        wrong = client.get("/v1/turns/by-score", params={"session_id": "s-bob-0006", "user_id": "alice"})
        assert wrong.json()["error"]["code"] == "not_found"


def test_api_writes_record_lineage_with_the_key_and_request_time(api, query_module):
    conn, _ = query_module
    with api.client("bob") as client:
        saved = client.post("/v1/facts", json={"category": "tools", "key": "terminal", "value": "wezterm"}).json()
        fact = client.get(f"/v1/lineage/fact/{saved['fact']['id']}").json()["row"]
        assert fact["model"] == "api" and fact["run_id"].startswith("api:key-")
        sketch = client.post("/v1/sketches", json={"session_id": "s-bob-0005", "section": "todo", "key": "next",
                                                    "value": "check envoy"})
        assert sketch.status_code == 200, sketch.text
        distilled = client.post("/v1/distill", json={"text": "I moved to Lisbon in March. I prefer tea over coffee.",
                                                     "mode": "rules", "store": True})
        assert distilled.status_code == 200, distilled.text
        assert distilled.json()["stored"] and distilled.json()["entries"]
        preview = client.post("/v1/distill", json={"text": "I moved to Porto.", "mode": "rules"}).json()
        assert preview["stored"] is False and preview["entries"]
    key_run = fact["run_id"].rsplit(":", 3)[0]
    row = conn.execute("SELECT source, run_id FROM sketches WHERE user_id = 'bob' AND section = 'todo'").fetchone()
    assert row[0] == "api" and row[1].startswith(key_run)
    entries = conn.execute("SELECT count(*), min(model), min(run_id) FROM knowledge_entries WHERE user_id = 'bob' "
                           "AND session_id LIKE 'api:%'").fetchone()
    assert entries[0] >= 1 and entries[1] == "api" and entries[2].startswith(key_run)
    assert conn.execute("SELECT count(*) FROM knowledge_entries WHERE content LIKE '%Porto%'").fetchone()[0] == 0


def test_auth_matrix(api):
    with api.client() as anonymous:
        refused = anonymous.get("/v1/search", params={"q": "port"})
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        assert refused.json()["error"]["code"] == "unauthorized"
        assert anonymous.get("/healthz").json()["database"] == "ok"  # health needs no key
    for headers in ({"Authorization": "Bearer mpk_not-a-key"}, {"Authorization": "Basic Ym9iOmJvYg=="},
                    {"Authorization": f"Bearer {api.keys['revoked']}"}):
        with api.client(**headers) as client:
            denied = client.get("/v1/search", params={"q": "port"})
            assert denied.status_code == 401
            assert headers["Authorization"].split()[1] not in denied.text, "a refused key is never echoed"
            assert client.post("/v1/facts", json={"category": "a", "key": "b", "value": "c"}).status_code == 401
    with api.client("bob") as bob:
        assert bob.get("/v1/search", params={"q": "port"}).status_code == 200
        for response in (bob.get("/v1/search", params={"q": "port", "user_id": "alice"}),
                         bob.get("/v1/facts", params={"user_id": "alice"}),
                         bob.post("/v1/facts", json={"category": "a", "key": "b", "value": "c", "user_id": "alice"}),
                         bob.get("/v1/context/s-alice-0005"),
                         bob.post("/v1/sketches", json={"session_id": "s-alice-0005", "section": "s", "key": "k",
                                                        "value": "v"})):
            assert response.status_code == 403, response.text
            assert response.json()["error"]["code"] == "forbidden"
        alice_fact = httpx.get(f"{api.server.url}/v1/facts", params={"q": "editor"},
                               headers={"Authorization": f"Bearer {api.keys['alice']}"}).json()["facts"]
        assert alice_fact
        assert bob.get(f"/v1/lineage/fact/{alice_fact[0]['id']}").status_code == 404
    with api.client("admin") as admin:
        everyone = admin.get("/v1/search", params={"q": "port", "budget": 0, "k": 20}).json()
        assert len({h["user_id"] for h in everyone["hits"]}) > 1
        alice = admin.get("/v1/search", params={"q": "port", "user_id": "alice"}).json()
        assert alice["hits"] and {h["user_id"] for h in alice["hits"]} == {"alice"}
        assert admin.post("/v1/facts", json={"category": "a", "key": "b", "value": "c"}).status_code == 400
    assert "searched every user" in api.server.output()


def test_hostile_input_gets_one_structured_error_each_and_the_server_keeps_serving(api, query_module):
    conn, _ = query_module
    facts_before = conn.execute("SELECT count(*) FROM memory_facts").fetchone()[0]
    with api.client("bob") as client:
        cases = {
            "huge query": client.post("/v1/search", json={"q": "port " * 200_000}),
            "huge body": client.post("/v1/distill", json={"text": "x" * 2_000_000}),
            "invalid json": client.post("/v1/facts", content=b"{not json", headers={"content-type": "application/json"}),
            "invalid utf-8": client.post("/v1/facts", content=b'{"category": "\xff\xfe", "key": "k", "value": "v"}',
                                         headers={"content-type": "application/json"}),
            "unknown field": client.post("/v1/facts", json={"category": "a", "key": "b", "value": "c", "admin": True}),
            "wrong type": client.get("/v1/search", params={"q": "port", "k": "many"}),
            "bad scope": client.get("/v1/search", params={"q": "port", "scope": "everything"}),
            "empty query": client.get("/v1/search", params={"q": "  "}),
            "no route": client.get("/v2/search"),
            "unknown parameter": client.get("/v1/search", params={"q": "port", "user": "alice"}),
        }
        expected = {"huge query": (400, "invalid_request"), "huge body": (413, "body_too_large"),
                    "invalid json": (400, "invalid_json"), "invalid utf-8": (400, "invalid_json"),
                    "unknown field": (422, "invalid_request"), "wrong type": (422, "invalid_request"),
                    "bad scope": (422, "invalid_request"), "empty query": (400, "invalid_request"),
                    "no route": (404, "not_found"), "unknown parameter": (400, "unknown_parameter")}
        for name, response in cases.items():
            error = response.json()["error"]
            assert (response.status_code, error["code"]) == expected[name], (name, response.text[:300])
            assert error["message"] and "\n" not in error["message"] and "Traceback" not in response.text
        assert "admin: unknown field" in cases["unknown field"].json()["error"]["message"]
        assert cases["unknown parameter"].json()["error"]["message"].startswith(
            "unknown query parameter(s) user: /v1/search takes ")
        sql_like = client.get("/v1/search", params={"q": "'; DROP TABLE memory_facts; -- ledger port"})
        assert sql_like.status_code == 200 and sql_like.json()["hits"][0]["key"] == "ledger_api_port"
        assert client.get("/healthz").json()["status"] == "ok"
    assert conn.execute("SELECT count(*) FROM memory_facts").fetchone()[0] == facts_before


def test_a_retried_write_with_an_idempotency_key_writes_once(api, query_module):
    conn, _ = query_module
    body = {"category": "preferences", "key": "shell", "value": "fish"}
    with api.client("bob", **{"Idempotency-Key": "retry-1"}) as client:
        first = client.post("/v1/facts", json=body).json()
        second = client.post("/v1/facts", json=body).json()
        assert first["replayed"] is False and second["replayed"] is True
        assert {k: v for k, v in second.items() if k != "replayed"} == {k: v for k, v in first.items() if k != "replayed"}
        conflict = client.post("/v1/facts", json={**body, "value": "zsh"})
        assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "idempotency_conflict"
    with api.client("bob", **{"Idempotency-Key": "distill-1"}) as client:
        entries_before = conn.execute("SELECT count(*) FROM knowledge_entry_versions").fetchone()[0]
        text = {"text": "I moved to Madrid in June. I prefer green tea.", "mode": "rules", "store": True}
        with ThreadPoolExecutor(4) as pool:  # four retries at once: one writes, the rest get its answer
            answers = [f.result() for f in [pool.submit(client.post, "/v1/distill", json=text) for _ in range(4)]]
        assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
        assert sorted(a.json()["replayed"] for a in answers) == [False, True, True, True]
    written = conn.execute("SELECT count(*) FROM knowledge_entry_versions").fetchone()[0] - entries_before
    assert written == len(answers[0].json()["entries"]) > 0
    assert conn.execute("SELECT value FROM memory_facts WHERE user_id = 'bob' AND key = 'shell'").fetchone() == ("fish",)
    # another key's retry with the same Idempotency-Key is its own request
    with api.client("alice", **{"Idempotency-Key": "retry-1"}) as alice:
        assert alice.post("/v1/facts", json=body).json()["replayed"] is False


def test_access_log_has_one_line_per_request_and_never_a_key_or_a_question(api):
    with api.client("bob") as client:
        client.get("/v1/search", params={"q": "secret-question-words"})
        client.get("/v1/context/s-bob-0005")
    with api.client("admin") as admin:
        admin.get("/v1/search", params={"q": "ledger", "user_id": "carol"})
    log = api.server.output()
    lines = [line for line in log.splitlines() if "memory_pipelines.api.access" in line]
    assert any(" GET /v1/search 200 " in line and "key=" in line and "ms " in line for line in lines)
    assert any(" GET /v1/context/s-bob-0005 200 " in line for line in lines)
    assert any(" GET /v1/search 200 " in line and "(admin)" in line for line in lines), "admin requests are marked"
    assert "secret-question-words" not in log
    for secret in api.keys.values():
        assert secret not in log and secret[4:] not in log


def test_openapi_docs_list_every_endpoint(api):
    with api.client() as client:
        assert client.get("/docs").status_code == 200
        paths = set(client.get("/openapi.json").json()["paths"])
    assert {"/v1/search", "/v1/facts", "/v1/facts/{key}", "/v1/context/{session_id}", "/v1/recall",
            "/v1/knowledge/search", "/v1/graph", "/v1/decay-score", "/v1/turns/by-score", "/v1/distill", "/v1/sketches",
            "/v1/lineage/{kind}/{ident}", "/v1/summary", "/v1/forks", "/v1/merges", "/healthz"} <= paths


def test_keys_list_shows_a_prefix_never_the_key(api):
    listed = keys_cli(api.env, "list")
    assert listed.returncode == 0
    for who in ("bob", "alice", "admin"):
        assert api.keys[who] not in listed.stdout and api.keys[who][:10] + "…" in listed.stdout
    assert "(admin)" in listed.stdout and "revoked" in listed.stdout
    with psycopg.connect(api.database_url) as conn:
        stored = {row[0] for row in conn.execute("SELECT key_hash FROM api_keys")}
    assert not stored & set(api.keys.values())
    neither = keys_cli(api.env, "create")
    assert neither.returncode == 2 and "--user U" in neither.stderr
    assert keys_cli(api.env, "revoke", "999").returncode == 1
