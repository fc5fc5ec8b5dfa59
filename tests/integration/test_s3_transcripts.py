"""Transcripts from an s3:// prefix, against a real S3 wire server on 127.0.0.1: a run reads
only the objects new or changed since the last one; a deleted or unreadable object is
reported, not fatal."""

from __future__ import annotations

import json

import dagster as dg
import psycopg

from assets.ingestion import transcripts
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from tests.helpers import materialization_metadata, materialize_partitions, sensor_context
from tests.s3_server import delete_object, put_object


def _line(session: str, seq: int, ts: str, content: str) -> str:
    return json.dumps({"session_id": session, "user_id": "bob", "seq": seq, "role": "user",
                       "content": content, "ts": ts}).encode() + b"\n"


def _run(url: str, location: str, day: str, endpoint: str) -> dict:
    [result] = materialize_partitions([transcripts], [day], url, location, s3_endpoint_url=endpoint)
    return materialization_metadata(result, "transcripts")


def test_a_prefix_is_ingested_and_the_next_run_reads_only_what_is_new(s3_bucket, database_url):
    endpoint, bucket = s3_bucket
    for path in sorted((SAMPLE_TRANSCRIPTS / "bob").glob("*.jsonl")):
        put_object(endpoint, bucket, f"agents/bob/{path.name}", path.read_bytes())
    put_object(endpoint, bucket, "agents/README.txt", b"not a transcript")
    put_object(endpoint, bucket, "elsewhere/x.jsonl", _line("x-1", 1, "2026-10-04T09:00:00Z", "outside the prefix"))
    location = f"s3://{bucket}/agents"
    listed = len(list((SAMPLE_TRANSCRIPTS / "bob").glob("*.jsonl")))

    first = _run(database_url, location, "2026-10-04", endpoint)
    assert first["files_listed"] == listed and first["files_indexed"] == listed and first["stored"] > 0
    assert first["files_skipped_first"] == ["README.txt"]
    with psycopg.connect(database_url) as conn:
        sources = {row[0] for row in conn.execute("SELECT DISTINCT source_file FROM messages")}
        # the index keeps each object's size, modification time and the ETag of the version read
        indexed = conn.execute("SELECT name, etag FROM transcript_objects").fetchall()
    assert sources and all(s.startswith("bob/") for s in sources)
    assert len(indexed) == listed and all(etag for _, etag in indexed)

    # an object added: the next run scans only it, and reads only it for its day
    put_object(endpoint, bucket, "agents/late/2026-10-20.jsonl",
               _line("late-1", 1, "2026-10-20T08:00:00Z", "late news") +
               _line("late-1", 2, "2026-10-20T08:01:00Z", "more late news"))
    late = _run(database_url, location, "2026-10-20", endpoint)
    assert (late["files_listed"], late["files_indexed"], late["file_reads"], late["stored"]) == (listed + 1, 1, 1, 2)
    # nothing new: nothing scanned again, and the day reads its files only
    again = _run(database_url, location, "2026-10-04", endpoint)
    assert again["files_indexed"] == 0 and again["stored"] == 0 and again["duplicate"] == first["stored"]

    # an object deleted and one unreadable (a broken Parquet file): reported, not fatal
    delete_object(endpoint, bucket, "agents/late/2026-10-20.jsonl")
    put_object(endpoint, bucket, "agents/late/broken.parquet", b"PAR1 not parquet at all")
    put_object(endpoint, bucket, "agents/late/2026-10-21.jsonl", _line("late-2", 1, "2026-10-21T08:00:00Z", "still here"))
    after = _run(database_url, location, "2026-10-21", endpoint)
    assert after["files_gone"] == 1 and after["stored"] == 1
    with psycopg.connect(database_url) as conn:
        kept = conn.execute("SELECT count(*) FROM messages WHERE session_id = 'late-1'").fetchone()[0]
        refused = conn.execute("SELECT source_file, reason FROM quarantine").fetchall()
    assert kept == 2, "a deleted object's archived messages stay"
    assert refused == [("late/broken.parquet", "unreadable_file")]


def test_the_sensor_requests_the_days_of_new_objects(s3_bucket, monkeypatch, database_url):
    from assets.definitions import transcript_files_sensor

    endpoint, bucket = s3_bucket
    put_object(endpoint, bucket, "logs/a.jsonl", _line("s-1", 1, "2026-10-04T09:00:00Z", "first"))
    monkeypatch.setenv("MEMORY_TRANSCRIPTS", f"s3://{bucket}/logs")
    context = sensor_context(database_url, None)
    assert [r.partition_key for r in transcript_files_sensor(context)] == ["2026-10-04"]
    assert isinstance(transcript_files_sensor(sensor_context(database_url, context.cursor)), dg.SkipReason)
    put_object(endpoint, bucket, "logs/b.jsonl", _line("s-2", 1, "2026-10-09T09:00:00Z", "second"))
    assert [r.partition_key for r in transcript_files_sensor(sensor_context(database_url, context.cursor))] \
        == ["2026-10-09"]


def test_memory_pipelines_run_reads_a_bucket_prefix(s3_bucket, database_url):
    from tests.integration.test_cli import cli

    endpoint, bucket = s3_bucket
    put_object(endpoint, bucket, "logs/a.jsonl", _line("s-1", 1, "2026-10-04T09:00:00Z", "we deploy on Tuesdays") +
               _line("s-1", 2, "2026-10-04T09:01:00Z", "and never on Fridays"))
    done = cli("run", "--transcripts", f"s3://{bucket}/logs")
    assert done.returncode == 0, done.stderr
    assert f"transcripts: s3://{bucket}/logs" in done.stdout and "partitions:  2026-10-04 .. 2026-10-04" in done.stdout
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT source_file, count(*) FROM messages GROUP BY 1").fetchall() == [("a.jsonl", 2)]
    missing = cli("run", "--transcripts", f"s3://{bucket}-nope/logs")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
