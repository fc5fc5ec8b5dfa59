"""Issue 36 on the CPUs of the field reports, on any machine: the embedded server's own build
of PostgreSQL and pgvector run under QEMU as an AMD EPYC Zen 2 (AVX2, no AVX-512) and as a
Sandy Bridge (AVX, no AVX2). On the first, the doctor's self-test and unified search in every
scope answer over the distilled sample, while a float `vector` distance would still kill the
server (the emulation really lacks AVX-512); on the second, the self-test names the crash.
The pipeline's own native JSON reader (orjson) runs on both, and the onnx embedder's int8 model
gives the Zen 2 (no VNNI) the vectors it gives this machine."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import numpy as np
import psycopg
import pytest
from pgserver._commands import POSTGRES_BIN_PATH

from memory_pipelines.config import load
from memory_pipelines.db.outage import ServerLog, connection_lost
from memory_pipelines.db.selftest import MIGRATIONS, PROBES, run_selftest
from memory_pipelines.db.vectors import register_vector_types
from memory_pipelines.embed import EmbedConfig, build_embedder, embed_config
from memory_pipelines.records import SEARCH_SCOPES
from memory_pipelines.search import UnifiedMemorySearch
from tests.conftest import SAMPLE_DB
from tests.emulated import QEMU, emulated_server
from tests.helpers import EMBEDDER_SENTENCES, with_database

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(platform.machine() != "x86_64", reason="AVX-512 is an x86-64 matter")]

ZEN2, SANDY_BRIDGE = "EPYC-Rome", "SandyBridge-v2"
VECTOR = "[" + ",".join(str((i % 7) - 3) for i in range(384)) + "]"


def test_on_an_avx2_cpu_the_self_test_and_every_search_scope_answer(pg_admin_url, sample_template, monkeypatch):
    monkeypatch.setenv("MEMORY_EMBED_BACKEND", "hashing")
    with emulated_server(ZEN2) as (url, log):
        probes = run_selftest(url, log)
        assert [(p.name, p.ok, p.detail) for p in probes] == [(MIGRATIONS, True, "")] + [
            (name, True, "") for name, _ in PROBES]

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE sample")
        sample = with_database(url, "sample")
        dump = subprocess.run([str(POSTGRES_BIN_PATH / "pg_dump"), "-Fc", "-d", with_database(pg_admin_url, SAMPLE_DB)],
                              capture_output=True, check=True).stdout
        subprocess.run([str(POSTGRES_BIN_PATH / "pg_restore"), "--no-owner", "-d", sample], input=dump, check=True,
                       capture_output=True)
        embedder = build_embedder(embed_config(load()))
        with psycopg.connect(sample, autocommit=True) as conn:
            register_vector_types(conn)
            search = UnifiedMemorySearch(conn, embedder)
            served = {scope: search.serve("which port does ledger-api use", scope=scope, k=5, user_id="bob",
                                          budget_chars=2000) for scope in SEARCH_SCOPES}
        assert "9090" in " ".join(hit.text for hit in served["all"].hits)
        assert all(served[scope].hits for scope in ("all", "facts", "raw", "knowledge")), served
        assert {hit.user_id for s in served.values() for hit in s.hits} == {"bob"}

        # the emulated CPU has no AVX-512: the float vector distance the project gave up dies here
        crash = ServerLog(log)
        with psycopg.connect(url, autocommit=True) as conn, pytest.raises(psycopg.OperationalError) as lost:
            conn.execute("SELECT %s::vector <=> %s::vector", (VECTOR, VECTOR))
        assert connection_lost(lost.value) and crash.end().signal == 4


def test_on_a_cpu_without_avx2_the_self_test_names_the_crash(pg_admin_url):
    with emulated_server(SANDY_BRIDGE) as (url, log):
        probes = {p.name: p for p in run_selftest(url, log)}
    assert probes[MIGRATIONS].ok  # pgvector loads; its halfvec code needs F16C and AVX2
    halfvec = probes["halfvec storage and distance"]
    assert not halfvec.ok and halfvec.detail.startswith("killed the server process (signal 4: Illegal instruction")
    assert probes["turn lexemes, every text search configuration"].ok and probes["trigram index (ILIKE)"].ok


@pytest.mark.parametrize("cpu", [ZEN2, SANDY_BRIDGE])
def test_the_pipelines_json_reader_runs_on_cpus_without_avx512_or_avx2(cpu):
    """orjson's wheel (memory_pipelines/db/jsonb.py) picks its instructions as it runs: on
    these CPUs it reads what the standard library reads instead of dying of SIGILL."""
    script = ("import json; from memory_pipelines.db.jsonb import read_json; "
              "doc = json.dumps({'text': 'naïve — 東京 🙂 ' * 500, 'n': [1, 2.5, None, 10 ** 30]}).encode(); "
              "print('same' if read_json(doc) == json.loads(doc) else 'different')")
    ran = subprocess.run([QEMU, "-cpu", cpu, sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert (ran.returncode, ran.stdout.strip()) == (0, "same"), ran.stderr[-2000:]


def test_the_int8_embedders_give_a_cpu_without_vnni_the_vectors_they_give_this_one(tmp_path):
    """With 8-bit weights the Zen 2's sums saturated: cosine 0.991 on average (0.963 at worst) to
    the vectors of a CPU with VNNI, under one model id. The 7-bit weights give the same vectors,
    in int8 and in mixed (the default embedder); test_onnx_embedder checks the bound on any
    machine, this shows it where the CPU has VNNI."""
    pytest.importorskip("onnxruntime", reason="needs the 'local' extra (the CI test command installs it)")
    pytest.importorskip("sentence_transformers", reason="needs the 'local' extra (the CI test command installs it)")
    precisions = ("int8", "mixed")
    # exports and quantizes (torch) here
    here = [build_embedder(EmbedConfig(backend="onnx", precision=precision, cache_dir=str(tmp_path)))
            .embed(list(EMBEDDER_SENTENCES)) for precision in precisions]
    script = ("import json; from memory_pipelines.embed import EmbedConfig, build_embedder; "
              f"print(json.dumps([build_embedder(EmbedConfig(backend='onnx', precision=p, cache_dir={str(tmp_path)!r}))"
              f".embed({list(EMBEDDER_SENTENCES)!r}).tolist() for p in {precisions!r}]))")
    ran = subprocess.run([QEMU, "-cpu", ZEN2, sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=600)
    assert ran.returncode == 0, ran.stderr[-2000:]
    there = json.loads(ran.stdout.splitlines()[-1])
    for precision, ours, theirs in zip(precisions, here, there, strict=True):
        cosines = np.einsum("ij,ij->i", ours, np.array(theirs))
        assert cosines.min() > 0.99999, (precision, cosines)
