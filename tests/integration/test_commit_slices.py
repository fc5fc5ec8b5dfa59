"""Work stored in time slices: cheap items share a commit, a slow one ends its slice, and an
error loses only the slice it happened in (with `Slices`, only its own item)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from memory_pipelines.db.facts_chunks import lock_users, try_lock_sessions_and_users
from memory_pipelines.stages.common import Slices, commit_in_slices


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


def test_writes_held_back_are_flushed_in_their_slice_and_lost_with_a_failed_one(database_url):
    def items():
        yield "a"
        yield "b"
        time.sleep(0.2)
        yield "c"
        yield "d"
        raise Interrupted("the run stopped here")

    held: list[str] = []
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE stored (item text PRIMARY KEY, xid bigint NOT NULL)")

        def flush() -> None:
            [(xid,)] = conn.execute("SELECT txid_current()").fetchall()
            with conn.cursor().copy("COPY stored (item, xid) FROM STDIN") as copy:  # no COPY in a pipeline
                for item in held:
                    copy.write_row((item, xid))
            held.clear()

        with pytest.raises(Interrupted):
            commit_in_slices(conn, items(), held.append, flush, seconds=0.1)
        stored = dict(conn.execute("SELECT item, xid FROM stored").fetchall())

    assert sorted(stored) == ["a", "b", "c"] and held == ["d"]
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


def test_slices_share_a_transaction_and_a_failed_item_undoes_only_itself(database_url):
    with psycopg.connect(database_url, autocommit=True) as setup:
        setup.execute("CREATE TABLE stored (item text PRIMARY KEY, xid bigint NOT NULL)")
    firsts = []
    with psycopg.connect(database_url) as conn:
        with pytest.raises(psycopg.errors.UniqueViolation), Slices(conn, seconds=60) as slices:
            for item in ["a", "b", "a", "c"]:
                with slices.item() as first:
                    firsts.append(first)
                    conn.execute("INSERT INTO stored VALUES (%s, txid_current())", [item])
        stored = dict(conn.execute("SELECT item, xid FROM stored").fetchall())
    # a and b share one commit, made before the error went on; the second a undid itself alone
    assert firsts == [True, False, False]
    assert sorted(stored) == ["a", "b"] and len(set(stored.values())) == 1


def test_an_item_joins_a_slice_only_with_its_locks_and_otherwise_waits_for_them_in_a_new_one(database_url):
    """A slice holding locks waits for no more (locks taken out of order would deadlock two
    runs): an item whose session or user lock is held elsewhere commits the slice first,
    then waits for the lock in a slice of its own."""
    with psycopg.connect(database_url, autocommit=True) as setup:
        setup.execute("CREATE TABLE stored (item text PRIMARY KEY, xid bigint NOT NULL)")
    released = threading.Event()

    def release() -> None:  # the other run's transaction ends
        released.set()
        other.rollback()

    firsts = {}
    with psycopg.connect(database_url) as conn, psycopg.connect(database_url) as other:
        lock_users(other, ["u2"])  # another run's transaction holds user u2
        assert not try_lock_sessions_and_users(conn, ["s9"], ["u1", "u2"])
        conn.rollback()
        with Slices(conn, seconds=60) as slices:
            for item, session_id, user_id in [("a", "s1", "u1"), ("b", "s2", "u3"), ("c", "s3", "u2")]:
                conn.execute("SELECT 1")  # a read before each item, as the day's due sessions are
                if item == "c":
                    threading.Timer(1.0, release).start()
                with slices.item([session_id], [user_id]) as first:
                    firsts[item] = first
                    if item == "c":
                        assert released.is_set()  # it waited for the other transaction's lock
                    else:  # the item holds its locks, whether it began the slice or joined it
                        assert not try_lock_sessions_and_users(other, [session_id], [])
                        assert not try_lock_sessions_and_users(other, [], [user_id])
                    conn.execute("INSERT INTO stored VALUES (%s, txid_current())", [item])
        # the slices were committed: no lock of theirs is left
        assert try_lock_sessions_and_users(other, ["s1", "s2", "s3"], ["u1", "u2", "u3"])
        other.rollback()
        stored = dict(conn.execute("SELECT item, xid FROM stored").fetchall())
    assert firsts == {"a": True, "b": False, "c": True}
    assert sorted(stored) == ["a", "b", "c"]
    assert stored["a"] == stored["b"] != stored["c"]
