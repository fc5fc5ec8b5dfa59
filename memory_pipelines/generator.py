"""Deterministic synthetic transcripts for benchmarks: the same arguments give the same bytes.

Sessions are built from small episodes (greetings, stated preferences, decisions that
change later, tool calls that fail and are fixed, technical questions, thanks), so every
later stage has something to find in them.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

EDITORS = ("neovim", "VS Code", "Emacs", "Helix", "PyCharm")
LANGUAGES = ("Python", "Go", "Rust", "TypeScript", "Kotlin")
CITIES = ("Lisbon", "Osaka", "Berlin", "Nairobi", "Montreal", "Valparaíso")
SERVICES = ("ledger-api", "auth-service", "billing-worker", "search-gateway", "report-builder")
TOPICS = (
    ("How do I add an index on {table}.{column} without locking writes?",
     "Use `CREATE INDEX CONCURRENTLY idx_{table}_{column} ON {table} ({column});` — it takes longer "
     "but never blocks inserts. Run it outside a transaction block."),
    ("Why is my {service} p95 latency at {ms} ms after the deploy?",
     "The deploy raised the pool size to {pool}; with 2 cores the workers contend. Try `POOL_SIZE={half}` "
     "and compare the p95 again."),
    ("Can you explain what `{identifier}` does in our codebase?",
     "`{identifier}` caches the parsed config for {service}; it is rebuilt when `config.toml` changes."),
    ("Summarize ticket #{ticket} for me.",
     "Ticket #{ticket}: {service} returns 502 when the upstream takes longer than {ms} ms; the fix is "
     "a retry with backoff."),
)


@dataclass(frozen=True)
class GeneratorConfig:
    users: int = 10
    sessions: int = 100
    seed: int = 0
    start: date | None = None
    days: int = 14

    def __post_init__(self) -> None:
        if self.users < 1 or self.sessions < 1 or self.days < 1:
            raise ValueError("users, sessions and days must be at least 1")


@dataclass(frozen=True)
class GeneratorStats:
    users: int
    sessions: int
    messages: int
    days: int
    files: int


class _Session:
    def __init__(self, session_id: str, user_id: str, agent_id: str, started: datetime, rng: random.Random):
        self.session_id, self.user_id, self.agent_id = session_id, user_id, agent_id
        self.clock, self.rng = started, rng
        self.records: list[dict] = []
        self.calls = 0

    def add(self, role: str, content: str, **extra) -> None:
        self.clock += timedelta(seconds=self.rng.randint(3, 240))
        record = {
            "session_id": self.session_id, "user_id": self.user_id, "agent_id": self.agent_id,
            "seq": len(self.records) + 1, "role": role, "content": content,
            "ts": self.clock.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        record.update({k: v for k, v in extra.items() if v is not None})
        self.records.append(record)

    def tool(self, name: str, args: dict, output: str, error: bool = False) -> None:
        self.calls += 1
        call_id = f"call-{self.session_id}-{self.calls}"
        self.add("assistant", "", tool_name=name, tool_args=args, tool_call_id=call_id)
        self.add("tool", output, tool_name=name, tool_call_id=call_id, metadata={"is_error": True} if error else None)


def _episode(s: _Session, profile: dict, rng: random.Random) -> None:
    kind = rng.choice(("preference", "decision", "tool", "tool_fail", "topic", "topic", "location"))
    if kind == "preference":
        s.add("user", f"I prefer {profile['editor']} as my editor, and {profile['language']} for new services.")
        s.add("assistant", f"Noted: {profile['editor']} and {profile['language']}. I'll keep examples in {profile['language']}.")
    elif kind == "location":
        s.add("user", f"By the way, I live in {profile['city']} now, so schedule things in my local time.")
        s.add("assistant", f"Got it, {profile['city']} it is.")
    elif kind == "decision":
        service = profile["service"]
        profile["port"] = rng.choice((8080, 8081, 9090, 3000, 5000))
        s.add("user", f"Let's run {service} on port {profile['port']} from now on.")
        s.add("assistant", f"Agreed: {service} listens on port {profile['port']}. I updated `config.toml`.")
    elif kind in ("tool", "tool_fail"):
        if kind == "tool_fail":
            s.add("user", f"Run the tests for {profile['service']}.")
            s.tool("shell", {"command": "pytest -q"}, "Error: ModuleNotFoundError: No module named 'httpx'", error=True)
            s.add("assistant", "A dependency is missing; installing it and running again.")
            s.tool("shell", {"command": "pip install httpx && pytest -q"}, f"{rng.randint(20, 400)} passed in {rng.randint(1, 90)}.{rng.randint(0, 9)}s")
            s.add("assistant", "All tests pass now.")
        else:
            s.add("user", f"What does the config of {profile['service']} say?")
            s.tool("read_file", {"path": f"services/{profile['service']}/config.toml"},
                   f"port: {profile['port']}\nhost: 0.0.0.0\nlog_level: info")
            s.add("assistant", f"{profile['service']} is configured for port {profile['port']} on all interfaces.")
    else:
        question, answer = rng.choice(TOPICS)
        values = {
            "table": rng.choice(("orders", "users", "events", "invoices")),
            "column": rng.choice(("created_at", "user_id", "status")),
            "service": profile["service"], "ms": rng.randint(12, 900), "pool": rng.choice((16, 32, 64)),
            "half": rng.choice((4, 8)), "identifier": rng.choice(("load_settings", "ConfigCache", "MAX_RETRIES")),
            "ticket": rng.randint(1000, 9999),
        }
        s.add("user", question.format(**values))
        s.add("assistant", answer.format(**values))


def _build_session(session_id: str, user_id: str, profile: dict, started: datetime, rng: random.Random) -> list[dict]:
    s = _Session(session_id, user_id, rng.choice(("navi", "devbot")), started, rng)
    if rng.random() < 0.5:
        s.add("user", rng.choice(("hi", "hello!", "good morning")))
        s.add("assistant", "Hello! What are we working on today?")
    for _ in range(rng.randint(2, 8)):
        _episode(s, profile, rng)
    if rng.random() < 0.6:
        s.add("user", rng.choice(("thanks!", "thank you, that's all", "great, thanks")))
        s.add("assistant", "You're welcome!")
    return s.records


def write_transcripts(out: Path, config: GeneratorConfig) -> GeneratorStats:
    rng = random.Random(config.seed)
    first_day = config.start or date(2026, 10, 1)
    users = [f"user-{n:05d}" for n in range(1, config.users + 1)]
    profiles = {
        u: {"editor": rng.choice(EDITORS), "language": rng.choice(LANGUAGES), "city": rng.choice(CITIES),
            "service": rng.choice(SERVICES), "port": 8080}
        for u in users
    }
    by_user: dict[str, list[dict]] = defaultdict(list)
    days_used: set[date] = set()
    for n in range(1, config.sessions + 1):
        user = users[(n - 1) % len(users)] if n <= len(users) else rng.choice(users)
        day = first_day + timedelta(days=rng.randrange(config.days))
        started = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(seconds=rng.randrange(0, 20 * 3600))
        records = _build_session(f"gen-{config.seed}-{n:07d}", user, profiles[user], started, rng)
        days_used.update(datetime.fromisoformat(r["ts"]).date() for r in records)
        by_user[user].extend(records)
    out.mkdir(parents=True, exist_ok=True)
    messages = 0
    for user in sorted(by_user):
        lines = [json.dumps(r, ensure_ascii=False, sort_keys=True) for r in by_user[user]]
        (out / f"{user}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        messages += len(lines)
    return GeneratorStats(len(by_user), config.sessions, messages, len(days_used), len(by_user))


@dataclass(frozen=True)
class DayFilesConfig:
    """A large transcript source for the ingestion benchmark: one JSON Lines file per day."""
    messages: int = 5_000_000
    days: int = 365
    seed: int = 0
    start: date = date(2025, 1, 1)

    def __post_init__(self) -> None:
        if self.days < 1 or self.messages < self.days:
            raise ValueError("--days must be at least 1 and --messages at least one a day")


def write_day_files(out: Path, config: DayFilesConfig) -> GeneratorStats:
    """`out/YYYY/MM-DD.jsonl`, about 400 bytes a message; the same config gives the same bytes.
    Written a day at a time, so memory stays that of one day."""
    rng = random.Random(config.seed)
    users = [f"user-{n:05d}" for n in range(1, max(10, config.messages // 5000) + 1)]
    filler = ("The change keeps the old path working while the new one is rolled out, so nothing "
              "breaks for clients that still send the previous payload. Once every client has moved, "
              "the old path goes, with a note in the changelog and a test that it stays gone.")
    per_day, sessions, files = config.messages // config.days, 0, 0
    for d in range(config.days):
        day = config.start + timedelta(days=d)
        lines: list[str] = []
        while len(lines) < per_day:
            sessions += 1
            user = rng.choice(users)
            started = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(seconds=rng.randrange(20 * 3600))
            for seq in range(1, min(rng.randrange(6, 21), per_day - len(lines)) + 1):
                question, answer = rng.choice(TOPICS)
                text = (question if seq % 2 else answer).format(
                    table="orders", column="created_at", service=rng.choice(SERVICES), ms=rng.randrange(90, 900),
                    pool=16, half=8, identifier="load_settings", ticket=rng.randrange(1000, 9999))
                lines.append(json.dumps({
                    "session_id": f"day-{config.seed}-{sessions:08d}", "user_id": user, "seq": seq,
                    "role": "user" if seq % 2 else "assistant", "content": text + " " + filler[:rng.randrange(100, 260)],
                    "ts": (started + timedelta(seconds=30 * seq)).isoformat().replace("+00:00", "Z"),
                    "agent_id": "bench-agent"}, ensure_ascii=False))
        path = out / f"{day.year}" / f"{day:%m-%d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        files += 1
    return GeneratorStats(len(users), sessions, per_day * config.days, config.days, files)
