"""The model server failing at seeded requests (5xx, timeouts, closed connections, answers
that are not JSON) while the whole graph runs in-process: every failed call is reported,
nothing half-written is visible, and a run after the faults ends with an undisturbed run's
tables."""

from __future__ import annotations

import random
import re
import shutil
from collections import Counter
from pathlib import Path

import dagster as dg
import psycopg
import pytest

from assets.definitions import all_assets
from assets.resources import ModelResource
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from tests.fakes import FakeModelServer, Fault, Request, default_answer
from tests.helpers import (
    AUDIT_COLUMNS, content_fingerprints, materialize_partitions, partial_writes, pipeline_resources, table_fingerprints,
)

# dmitri: a long session (several summary chunks at 6,000 characters) and one that crosses
# midnight (an overturned-entries check on its second day): every model call purpose occurs.
DAYS = ["2026-10-06", "2026-10-07", "2026-10-08"]
CHUNK_CHARS = 6000
TIMEOUT_S = 1.0
KINDS = {"5xx": Fault(status=503), "timeout": Fault(delay_s=TIMEOUT_S + 0.5), "closed": Fault(close=True),
         "garbage": Fault(garbage=True)}
# between them, a failed call of every purpose (the overturned-entries check included) and
# a fault the client's retry absorbs
SEEDS = (4, 23)
# An extraction a failure held back is done by a later day's run: which partition did it and
# the window end it ran for record when that was; the facts themselves must be equal.
DEFERRED_TABLES = ("memory_facts", "session_memory_state")
WHEN_DONE = AUDIT_COLUMNS | {"partition_key", "extracted_at"}


def answer(request: Request, number: int) -> dict:
    """The fake's answers, with noise, overturned entries, facts from a chunk's first and last
    request and a knowledge entry rewritten every chunk: a lost or late judgement, overturn
    check or distillation shows in the tables."""
    if request.purpose == "judge_segments":
        parts = re.split(r"^### segment (\S+)$", request.user, flags=re.MULTILINE)[1:]
        return {"segments": [{"id": i, "noise": "thank" in text.lower(), "confidence": 0.9,
                              "reason": "thanks" if "thank" in text.lower() else None}
                             for i, text in zip(parts[::2], parts[1::2])]}
    if request.purpose == "find_overturned":
        return {"overturned": [1]}
    said = re.findall(r"^\[(\d+)\] User: (.*)$", request.user, re.MULTILINE)
    if request.purpose == "distill" and said:  # (a chunk may hold replies only)
        last_seq, last = said[-1]
        return {**default_answer(request, number),
                "facts": [{"category": "notes", "key": f"note_{seq}", "value": text[:80], "source": "conversation",
                           "seq": int(seq)} for seq, text in said[:1] + said[-1:]],
                "entries": [{"kind": "project", "title": "Current work", "content": last[:200], "seq": int(last_seq)}]}
    return default_answer(request, number)


def model(server: FakeModelServer) -> ModelResource:
    # one HTTP retry per call; the steps' own retry policy (2 retries, no pause in tests) on top
    return ModelResource(backend="ollama", base_url=server.url, model="fake-llm", retries=1, backoff_s=0.0,
                         timeout_s=TIMEOUT_S)


def run(url: str, folder: Path, server: FakeModelServer, instance: dg.DagsterInstance, **kwargs):
    resources = pipeline_resources(url, folder, llm=model(server), decision=model(server), chunk_chars=CHUNK_CHARS)
    return materialize_partitions(all_assets, DAYS, url, folder, instance, resources=resources, **kwargs)


def recovered_state(url: str) -> dict:
    return {**content_fingerprints(url), **table_fingerprints(url, DEFERRED_TABLES, skip_columns=WHEN_DONE)}


def rows(url: str, statement: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(statement).fetchall()


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("transcripts")
    shutil.copytree(SAMPLE_TRANSCRIPTS / "dmitri", folder / "dmitri")
    return folder


@pytest.fixture(scope="module")
def undisturbed(make_module_database, folder) -> tuple[dict, Counter]:
    """An undisturbed run's tables against the same answers, and its requests per purpose."""
    url = make_module_database()
    server = FakeModelServer(answer=answer)
    try:
        run(url, folder, server, dg.DagsterInstance.ephemeral())
    finally:
        server.close()
    calls = Counter(r.purpose for r in server.requests)
    assert set(calls) == {"judge_segments", "distill", "find_overturned", "summarize_facts", "summarize_node"}
    assert rows(url, "SELECT count(*) FROM conversation_segments WHERE dropped")[0][0] > 0
    assert rows(url, "SELECT count(*) FROM session_summary_versions WHERE trimmed <> '[]'")[0][0] > 0
    assert rows(url, "SELECT count(*) FROM knowledge_entry_versions")[0][0] > 1
    return recovered_state(url), calls


def fault_plan(seed: int, calls: Counter) -> dict[tuple[str, int], str]:
    """(purpose, its n-th request) -> fault: each kind once, on a purpose and request drawn
    with the seed. Half of the time the fault hits the client's retry too, the next request
    of that purpose (a transport fault is retried by the HTTP client, an answer that is not
    JSON is asked again once), so that the call fails."""
    rng = random.Random(seed)
    kinds = sorted(KINDS)
    rng.shuffle(kinds)
    plan = {}
    for kind, purpose in zip(kinds, rng.sample(sorted(calls), len(kinds))):
        number = rng.randint(1, calls[purpose])
        plan[(purpose, number)] = kind
        if rng.random() < 0.5:
            plan[(purpose, number + 1)] = kind
    return plan


def reported(instance: dg.DagsterInstance, results) -> str:
    """What the runs told: log lines, and step failures and retries with their errors and metadata."""
    lines = []
    for result in results:
        for entry in instance.all_logs(result.run_id):
            lines.append(entry.user_message)
            data = entry.dagster_event.event_specific_data if entry.dagster_event else None
            error = getattr(data, "error", None)
            while error is not None:
                lines.append(error.message)
                error = error.cause
            failure = getattr(data, "user_failure_data", None)
            if failure is not None:
                lines += [failure.description or "", *(str(v.value) for v in failure.metadata.values())]
    return "\n".join(lines)


@pytest.mark.parametrize("seed", SEEDS)
def test_model_faults_at_seeded_requests_are_reported_and_the_next_run_recovers(
        undisturbed, folder, make_database, seed):
    expected, calls = undisturbed
    plan = fault_plan(seed, calls)
    seen: Counter = Counter()
    injected: list[tuple[str, int, str]] = []

    def fail(request: Request, number: int) -> Fault | None:
        seen[request.purpose] += 1
        kind = plan.get((request.purpose, seen[request.purpose]))
        if kind is not None:
            injected.append((request.purpose, seen[request.purpose], kind))
        return KINDS.get(kind)

    url = make_database()
    instance = dg.DagsterInstance.ephemeral()
    server = FakeModelServer(answer=answer, fail=fail)
    try:
        results = run(url, folder, server, instance, expect_success=False)
        assert len(injected) == len(plan), f"faults planned: {plan}, made: {injected}"

        # a fault on both attempts of a call fails the call; one on the first attempt only is
        # retried into success (two requests)
        first = [(purpose, n, kind) for purpose, n, kind in injected if (purpose, n - 1) not in plan]
        failing = Counter((purpose, "unparsable" if kind == "garbage" else "error") for purpose, n, kind in first
                          if (purpose, n + 1) in plan)
        recovered = Counter(purpose for purpose, n, kind in first if (purpose, n + 1) not in plan)
        failed = rows(url, "SELECT purpose, status, backend, model, error FROM llm_calls WHERE status <> 'ok'")
        assert Counter((purpose, status) for purpose, status, *_ in failed) == failing, injected
        assert Counter(r[0] for r in rows(url, "SELECT purpose FROM llm_calls WHERE status = 'ok' "
                                               "AND attempts = 2")) == recovered, injected
        # every failed call is named where the run reports (the CLI prints the same lines)
        told = reported(instance, results)
        for purpose, status, backend, name, error in failed:
            assert f"{purpose} via {backend}/{name}: {status}: {error}" in told, (purpose, error)
        assert partial_writes(url) == {}

        server.fail = lambda request, number: None
        assert all(r.success for r in run(url, folder, server, instance))
    finally:
        server.close()
    assert recovered_state(url) == expected
