"""Hostile command-line input: user ids that look like paths or patterns, SQL-looking and
very long arguments. Nothing is written outside the export folder, and no other user's rows
are read, changed or removed."""

from __future__ import annotations

import json
import os
import re

import psycopg
import pytest
from psycopg import sql

from assets.definitions import all_assets
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from memory_pipelines.lifecycle import export_markdown, forget
from tests.helpers import materialize_partitions
from tests.integration.test_cli import cli

DAY = "2026-10-01"
SESSION = "s-bob-0001"  # bob's session of DAY, copied for every hostile user
HOSTILE = ("../../x", "a/b", "%", "_", "*", "a%b")  # a/b: what a%b would match as a LIKE pattern
LONG_ID = "x" * 100_000
# One argument may hold at most 128 KiB on Linux (MAX_ARG_STRLEN): the largest query a user
# can pass on the command line. Megabytes go through the Python API (tests/assets/test_search.py).
LONG_QUERY = ("'; DROP TABLE memory_facts; -- PostgreSQL % _ * \\ " * 3000)[:120_000]


@pytest.fixture(scope="module")
def url(make_module_database, tmp_path_factory) -> str:
    """One day of bob's and of the same session under each hostile user id."""
    folder = tmp_path_factory.mktemp("transcripts")
    lines = [json.loads(line) for line in (SAMPLE_TRANSCRIPTS / "bob" / "2026-10-week1.jsonl").read_text().splitlines()
             if line.strip()]
    session = [r for r in lines if r["session_id"] == SESSION]
    (folder / "bob.jsonl").write_text("\n".join(json.dumps(r) for r in session))
    for number, user in enumerate(HOSTILE):
        copy = [{**r, "session_id": f"s-hostile-{number}", "user_id": user} for r in session]
        (folder / f"hostile-{number}.jsonl").write_text("\n".join(json.dumps(r) for r in copy))
    url = make_module_database()
    materialize_partitions(all_assets, [DAY], url, folder)
    with psycopg.connect(url) as conn:
        users = {r[0] for r in conn.execute("SELECT DISTINCT user_id FROM knowledge_entries WHERE user_id IS NOT NULL")}
    assert users == {"bob", *HOSTILE}
    return url


@pytest.fixture
def env(url) -> dict:
    return {**os.environ, "MEMORY_DATABASE_URL": url, "MEMORY_EMBED_BACKEND": "hashing"}


def rows_by_owner(url: str) -> dict[tuple[str, str | None], tuple[int, str]]:
    """(table, owner) -> row count and an md5 over the rows: the owner is the user_id, or for
    tables with only a session_id, the session's user."""
    with psycopg.connect(url) as conn:
        owners = dict(conn.execute("SELECT session_id, user_id FROM sessions").fetchall())
        columns = conn.execute("SELECT table_name, array_agg(column_name::text) FROM information_schema.columns "
                               "WHERE table_schema = 'public' AND column_name IN ('user_id', 'session_id') "
                               "AND table_name IN (SELECT table_name FROM information_schema.tables "
                               "WHERE table_schema = 'public' AND table_type = 'BASE TABLE') GROUP BY 1").fetchall()
        out = {}
        for table, names in columns:
            key = "user_id" if "user_id" in names else "session_id"
            for owner, count, digest in conn.execute(sql.SQL(
                    "SELECT {key}, count(*), md5(string_agg(t::text, E'\\n' ORDER BY t::text)) FROM {table} t GROUP BY 1"
            ).format(key=sql.Identifier(key), table=sql.Identifier(table))):
                out[(table, owner if key == "user_id" else owners.get(owner, owner))] = (count, digest)
        return out


def entry_keys(url: str, user: str) -> set[str]:
    """What `export markdown --user` should write: the user's entries and the global ones."""
    with psycopg.connect(url) as conn:
        return {r[0][:10] for r in conn.execute("SELECT entry_key FROM knowledge_entries WHERE user_id = %s "
                                                "OR scope = 'global'", (user,))}


def test_export_writes_inside_its_folder_only_whatever_the_user_id(url, env, tmp_path):
    before = rows_by_owner(url)
    for number, user in enumerate(("../../x", LONG_ID)):
        sandbox = tmp_path / f"sandbox-{number}"
        out = sandbox / "a" / "b" / "out"
        result = cli("export", "markdown", str(out), "--user", user, env=env)
        assert result.returncode == 0, result.stderr
        written = [p for p in sandbox.rglob("*") if p.is_file()]
        assert all(p.parent == out and re.fullmatch(r"[a-z]+-[a-z0-9-]*-[0-9a-f]{10}\.md", p.name)
                   for p in written), written
        # the user's entries and the global ones, no other user's
        assert {p.stem.rsplit("-", 1)[1] for p in written} == entry_keys(url, user)
    assert entry_keys(url, "../../x") > entry_keys(url, LONG_ID)  # the path-like user had entries of its own
    # a NUL byte cannot reach the command line (argv is C strings); through the API it is refused
    out = tmp_path / "nul"
    with psycopg.connect(url) as conn, pytest.raises(psycopg.DataError, match="NUL"):
        export_markdown(conn, out, "../\x00x")
    assert list(out.iterdir()) == []
    assert rows_by_owner(url) == before


def test_search_with_sql_looking_or_huge_arguments_stays_inside_one_user(url, env):
    before = rows_by_owner(url)
    found = cli("search", LONG_QUERY, "--user", "a%b", "--k", "20", "--json", env=env)
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)["hits"]
    assert hits and {h["user_id"] for h in hits} == {"a%b"}
    after = rows_by_owner(url)
    # a hit counts as an access on the user's own facts and entries; nobody else's rows change
    assert {k: v for k, v in after.items() if k[1] != "a%b"} == {k: v for k, v in before.items() if k[1] != "a%b"}
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in before.items()}

    found = cli("search", "port%' OR 1=1 --", "--user", "bob' OR '1'='1", "--json", env=env)
    # no such user: said in one line, exit 1, nothing found, nothing touched
    assert found.returncode == 1 and found.stdout == ""
    assert found.stderr == "memory-pipelines: error: nothing is stored for user \"bob' OR '1'='1\" " \
                           "(`memory-pipelines users` lists who has memory)\n"
    assert rows_by_owner(url) == after


def test_forget_with_a_pattern_looking_user_id_removes_exactly_that_user(url, env):
    for user in ("%", "_", "*"):
        before = rows_by_owner(url)
        assert sum(count for (table, owner), (count, _) in before.items() if owner == user) > 0
        if user == "%":
            result = cli("forget", "--user", user, "--yes", env=env)
            assert result.returncode == 0 and f"forgot user {user}: " in result.stdout, result.stderr
        else:  # the command passes the id on unchanged: the API, without a process start each
            with psycopg.connect(url) as conn, conn.transaction():
                forget(conn, user)
        expected = {k: v for k, v in before.items() if k[1] != user and k[0] != "forgotten"}
        assert {k: v for k, v in rows_by_owner(url).items() if k[0] != "forgotten"} == expected
    with psycopg.connect(url) as conn:
        assert sorted(conn.execute("SELECT user_id, session_id FROM forgotten").fetchall()) == \
            [("%", ""), ("*", ""), ("_", "")]
