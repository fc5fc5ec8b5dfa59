"""Row shapes shared by the `db` modules: messages read by position, rows grouped by key, the
lineage of rows no model call wrote."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import fields
from itertools import groupby

import psycopg
from psycopg import sql
from psycopg.rows import RowFactory, args_row

from memory_pipelines.db.queries import query
from memory_pipelines.records import Message


# the lineage of a row no model call wrote (the API's writes): its call_id
NO_CALL = {"call_id": None}


def positional_rows(record: type) -> RowFactory:
    """Rows as `record`s passed by position (a third faster than by name, at 100k messages a
    read): the query's columns must be the record's leading fields, in order."""
    names = tuple(f.name for f in fields(record))
    by_position = args_row(record)

    def factory(cursor):
        columns = tuple(column.name for column in cursor.description or ())
        if columns != names[:len(columns)]:
            raise ValueError(f"a {record.__name__} query's columns {columns} are not its leading fields in order")
        return by_position(cursor)

    return factory


_MESSAGE_ROWS = positional_rows(Message)


def message_rows(conn: psycopg.Connection, name: str, params: dict) -> list[Message]:
    with conn.cursor(row_factory=_MESSAGE_ROWS) as cur:
        return cur.execute(query(name), params).fetchall()


def by_session(messages: Sequence[Message]) -> dict[str, list[Message]]:
    """Messages ordered by session, grouped by it (sessions without any are left out)."""
    return {session_id: list(group) for session_id, group in groupby(messages, key=lambda m: m.session_id)}


def grouped(rows: Iterable[Sequence]) -> dict:
    """(key, value) rows -> key -> the values, in row order (keys without rows left out)."""
    grouped: dict = {}
    for key, value in rows:
        grouped.setdefault(key, []).append(value)
    return grouped


def load_rows(conn: psycopg.Connection, create: str, table: str, rows: Iterable[Sequence]) -> None:
    """`rows` (the columns of `table`, in order) into the connection's temp load table `table`
    (the named query `create` makes it or empties it) by binary `COPY`, for one statement to
    write them."""
    conn.execute(query(create))
    types = [oid for (oid,) in conn.execute(query("load_column_types"), {"table": table})]
    with conn.cursor().copy(sql.SQL(query("copy_load")).format(table=sql.Identifier(table))) as copying:
        copying.set_types(types)
        for row in rows:
            copying.write_row(row)


def in_rounds(keyed: Iterable[tuple[Hashable, Sequence]], rounds: Counter) -> Iterator[tuple]:
    """Each (key, row) as (position, round, *row), round n holding each key's n-th row: an
    upsert a round at a time applies the rows of one key in order (a statement may not update
    one row twice). `rounds` counts each key's rows; its largest count is the rounds needed."""
    for position, (key, row) in enumerate(keyed):
        rounds[key] += 1
        yield (position, rounds[key], *row)
