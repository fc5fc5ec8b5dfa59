"""Work stored in time slices: cheap items share a commit, a slow one ends its slice, and an
error loses only the slice it happened in."""

from __future__ import annotations

import time

import psycopg
import pytest

from memory_pipelines.stages.common import commit_in_slices


class Interrupted(Exception):
    pass


def test_cheap_items_share_a_commit_a_slow_one_ends_it_and_an_error_loses_only_its_slice(database_url):
    def items():
        yield "a"
        yield "b"
        time.sleep(0.2)  # a model call longer than the slice
        yield "c"
        yield "d"
        raise Interrupted("the run stopped here")

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE stored (item text PRIMARY KEY, xid bigint NOT NULL)")
        with pytest.raises(Interrupted):
            commit_in_slices(conn, items(), lambda item: conn.execute(
                "INSERT INTO stored VALUES (%s, txid_current())", [item]), seconds=0.1)
        stored = dict(conn.execute("SELECT item, xid FROM stored").fetchall())

    # d was stored in the slice the error rolled back; a, b and c were committed together
    assert sorted(stored) == ["a", "b", "c"]
    assert len(set(stored.values())) == 1


def test_items_slower_than_the_slice_commit_one_by_one(database_url):
    def items():
        for item in "xyz":
            time.sleep(0.05)
            yield item

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE stored (item text PRIMARY KEY, xid bigint NOT NULL)")
        commit_in_slices(conn, items(), lambda item: conn.execute(
            "INSERT INTO stored VALUES (%s, txid_current())", [item]), seconds=0.01)
        stored = dict(conn.execute("SELECT item, xid FROM stored").fetchall())

    assert sorted(stored) == ["x", "y", "z"]
    assert len(set(stored.values())) == 3
