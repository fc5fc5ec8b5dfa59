"""The rows in scope of the data-quality checks (`sql/queries/checks.sql`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pandas as pd
import psycopg
from psycopg import sql

from memory_pipelines.db.queries import query


def check_frame(conn: psycopg.Connection, rows_query: str, params: Mapping) -> pd.DataFrame:
    """The rows in scope of a data-quality check (a named query of sql/queries/checks.sql)."""
    with conn.cursor() as cur:
        rows = cur.execute(query(rows_query), params).fetchall()
        return pd.DataFrame(rows, columns=[column.name for column in cur.description])


def check_frames(conn: psycopg.Connection, rows_query: str, params: Mapping, columns: Sequence[str] | None,
                 rows: int) -> Iterator[pd.DataFrame]:
    """The rows in scope of a data-quality check as frames of about `rows` rows, never
    splitting rows equal on `columns` (ordered by them; (): cut anywhere; None: one frame). A
    server-side cursor reads them a block at a time, so a check over a year's rows holds one
    frame at a time."""
    if columns is None:
        yield check_frame(conn, rows_query, params)
        return
    statement = sql.SQL(query(rows_query).rstrip().rstrip(";"))
    if columns:
        statement = sql.SQL(query("check_rows_ordered")).format(
            rows=statement, columns=sql.SQL(", ").join(map(sql.Identifier, columns)))
    with conn.transaction(), conn.cursor(name="memory_check_rows") as cur:
        conn.execute(query("check_rows_plan"))
        cur.execute(statement, params)
        names = [column.name for column in cur.description]
        positions = [names.index(c) for c in columns]
        pending: list[tuple] = []
        while block := cur.fetchmany(rows):
            pending += block
            if len(pending) < rows:
                continue
            cut = len(pending)
            if positions:  # the last row whose key differs from the one before: a frame ends there
                last = [pending[-1][i] for i in positions]
                while cut > 0 and [pending[cut - 1][i] for i in positions] == last:
                    cut -= 1
            if cut:
                yield pd.DataFrame(pending[:cut], columns=names)
                pending = pending[cut:]
        yield pd.DataFrame(pending, columns=names)
