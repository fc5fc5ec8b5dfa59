"""The benchmarks' reads and writes (`sql/queries/bench.sql`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from memory_pipelines.db.queries import query


def _dict_rows(conn: psycopg.Connection, name: str, params: dict | None = None) -> list[dict]:
    """The rows of one of the benchmarks' named statements, as dicts."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query(name), params).fetchall()


# --- benchmark databases (memory_pipelines.bench.database) -------------------------------

def recreate_database(admin: psycopg.Connection, name: str) -> None:
    """Drop the database `name` if it exists (forcing its sessions off) and create it empty."""
    for statement in ("bench_drop_database", "bench_create_database"):
        admin.execute(sql.SQL(query(statement)).format(database=sql.Identifier(name)))


def database_exists(admin: psycopg.Connection, name: str) -> bool:
    """Whether the server holds a database named `name`."""
    return admin.execute(query("bench_database_exists"), {"name": name}).fetchone()[0]


def create_meta_table(conn: psycopg.Connection) -> None:
    """Create `bench_search_meta` (what the database was built from) if it is missing."""
    conn.execute(query("bench_meta_create"))


def build_meta(conn: psycopg.Connection) -> tuple | None:
    """What the database was built from: (params, complete, build_seconds); None: no build started."""
    return conn.execute(query("bench_meta_read")).fetchone()


def record_build_start(conn: psycopg.Connection, params: dict) -> None:
    """Record a build from `params` as started and not complete."""
    conn.execute(query("bench_meta_start"), {"params": Jsonb(params)})


def record_build_complete(conn: psycopg.Connection, seconds: float) -> None:
    """Record the build as complete, having taken `seconds`."""
    conn.execute(query("bench_meta_complete"), {"seconds": seconds})


# --- the search benchmark's database (memory_pipelines.bench.search.build) ---------------

def secondary_indexes(conn: psycopg.Connection, table: str) -> list[tuple[str, str]]:
    """The table's indexes that back no constraint: (name, definition), by name."""
    return conn.execute(query("bench_secondary_indexes"), {"table": table}).fetchall()


def copy_chunks(conn: psycopg.Connection, rows: Iterable[tuple]) -> None:
    """Copy these rows into `memory_chunks` (the columns of `bench_copy_chunks`, in order)."""
    with conn.cursor().copy(query("bench_copy_chunks")) as copy:
        copy.set_types(["text", "text", "int8", "int8", "timestamptz", "timestamptz", "text", "text", "text[]",
                        "int4", "text", "text", "text", "text", "halfvec", "text"])
        for row in rows:
            copy.write_row(row)


def copy_facts(conn: psycopg.Connection, rows: Iterable[tuple]) -> None:
    """Copy these rows into `memory_facts` (the columns of `bench_copy_facts`, in order)."""
    with conn.cursor().copy(query("bench_copy_facts")) as copy:
        copy.set_types(["text", "text", "text", "text", "text", "text", "int2", "timestamptz", "text", "int8",
                        "int8", "text", "text", "text", "text", "halfvec", "text"])
        for row in rows:
            copy.write_row(row)


def insert_turns(conn: psycopg.Connection, rows: Iterable[tuple]) -> None:
    """These rows (the columns of `bench_copy_turn_load`, in order) copied into a staging table,
    then inserted into `memory_turns` by the functions the pipeline's own rows are indexed by."""
    conn.execute(query("bench_create_turn_load"))
    with conn.cursor().copy(query("bench_copy_turn_load")) as copy:
        copy.set_types(["text", "int8", "text", "int4", "text", "timestamptz", "text", "halfvec", "text"])
        for row in rows:
            copy.write_row(row)
    conn.execute(query("bench_insert_turns"))


def insert_turn_stats(conn: psycopg.Connection) -> None:
    """BM25's corpus statistics of every user, counted from their turns."""
    conn.execute(query("bench_turn_stats"))


def vacuum_analyze(conn: psycopg.Connection, table: str) -> None:
    """VACUUM (ANALYZE) the table."""
    conn.execute(sql.SQL(query("bench_vacuum_analyze")).format(table=sql.Identifier(table)))


def turn_index_bytes(conn: psycopg.Connection) -> tuple[int, int]:
    """The bytes of `memory_turns`: (table, its indexes)."""
    return conn.execute(query("bench_turn_sizes")).fetchone()


def add_turn_build_columns(conn: psycopg.Connection) -> None:
    """Add the turn load's columns to `bench_search_meta` if they are missing."""
    conn.execute(query("bench_meta_turn_columns"))


def record_turn_build(conn: psycopg.Connection, load: float, index: float) -> None:
    """Record the seconds the turn load and its indexes took."""
    conn.execute(query("bench_meta_turn_build"), {"load": load, "index": index})


def turn_build_seconds(conn: psycopg.Connection) -> tuple[float | None, float | None]:
    """The seconds the turn load and its indexes took, as recorded: (load, index)."""
    return conn.execute(query("bench_meta_turn_build_read")).fetchone()


# --- the search benchmark's queries (memory_pipelines.bench.search.queries) --------------

def id_range(conn: psycopg.Connection, table: str) -> tuple[int, int]:
    """The table's lowest and highest id (0, 0: empty)."""
    return conn.execute(sql.SQL(query("bench_id_range")).format(table=sql.Identifier(table))).fetchone()


def chunks_by_id(conn: psycopg.Connection, ids: Sequence[int]) -> list[tuple[int, str, str]]:
    """The chunks of these ids: (id, user_id, content), by id."""
    return conn.execute(query("bench_chunks_by_id"), {"ids": ids}).fetchall()


def turns_by_id(conn: psycopg.Connection, ids: Sequence[int]) -> list[tuple[int, str, str]]:
    """The turns of these ids: (id, user_id, body)."""
    return conn.execute(query("bench_turns_by_id"), {"ids": ids}).fetchall()


def facts_by_id(conn: psycopg.Connection, ids: Sequence[int]) -> list[tuple[int, str, str, str]]:
    """The current facts of these ids: (id, user_id, key, value), by id."""
    return conn.execute(query("bench_facts_by_id"), {"ids": ids}).fetchall()


# --- retrieval (memory_pipelines.bench.needles, memory_pipelines.bench.retrieval) --------

def relevant_counts(conn: psycopg.Connection, user_id: str, needles: Sequence[str]) -> tuple[int, int]:
    """What holds every needle: the user's chunks, and the other stores unified search reads."""
    return conn.execute(query("bench_relevant_counts"), {"user_id": user_id, "needles": needles}).fetchone()


def chunks_holding_facts(conn: psycopg.Connection, fact_ids: Sequence[int]) -> list[dict]:
    """The chunks holding each fact's source messages, in the facts' order, as dicts."""
    return _dict_rows(conn, "bench_chunks_holding_facts", {"fact_ids": fact_ids})


def chunks_keyed_by_summaries(conn: psycopg.Connection, user_id: str, terms: Sequence[str]) -> list[dict]:
    """The chunks of the user's sessions whose summary entries hold a term, with those entries, newest first."""
    return _dict_rows(conn, "bench_chunks_keyed_by_summaries", {"user_id": user_id, "terms": terms})


def turn_lengths(conn: psycopg.Connection, session_ids: Sequence[str]) -> list[tuple[str, int, str, str]]:
    """Each turn of these sessions as it reads: (session_id, seq, role, body)."""
    return conn.execute(query("bench_turn_lengths"), {"session_ids": session_ids}).fetchall()


# --- bench serve (memory_pipelines.bench.serve) -------------------------------------------

def busiest_user(conn: psycopg.Connection) -> str | None:
    """The user with the most served facts (None: no facts)."""
    return next(iter(conn.execute(query("bench_busiest_user")).fetchone() or ()), None)


def user_size(conn: psycopg.Connection, user_id: str) -> tuple[int, int]:
    """The user's served facts and turns: (facts, turns)."""
    return conn.execute(query("bench_user_size"), {"user_id": user_id}).fetchone()


def fact_keys(conn: psycopg.Connection, user_id: str) -> list[str]:
    """The user's distinct served fact keys, sorted (200 at the most)."""
    return [key for (key,) in conn.execute(query("bench_fact_keys"), {"user_id": user_id})]


# --- bench distill's server load (assets.bench.distill) ----------------------------------

def server_activity(conn: psycopg.Connection) -> list[dict]:
    """What every other client connection does now, as dicts: kind, event, connections."""
    return _dict_rows(conn, "bench_server_activity")


def server_counters(conn: psycopg.Connection) -> dict:
    """The server's cumulative counters (WAL, checkpoints, this database's transactions), by name."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query("bench_server_counters")).fetchone()


def named_rows(conn: psycopg.Connection, name: str, params: dict) -> list[tuple]:
    """The rows of the serving query `name`, as the search benchmark times and checks it."""
    return conn.execute(query(name), params).fetchall()
