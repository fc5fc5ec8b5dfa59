"""`memory-pipelines doctor`: what a user runs when something is wrong. One line a check, `ok`,
`warn` or `fail`, each failing one with its fix: the settings, this CPU, the database (and a
self-test of every vector and text operation the project runs, on a throwaway server so that
a crash harms nothing), disk space, the embedder, the model servers, Dagster's home, and the
native libraries the install brought. Reads only: it never migrates or writes memory."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from memory_pipelines.config import MANAGED_MARK, Settings, dagster_home, unknown_settings, unreadable

OK, WARN, FAIL = "ok", "warn", "fail"

# The x86-64 microarchitecture levels by the /proc/cpuinfo flags each adds.
X86_LEVELS = (
    ("x86-64-v2", {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"}),
    ("x86-64-v3", {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}),
    ("x86-64-v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
)
# What runs on which CPU, measured under emulation (docs/operations.md, "CPUs"): the duckdb
# wheel and the embedded server's pgvector (compiled for an AVX-512 machine; its halfvec code,
# all the project calls, runs AVX, AVX2, FMA and F16C instructions) need x86-64-v3; the other
# native libraries run on x86-64-v2.
REQUIRED_LEVEL = "x86-64-v3"


@dataclass(frozen=True)
class NativePart:
    module: str
    distribution: str
    level: str  # the lowest x86-64 level it was measured to run on
    probe: str  # a little real work, run in a process of its own: a missing instruction kills only it


NATIVE_PARTS = (
    NativePart("numpy", "numpy", "x86-64-v2",
               "import numpy as n; n.linalg.norm(n.ones((64, 64), n.float32) @ n.ones((64, 64), n.float32))"),
    NativePart("duckdb", "duckdb", "x86-64-v3", "import duckdb; duckdb.sql('select sum(range) from range(999)').fetchall()"),
    NativePart("pyarrow", "pyarrow", "x86-64-v2", "import pyarrow as a, pyarrow.compute as c; c.sum(a.array(range(999)))"),
    NativePart("psycopg", "psycopg-binary", "x86-64-v2", "import psycopg; assert psycopg.pq.__impl__ == 'binary'"),
    NativePart("jsonschema_rs", "jsonschema-rs", "x86-64-v2",
               "import jsonschema_rs; assert jsonschema_rs.validator_for({'type': 'object'}).is_valid({})"),
)
PROBE_SECONDS = 60
DISK_FAIL_BYTES, DISK_WARN_BYTES = 200 * 2**20, 2 * 2**30
TEST_SENTENCE = "We moved the ledger-api to port 5000."


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok, warn or fail
    detail: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.status:<5} {self.name:<18} {self.detail}" + (f"\n      fix: {self.fix}" if self.fix else "")


def cpu_level(flags: Iterable[str]) -> str | None:
    """The highest x86-64 level whose flags (and every lower level's) `flags` has."""
    have, level = set(flags), None
    for name, needed in X86_LEVELS:
        if not needed <= have:
            break
        level = name
    return level


def _level_at_least(level: str | None, needed: str) -> bool:
    names = [name for name, _ in X86_LEVELS]
    return level is not None and names.index(level) >= names.index(needed)


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    """This CPU's flags (Linux); None where /proc/cpuinfo is not to be had."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        return None
    return set()


def check_settings(settings: Settings) -> Check:
    """`settings` loaded leniently: their bad values fail this check."""
    if lines := unreadable(settings):
        return Check("settings", FAIL, lines[0] + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""),
                     "`memory-pipelines config` lists every setting with what it accepts")
    if warnings := unknown_settings():
        return Check("settings", WARN, warnings[0], "unset it, or spell it as `memory-pipelines config` lists it")
    return Check("settings", OK, "every MEMORY_* setting is valid")


def check_cpu(flags: set[str] | None) -> Check:
    machine = platform.machine()
    if machine not in ("x86_64", "AMD64"):
        return Check("cpu", OK, f"{machine}: the wheels installed are built for it")
    if flags is None:
        return Check("cpu", WARN, "no /proc/cpuinfo to read the CPU's features from")
    level = cpu_level(flags)
    detail = f"{level or 'below x86-64-v2'}, AVX-512 {'yes' if 'avx512f' in flags else 'no'}"
    if not _level_at_least(level, REQUIRED_LEVEL):
        return Check("cpu", FAIL, f"{detail}: duckdb and the embedded server's pgvector need {REQUIRED_LEVEL} "
                                  "(AVX2, FMA, BMI2, F16C)",
                     "a machine with AVX2: Intel since 2013 (Haswell), AMD since 2015, most cloud VMs")
    return Check("cpu", OK, detail + ("" if "avx512f" in flags else " (nothing needs it: embeddings are halfvec)"))


def _server_facts(url: str) -> tuple[str, str | None, str | None, bool, int]:
    import psycopg

    from memory_pipelines.db import schema as schema_db

    with psycopg.connect(url, connect_timeout=5) as conn:
        version, vector, trgm, halfvec, ledger = schema_db.server_facts(conn)
        applied = len(schema_db.applied_migrations(conn)) if ledger else 0
    return version, vector, trgm, halfvec, applied


def check_database(settings: Settings) -> Check:
    import psycopg

    from memory_pipelines.db import embedded
    from memory_pipelines.db.connection import resolve_url
    from memory_pipelines.db.migrations import load_migrations

    where = "MEMORY_DATABASE_URL" if settings.database_url else f"embedded, {embedded.pgdata_dir(settings.home)}"
    try:
        url = resolve_url(settings.database_url, settings.home)
        version, vector, trgm, halfvec, applied = _server_facts(url)
    except (psycopg.Error, OSError, RuntimeError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        fix = ("check MEMORY_DATABASE_URL and that the server runs" if settings.database_url else
               f"`memory-pipelines db status`; the server's log is {embedded.log_path(settings.home)}")
        return Check("database", FAIL, f"{where}: cannot connect ({reason})", fix)
    total = len(load_migrations())
    detail = (f"PostgreSQL {version} ({where}), vector {vector or 'missing'}, pg_trgm {trgm or 'missing'}, "
              f"{applied} of {total} migrations applied")
    if vector is not None and not halfvec:
        return Check("database", FAIL, detail + ": this pgvector has no halfvec type",
                     "pgvector 0.7 or newer (`ALTER EXTENSION vector UPDATE`)")
    if applied < total:
        return Check("database", WARN, detail, "the next command applies them (`memory-pipelines db migrate`)")
    return Check("database", OK, detail)


def check_selftest(settings: Settings) -> Check:
    from memory_pipelines.db import embedded
    from memory_pipelines.db.selftest import run_selftest

    began = time.perf_counter()
    try:
        with embedded.throwaway(settings.home) as (url, log):
            probes = run_selftest(url, log)
    except Exception as exc:  # noqa: BLE001 - a server that does not start is this check's finding
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Check("database test", FAIL, f"a throwaway embedded server did not start: {reason}",
                     "run again with --verbose; the embedded server needs a writable temporary folder")
    where = f"{len(probes)} probes on a throwaway embedded server ({time.perf_counter() - began:.1f} s)"
    if settings.database_url:
        where += "; the server of MEMORY_DATABASE_URL is its own build and not tested"
    failed = [p for p in probes if not p.ok]
    if failed:
        return Check("database test", FAIL, "; ".join(f"{p.name}: {p.detail}" for p in failed),
                     "this CPU cannot run the embedded server's build: set MEMORY_DATABASE_URL to a PostgreSQL with "
                     "pgvector 0.7 or newer built for this machine")
    return Check("database test", OK, where + ": migrations, halfvec storage and distance, text search, trigrams")


def check_disk(settings: Settings) -> Check:
    folder = settings.home
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    detail = f"{free / 2**30:.1f} GB free under {settings.home}"
    if free < DISK_FAIL_BYTES:
        return Check("disk", FAIL, detail, "free space there, or set MEMORY_HOME to a roomier disk")
    if free < DISK_WARN_BYTES:
        return Check("disk", WARN, detail, "a run's writes and the server's WAL need room to grow")
    return Check("disk", OK, detail)


def check_embedder(settings: Settings) -> Check:
    from memory_pipelines.embed import build_embedder, embed_config

    try:
        config = embed_config(settings)
        began = time.perf_counter()
        embedder = build_embedder(config)
        try:
            vector = embedder.embed([TEST_SENTENCE])[0]
        finally:
            embedder.close()
    except Exception as exc:  # noqa: BLE001 - an embedder that does not load is this check's finding
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Check("embedder", FAIL, reason, "MEMORY_EMBED_BACKEND=hashing runs offline without a model")
    return Check("embedder", OK, f"{embedder.model_id}: {len(vector)} dimensions, a test sentence "
                                 f"in {time.perf_counter() - began:.1f} s")


def _models_listed(probe_url: str, answer: dict) -> list[str]:
    if probe_url.endswith("/api/tags"):
        return [m.get("name", "") for m in answer.get("models", [])]
    return [m.get("id", "") for m in answer.get("data", [])]


def check_model_servers(settings: Settings) -> list[Check]:
    from memory_pipelines.embed import embed_config
    from memory_pipelines.llm.config import chat_config, decision_config
    from memory_pipelines.llm.probe import PROBE_TIMEOUT_S, model_server

    configured = []
    embed = embed_config(settings)
    for prefix, config, offline in (("MEMORY_LLM", chat_config(settings), "rules"),
                                    ("MEMORY_DECISION", decision_config(settings), "rules"),
                                    ("MEMORY_EMBED", embed, "hashing")):
        server = model_server(config.backend, config.base_url, prefix, offline)
        if server is not None:
            configured.append((server, config.model))
    if not configured:
        return [Check("model servers", OK, "none configured: the offline back ends (rules, and the "
                                           f"{embed.backend} embedder)")]
    checks = []
    for server, model in configured:
        name = f"model {server.prefix.removeprefix('MEMORY_').lower()}"
        try:
            answer = httpx.get(server.probe_url, timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError as exc:
            checks.append(Check(name, FAIL, f"{server.base_url} does not answer ({type(exc).__name__})",
                                f"start it, or set {server.prefix}_BASE_URL or {server.prefix}_BACKEND={server.offline}"))
            continue
        try:
            listed = _models_listed(server.probe_url, answer.json())
        except ValueError:
            listed = []
        if model in listed or any(name.split(":")[0] == model for name in listed):
            checks.append(Check(name, OK, f"{server.base_url}: {model} listed"))
        else:
            checks.append(Check(name, WARN, f"{server.base_url} answers, but does not list {model} "
                                            f"(it lists {', '.join(listed[:5]) or 'none'})",
                                f"set {server.prefix}_MODEL to a model it serves"))
    return checks


def check_dagster_home(settings: Settings) -> Check:
    home = dagster_home(settings.home)
    config = home / "dagster.yaml"
    if not config.exists():
        return Check("dagster home", OK, f"{home}: not made yet (`memory-pipelines run` or `ui` makes it)")
    if not os.access(home, os.W_OK):
        return Check("dagster home", FAIL, f"{home} is not writable", "fix its permissions, or set DAGSTER_HOME")
    text = config.read_text(encoding="utf-8")
    if not text.startswith(MANAGED_MARK):
        return Check("dagster home", WARN, f"{config} is your own: telemetry and storage are as it says",
                     "remove it to have memory-pipelines write its own")
    return Check("dagster home", OK, f"{home}: managed, telemetry off, runs stored "
                                     f"{'on the pipeline database' if 'postgres_url' in text else 'in SQLite'}")


def check_native_parts() -> Check:
    found, failed = [], []
    for part in NATIVE_PARTS:
        try:
            version = importlib.metadata.version(part.distribution)
        except importlib.metadata.PackageNotFoundError:
            failed.append(f"{part.module} is not installed")
            continue
        try:
            done = subprocess.run([sys.executable, "-c", part.probe], capture_output=True, text=True,
                                  timeout=PROBE_SECONDS)
        except subprocess.TimeoutExpired:
            failed.append(f"{part.module} {version} did not answer in {PROBE_SECONDS} s")
            continue
        if done.returncode < 0:
            name = signal.Signals(-done.returncode).name
            failed.append(f"{part.module} {version} was killed by {name} (it needs {part.level})")
        elif done.returncode:
            last = (done.stderr.strip().splitlines() or ["failed"])[-1]
            failed.append(f"{part.module} {version}: {last}")
        else:
            found.append(f"{part.module} {version}")
    if failed:
        return Check("native parts", FAIL, "; ".join(failed),
                     f"the project needs {REQUIRED_LEVEL}; a part missing or failing otherwise: pip install -e . again")
    return Check("native parts", OK, ", ".join(found) + " run here")


def diagnose(settings: Settings, echo: Callable[[Check], None] | None = None) -> list[Check]:
    """Every check of `settings` (loaded leniently), in order, each given to `echo` as it
    ends (the self-test takes seconds)."""
    checks: list[Check] = []

    def add(*found: Check) -> None:
        for check in found:
            checks.append(check)
            if echo is not None:
                echo(check)

    add(check_settings(settings))
    if checks[0].status == FAIL:
        return checks
    flags = cpu_flags()
    add(check_cpu(flags))
    add(check_database(settings))
    add(check_selftest(settings))
    add(check_disk(settings))
    add(check_embedder(settings))
    add(*check_model_servers(settings))
    add(check_dagster_home(settings))
    add(check_native_parts())
    return checks


def as_json(checks: list[Check]) -> list[dict]:
    return [asdict(check) for check in checks]
