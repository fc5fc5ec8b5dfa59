"""S3Store against a real S3 wire server (moto): listing, reading, changes, and the errors
that name what to fix."""

from __future__ import annotations

import time

import pytest

from memory_pipelines.sources.base import SourceObject, TranscriptSourceError, UnreadableObject
from memory_pipelines.sources.s3 import S3Store
from tests.s3_server import delete_object, moto_server, put_object

LINE = b'{"session_id": "s1", "user_id": "u", "role": "user", "content": "hi", "seq": 1}\n'


def _store(s3_bucket, prefix: str = "transcripts/") -> S3Store:
    endpoint, bucket = s3_bucket
    return S3Store(f"s3://{bucket}/{prefix}", endpoint_url=endpoint)


def _object(store: S3Store, name: str) -> SourceObject:
    return next(o for o in store.list_objects().objects if o.name == name)


def test_lists_transcripts_under_the_prefix_sorted_and_relative(s3_bucket):
    endpoint, bucket = s3_bucket
    for key in ["transcripts/b/2026-10.jsonl", "transcripts/a/deep/x.NDJSON", "transcripts/top.parquet",
                "transcripts/a/y.json", "transcripts/a/notes.txt", "transcripts-old/z.jsonl", "other/w.jsonl"]:
        put_object(endpoint, bucket, key, LINE)

    listing = _store(s3_bucket).list_objects()

    assert [o.name for o in listing.objects] == ["a/deep/x.NDJSON", "a/y.json", "b/2026-10.jsonl", "top.parquet"]
    assert listing.skipped == ("a/notes.txt",)
    assert all(o.size == len(LINE) and o.mtime_ns > 0 and o.etag is None for o in listing.objects)


@pytest.mark.parametrize("prefix", ["transcripts", "transcripts/"])
def test_prefix_with_or_without_trailing_slash(s3_bucket, prefix):
    endpoint, bucket = s3_bucket
    put_object(endpoint, bucket, "transcripts/u/a.jsonl", LINE)
    assert [o.name for o in _store(s3_bucket, prefix).list_objects().objects] == ["u/a.jsonl"]


def test_whole_bucket_location(s3_bucket):
    endpoint, bucket = s3_bucket
    put_object(endpoint, bucket, "u/a.jsonl", LINE)
    store = S3Store(f"s3://{bucket}", endpoint_url=endpoint)
    assert store.location == f"s3://{bucket}"
    assert [o.name for o in store.list_objects().objects] == ["u/a.jsonl"]


def test_reads_one_object_back(s3_bucket):
    endpoint, bucket = s3_bucket
    data = LINE * 3 + "ünïcode\n".encode()
    put_object(endpoint, bucket, "transcripts/u/a.jsonl", data)
    put_object(endpoint, bucket, "transcripts/u/b.jsonl", LINE)
    store = _store(s3_bucket)
    read = store.read(_object(store, "u/a.jsonl"))
    # the ETag of the version read comes with its bytes (S3 names a single-part upload's by its MD5)
    assert read.data == data and read.etag and read.etag != store.read(_object(store, "u/b.jsonl")).etag


def test_a_rewritten_object_changes_its_state(s3_bucket):
    endpoint, bucket = s3_bucket
    put_object(endpoint, bucket, "transcripts/a.jsonl", LINE)
    store = _store(s3_bucket)
    first = _object(store, "a.jsonl")

    put_object(endpoint, bucket, "transcripts/a.jsonl", LINE * 2)
    grown = _object(store, "a.jsonl")
    assert grown.size == 2 * len(LINE) and grown.state != first.state

    # S3 reports modification times in whole seconds: a same-size rewrite shows only in a later second
    time.sleep(1.05 - time.time() % 1)
    put_object(endpoint, bucket, "transcripts/a.jsonl", LINE.replace(b"hi", b"ho") * 2)
    rewritten = _object(store, "a.jsonl")
    assert rewritten.size == grown.size and rewritten.mtime_ns > grown.mtime_ns


def test_an_object_deleted_after_listing_is_unreadable(s3_bucket):
    endpoint, bucket = s3_bucket
    put_object(endpoint, bucket, "transcripts/a.jsonl", LINE)
    store = _store(s3_bucket)
    obj = _object(store, "a.jsonl")
    delete_object(endpoint, bucket, "transcripts/a.jsonl")

    with pytest.raises(UnreadableObject) as caught:
        store.read(obj)
    assert str(caught.value) == (f"cannot read a.jsonl from s3://{bucket}/transcripts/ at {endpoint}: "
                                 "it is gone since it was listed (deleted or renamed)")


def test_a_missing_bucket_names_location_endpoint_and_fix(s3_bucket):
    endpoint, _ = s3_bucket
    with pytest.raises(TranscriptSourceError) as caught:
        S3Store("s3://no-such-bucket/p", endpoint_url=endpoint).list_objects()
    assert str(caught.value) == (f"cannot list s3://no-such-bucket/p at {endpoint}: bucket 'no-such-bucket' "
                                 "does not exist — check the location and MEMORY_S3_ENDPOINT_URL")


def test_a_prefix_with_no_object_is_refused_like_a_missing_folder(s3_bucket):
    endpoint, bucket = s3_bucket
    put_object(endpoint, bucket, "transcripts/a.jsonl", LINE)
    with pytest.raises(TranscriptSourceError, match=r"no object has this prefix — check the location$"):
        _store(s3_bucket, "transcripst/").list_objects()


def test_a_dead_endpoint_fails_fast_with_one_line(s3_bucket):
    _, bucket = s3_bucket
    dead = "http://127.0.0.1:9"  # discard port: nothing listens, the connection is refused
    store = S3Store(f"s3://{bucket}/p", endpoint_url=dead)
    started = time.monotonic()
    with pytest.raises(TranscriptSourceError) as caught:
        store.list_objects()
    message = str(caught.value)
    assert message.startswith(f"cannot list s3://{bucket}/p at {dead}: cannot connect: ")
    assert "127.0.0.1:9" in message.split(": cannot connect: ")[1]
    assert message.endswith(" — check MEMORY_S3_ENDPOINT_URL and the AWS_* credentials")
    assert "\n" not in message and time.monotonic() - started < 10

    with pytest.raises(UnreadableObject, match=r"^cannot read a\.jsonl from .* cannot connect: "):
        store.read(SourceObject("a.jsonl", 1, 0))


def test_refused_credentials_are_named(s3_bucket):
    # a server that enforces IAM knows no access key at all: every request is refused
    with moto_server({"INITIAL_NO_AUTH_ACTION_COUNT": "0"}) as strict:
        store = S3Store("s3://b/p", endpoint_url=strict)
        with pytest.raises(TranscriptSourceError) as listed:
            store.list_objects()
        with pytest.raises(UnreadableObject) as read:
            store.read(SourceObject("a.jsonl", 1, 0))
    assert str(listed.value).startswith(f"cannot list s3://b/p at {strict}: access denied (invalid_access_key_id: ")
    assert str(listed.value).endswith(" — check the AWS_* credentials and the bucket's policy")
    assert str(read.value) == (f"cannot read a.jsonl from s3://b/p at {strict}: access denied (access_denied) "
                               "— check the AWS_* credentials and the bucket's policy")


@pytest.mark.parametrize(("location", "endpoint", "wrong"), [
    ("/data/transcripts", None, "not an object-storage location: '/data/transcripts'"),
    ("s3:///prefix", None, "not an object-storage location"),
    ("s3://b/p", "127.0.0.1:9000", "not an S3 endpoint: '127.0.0.1:9000'"),
    ("s3://b/p", "http://host:9000/some/path", "not an S3 endpoint"),
])
def test_malformed_locations_and_endpoints_are_refused(location, endpoint, wrong):
    with pytest.raises(TranscriptSourceError, match=wrong):
        S3Store(location, endpoint_url=endpoint)
