"""A Claude Code project folder, generated: a long coding session as Claude Code logs it
(`<sessionId>.jsonl`) and the logs of the subagents its `Task` calls launched
(`<sessionId>/subagents/agent-<agentId>.jsonl`), grown to a wanted size with large tool
results, and a manifest of what the `agent-events` format must make of it.

The session has what a real one has (all of it written here, none of it taken from anyone's
logs): one event per content block of an assistant message (`thinking`, `text`, `tool_use`,
the same `message.id`), parallel tool calls answered by one `user` event per `tool_result`,
tool results of tens to hundreds of kilobytes (each event stays under `MAX_EVENT_BYTES`),
a compaction (`compact_boundary` with `logicalParentUuid`, then an `isCompactSummary` turn),
three rewinds (the first off the main line, the next two off the fork the conversation went
on in: forks of the main line carrying the turns they share), interruption notices (one
after text, one after a refused tool call), and side events that are no turns: `summary`,
`file-history-snapshot`, `system`, `attachment` (the chained ones link the next turn).

Every stored turn that carries words of its own holds a phrase of three real words no other
turn holds (no two phrases share a pair of words: any other turn holds at most one of a
phrase's words): a user prompt, an assistant message's text (or, for a message of tool calls
alone, the first call's Bash `description`), a tool result's first line (and a few lines
after it: BM25 ranks a long output's single mention below short turns holding one of its
words). The turns that carry only harness text (interruption notices, a refused call's
result) have no phrase. A phrase is also said where the turn it belongs to is quoted: a
subagent's brief in the parent's `Task` call, a subagent's answer in the parent's `Task`
result, a fork's copies.

`write_project(root)` is deterministic: the same arguments write the same bytes.
"""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

MAX_EVENT_BYTES = 900_000  # a record over 1 MB is refused as too_large; an event stays well under
DAY = "2026-11-03"
START = datetime(2026, 11, 3, 7, 30, tzinfo=UTC)
USER = "ines"
CWD = "/home/ines/src/ledger-export"
PROJECT_DIR = "-home-ines-src-ledger-export"  # how Claude Code names the project's folder
VERSION = "2.0.14"
MODEL = "claude-sonnet-4-5-20250929"
EXCHANGES = 200  # user prompts of the main session (all its lines)
INTERRUPTED = "[Request interrupted by user]"
INTERRUPTED_TOOL = "[Request interrupted by user for tool use]"
REJECTED = ("The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file "
            "edit, the new_string was NOT written to the file). STOP what you are doing and wait for the user to "
            "tell you how to proceed.")
# a large result's share of the size wanted is between these (times the mean share)
LARGE_SHARE = (0.2, 1.0)
LARGE_MEAN_BYTES = 230_000

# Phrase words: real words, none a stop word, none used by the filler text (the filler is
# about code; these are birds, trees, stones, colours, animals, food, music, land, sky, things).
PHRASE_WORDS = tuple("""
heron falcon sparrow osprey pelican puffin magpie starling wren finch kestrel plover curlew egret ibis
lapwing nightingale oriole warbler kingfisher cormorant albatross toucan flamingo
birch cedar maple willow alder aspen beech cypress hazel juniper larch linden poplar rowan spruce sycamore
hawthorn hemlock chestnut magnolia
amber garnet jasper onyx opal topaz agate beryl coral jade quartz ruby sapphire emerald obsidian basalt
granite marble flint pumice
crimson scarlet saffron indigo violet umber ochre teal mauve lilac russet sepia vermilion cerulean maroon ivory
otter badger beaver lynx marten weasel ferret hedgehog walrus narwhal dolphin orca bison moose caribou
antelope gazelle ibex yak llama alpaca camel zebra giraffe panther jaguar cougar ocelot tapir lemur gibbon
koala wombat platypus armadillo mongoose meerkat porcupine chipmunk raccoon
beetle cricket firefly hornet mantis moth dragonfly ladybird cicada termite
apricot almond basil cardamom cinnamon clove fennel ginger nutmeg paprika quince radish rhubarb sorrel
tamarind turnip walnut fig plum pear peach lemon mango papaya melon olive pistachio barley millet oat rye
lentil chickpea pumpkin cabbage parsnip cucumber artichoke avocado blueberry
banjo bassoon cello clarinet cornet fiddle harp lute mandolin oboe piano tuba ukulele viola zither
accordion bagpipe harmonica xylophone trombone
canyon fjord glacier lagoon meadow mesa moor prairie ravine tundra valley dune estuary grotto marsh oasis
plateau savanna volcano archipelago
aurora blizzard breeze comet drizzle eclipse meteor monsoon nebula rainbow thunder typhoon zephyr dusk
anvil bellows candle chisel compass kettle ladder lantern loom mallet quill saddle spindle teapot thimble
trowel easel hammock parasol umbrella wheelbarrow telescope hourglass kaleidoscope
velvet linen tweed satin denim flannel muslin calico cashmere silk corduroy gingham
canoe galleon schooner sloop kayak barge dinghy yacht raft gondola
lighthouse windmill cathedral pagoda igloo chalet cottage castle fortress citadel
griffin phoenix dragon unicorn mermaid centaur goblin troll wizard sphinx
archery fencing rowing curling polo lacrosse rugby surfing
""".split())

# Filler: what the session is about (an invoice export service), never a phrase word.
MODULES = ("exporter", "scheduler", "billing", "invoices", "payments", "accounts", "reports", "webhooks",
           "migrations", "settings", "storage", "metrics", "retries", "batching", "parser", "renderer", "uploader",
           "notifier", "auth", "ledger")
NOUNS = ("request", "response", "handler", "queue", "worker", "timeout", "connection", "pool", "transaction",
         "cursor", "index", "schema", "column", "table", "query", "payload", "header", "token", "buffer", "stream",
         "record", "row", "field", "config", "fixture", "endpoint", "client", "server", "job", "lock", "thread",
         "process", "deadline", "checksum", "bucket", "prefix", "partition", "shard", "replica", "offset",
         "currency", "amount", "rate", "total", "invoice", "customer", "account", "period", "batch", "retry")
VERBS = ("fails", "hangs", "times out", "retries twice", "leaks memory", "drops rows", "skips a page", "blocks",
         "stalls", "crashes", "returns early", "rounds wrong")
ADJECTIVES = ("stale", "slow", "flaky", "missing", "broken", "partial", "nested", "empty", "duplicated", "unsorted",
              "oversized", "negative", "expired", "cached", "pending")
FUNCTIONS = ("load", "parse", "build", "send", "fetch", "store", "merge", "split", "check", "apply", "render", "flush",
             "lookup", "convert", "validate")

PROMPTS = (
    "the {module} {noun} {verb} when the {noun2} is {adj}; find out why before changing anything.",
    "add a test for a {adj} {noun} in {module}, then make it pass.",
    "run the {module} tests and fix whatever {verb}.",
    "rename {fn}_{noun} to {fn2}_{noun} everywhere and keep the old name as an alias for one release.",
    "why does {module} read the {noun} twice for every {noun2}? It should be once per {noun3}.",
    "make {module} survive a {adj} {noun}: one bad {noun2} must not stop the whole {noun3}.",
    "look at last night's {module} logs and tell me what {verb}.",
    "split the {module} {noun} into batches of {n} and keep the {noun2} order.",
    "the {noun} check in {module} is too strict, a {adj} {noun2} is fine there. Relax it and explain why.",
    "can we drop the {adj} {noun} cache in {module}? Measure it first.",
)
SENTENCES = (
    "I'll start with the {module} {noun}, since that is where the {noun2} is built.",
    "The {noun} {verb} because {module} reads the {noun2} before the {noun3} is written.",
    "I moved the read after the write, so a {adj} {noun} can no longer reach the {noun2}.",
    "Tests pass now: {n} passed, {m} skipped, and the {adj} {noun} case has its own test in {module}.",
    "Two things to check at once: the {noun} in {module} and the {noun2} handler.",
    "Found it: {fn}_{noun}() runs once per {noun2}, so every {adj} {noun3} costs a round trip.",
    "The {module} {noun} keeps a {adj} {noun2} for {n} seconds, which explains the gap in the report.",
    "Nothing else calls {fn}_{noun}, so renaming it is safe; the alias keeps old imports working.",
    "The {noun2} order is kept: batches are cut after sorting by {noun3}, not before.",
    "I would rather not touch the {noun} schema today; the fix fits in {module} alone.",
    "Measured on the staging dump: {n} ms before, {m} ms after, with the same {noun} count.",
    "The failing test expected a {adj} {noun}; the new behaviour returns an empty {noun2} instead.",
)
BRIEFS = (
    "find every caller of {fn}_{noun} in {module} and say which ones pass a {adj} {noun2}",
    "read the {module} tests and list the {noun} cases they do not cover",
    "profile {fn}_{noun} on the staging dump and report the three slowest steps",
    "check whether the {noun2} migration in {module} can run while the {noun} worker is live",
    "compare the {module} {noun} handling with the {noun2} handling and list the differences",
)
COMPACT = ("This session is being continued from a previous conversation that ran out of context. The conversation "
           "is summarized below:\nAnalysis: the user asked to fix the {module} {noun} and the {noun2} retries; "
           "{phrase} names this summary.\nPending: the {adj} {noun3} case and a test for it.")


@dataclass(frozen=True)
class ExpectedTurn:
    """A turn the decoder must store: its session (as the decoder names it), its seq there,
    its role, and the phrase only it (and its quotes) holds; None for harness text."""
    session_id: str
    seq: int
    role: str
    phrase: str | None
    copied: bool = False  # a fork's copy of a turn of the fork it left


@dataclass
class ProjectManifest:
    root: Path
    session_id: str
    agent_ids: list[str]
    forks: dict[str, tuple[str, int]]  # fork session -> (parent session, fork_seq)
    turns: list[ExpectedTurn]
    skipped: dict[str, int]  # side events by type
    files: list[Path]
    total_bytes: int

    @property
    def subagent_sessions(self) -> list[str]:
        return [f"{self.session_id}:agent-{a}" for a in self.agent_ids]

    def turns_per_session(self) -> dict[str, int]:
        return dict(Counter(t.session_id for t in self.turns))


@dataclass
class _Line:
    """A line of turns as the decoder places them: the main session or a fork."""
    session_id: str
    parent: str | None
    fork_seq: int
    turns: list[tuple[str, str | None, bool]] = field(default_factory=list)  # role, phrase, copied
    seq_at: dict[str, int] = field(default_factory=dict)  # event uuid -> seq of the last turn up to it


@dataclass
class _Slot:
    """A tool result to grow: `grow(nbytes)` adds about that many bytes to its event."""
    event: dict
    kind: str
    head: str
    path: str = ""


class _Phrases:
    """Three-word phrases, no two sharing a pair of words."""

    def __init__(self, rng: random.Random):
        self.rng, self.pairs = rng, set()

    def __call__(self) -> str:
        for _ in range(100_000):
            words = self.rng.sample(PHRASE_WORDS, 3)
            pairs = {frozenset(p) for p in ((words[0], words[1]), (words[0], words[2]), (words[1], words[2]))}
            if not pairs & self.pairs:
                self.pairs |= pairs
                return " ".join(words)
        raise RuntimeError(f"no phrase left after {len(self.pairs) // 3} of them: fewer subagents or exchanges")


class _Gen:
    """What every log of the project shares: the random source, ids, phrases and filler."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.phrase = _Phrases(self.rng)
        self.session_id = self.uuid()
        self.slots: list[_Slot] = []
        self.code = [self.code_line() for _ in range(3000)]
        self.logs = [self.log_line(i) for i in range(3000)]
        self.escaped = {line: len(json.dumps(line, ensure_ascii=False)) for line in (*self.code, *self.logs)}

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def token(self, prefix: str, n: int = 24) -> str:
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
        return prefix + "".join(self.rng.choice(alphabet) for _ in range(n))

    def fill(self, template: str, **given) -> str:
        r = self.rng
        nouns = r.sample(NOUNS, 3)
        fns = r.sample(FUNCTIONS, 2)
        adjs = r.sample(ADJECTIVES, 2)
        values = {"module": r.choice(MODULES), "noun": nouns[0], "noun2": nouns[1], "noun3": nouns[2],
                  "adj": adjs[0], "adj2": adjs[1], "verb": r.choice(VERBS), "fn": fns[0], "fn2": fns[1],
                  "n": r.randint(2, 900), "m": r.randint(1, 60)}
        return template.format(**(values | given))

    def prose(self, phrase: str, sentences: int) -> str:
        said = [self.fill(self.rng.choice(SENTENCES)) for _ in range(sentences)]
        at = self.rng.randrange(len(said) + 1)
        where = self.rng.choice((f"Note {phrase}.", f"({phrase})", f"Marker: {phrase}."))
        return " ".join([*said[:at], where, *said[at:]])

    def code_line(self) -> str:
        r = self.rng
        noun, noun2 = r.sample(NOUNS, 2)
        return r.choice((
            f"def {r.choice(FUNCTIONS)}_{noun}({noun2}, {r.choice(NOUNS)}=None):",
            f"    return {noun}.{r.choice(FUNCTIONS)}({noun2})",
            f"    if {noun} is None or {noun2}.{r.choice(ADJECTIVES)}:",
            f"        raise {noun.title()}Error(\"{r.choice(ADJECTIVES)} {noun2}\")",
            f"    # a {r.choice(ADJECTIVES)} {noun} keeps the {noun2} for {r.randint(2, 90)} seconds",
            f"class {noun.title()}{noun2.title()}:",
            f"    {noun} = {noun2}[{r.randint(0, 64)}]",
            f"    for {noun} in {r.choice(FUNCTIONS)}_{noun2}s({r.choice(NOUNS)}):",
            f"        {noun2}.{r.choice(FUNCTIONS)}({noun}, limit={r.randint(10, 5000)})",
            "",
        ))

    def log_line(self, i: int) -> str:
        r = self.rng
        return (f"2026-11-03T{r.randint(0, 6):02}:{r.randint(0, 59):02}:{r.randint(0, 59):02}.{r.randint(0, 999):03}Z "
                f"{r.choice(('INFO', 'INFO', 'INFO', 'WARN', 'DEBUG'))} {r.choice(MODULES)}.{r.choice(NOUNS)} "
                f"{r.choice(FUNCTIONS)} {r.choice(NOUNS)}={r.randint(0, 99999)} elapsed_ms={r.randint(1, 4000)} seq={i}")

    def body(self, pool: list[str], nbytes: int) -> list[str]:
        """Lines from `pool` whose JSON-escaped text (with newlines) is about `nbytes`."""
        out, size = [], 0
        while size < nbytes:
            line = self.rng.choice(pool)
            out.append(line)
            size += self.escaped[line]  # quotes around it ~ the escaped newline after it
        return out


class _Chain:
    """One log file: its events, the chain's tip, its clock and the lines of turns it gives."""

    def __init__(self, gen: _Gen, path: Path, clock: datetime, agent_id: str | None = None):
        self.gen, self.path, self.clock, self.agent_id = gen, path, clock, agent_id
        self.events: list[dict] = []
        self.tip: str | None = None
        self.git_branch = "main"
        session = gen.session_id if agent_id is None else f"{gen.session_id}:agent-{agent_id}"
        self.lines = {session: _Line(session, None, 0)}
        self.line = self.lines[session]
        self.started = clock
        self.final: tuple[str, str, int] = ("", "", 0)  # a subagent's answer, its phrase, its tool calls

    # -- events

    def tick(self, low: float = 1.5, high: float = 9.0) -> str:
        self.clock += timedelta(milliseconds=self.gen.rng.randint(int(low * 1000), int(high * 1000)))
        return self.clock.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def event(self, kind: str, fields: dict, parent: str | None | bool = True) -> dict:
        """An event in the chain, after the tip (or after `parent`); it becomes the tip."""
        event = {"parentUuid": self.tip if parent is True else parent, "isSidechain": self.agent_id is not None,
                 "userType": "external", "cwd": CWD, "sessionId": self.gen.session_id, "version": VERSION,
                 "gitBranch": self.git_branch}
        if self.agent_id is not None:
            event["agentId"] = self.agent_id
        event["type"] = kind
        tail = {k: fields.pop(k) for k in ("toolUseResult",) if k in fields}
        event |= fields
        event["uuid"] = self.gen.uuid()
        event["timestamp"] = self.tick()
        event |= tail
        self.events.append(event)
        self.tip = event["uuid"]
        return event

    def side(self, event: dict) -> dict:
        """An event out of the chain (a summary, a snapshot)."""
        self.events.append(event)
        return event

    def link(self, kind: str, fields: dict, parent: str | None | bool = True) -> dict:
        """A side event in the chain (a system notice, an attachment): the next turn may follow it."""
        event = self.event(kind, fields, parent)
        self.line.seq_at[event["uuid"]] = self.line.fork_seq + len(self.line.turns)
        return event

    # -- turns

    def turn(self, role: str, phrase: str | None, uuids: list[str]) -> None:
        self.line.turns.append((role, phrase, False))
        seq = self.line.fork_seq + len(self.line.turns)
        for u in uuids:
            self.line.seq_at[u] = seq

    def prompt(self, text: str, phrase: str | None, parent: str | None | bool = True, *, rewind: bool = False,
               extra: dict | None = None, plain: bool = False) -> dict:
        content = text if plain or extra or self.gen.rng.random() < 0.6 else [{"type": "text", "text": text}]
        event = self.event("user", {"message": {"role": "user", "content": content}, **(extra or {})}, parent)
        if rewind:
            self.fork(event["uuid"], event["parentUuid"])
        self.turn("user", phrase, [event["uuid"]])
        return event

    def notice(self, text: str) -> dict:
        event = self.event("user", {"message": {"role": "user", "content": [{"type": "text", "text": text}]}})
        self.turn("user", None, [event["uuid"]])
        return event

    def assistant(self, blocks: list[dict], phrase: str, stop: str | None = None) -> list[dict]:
        """One message, one event per content block."""
        message_id, request_id = self.gen.token("msg_01"), self.gen.token("req_011C", 20)
        usage = {"input_tokens": self.gen.rng.randint(2, 9), "cache_creation_input_tokens": self.gen.rng.randint(0, 4000),
                 "cache_read_input_tokens": self.gen.rng.randint(10_000, 150_000),
                 "output_tokens": self.gen.rng.randint(20, 2000), "service_tier": "standard"}
        events = []
        for i, block in enumerate(blocks):
            message = {"model": MODEL, "id": message_id, "type": "message", "role": "assistant", "content": [block],
                       "stop_reason": stop if i == len(blocks) - 1 else None, "stop_sequence": None, "usage": usage}
            events.append(self.event("assistant", {"message": message, "requestId": request_id}))
        self.turn("assistant", phrase, [e["uuid"] for e in events])
        return events

    def result(self, use: dict, content, tool_use_result, phrase: str | None, *, error: bool = False) -> dict:
        block = {"tool_use_id": use["id"], "type": "tool_result", "content": content}
        if error:
            block["is_error"] = True
        event = self.event("user", {"message": {"role": "user", "content": [block]},
                                    "toolUseResult": tool_use_result})
        self.turn("tool", phrase, [event["uuid"]])
        return event

    def fork(self, prompt_uuid: str, parent: str) -> None:
        """A rewound prompt after `parent` (an event of the current line, already followed by a
        prompt): the conversation goes on in a fork of the main line; off a fork, the new fork
        carries the turns of the one it left up to `parent` (the documented semantics)."""
        current = self.line
        fork_id = f"{self.gen.session_id}~{prompt_uuid}"
        if current.parent is None:
            fork = _Line(fork_id, current.session_id, current.seq_at[parent])
        else:
            fork = _Line(fork_id, current.parent, current.fork_seq)
            cut = current.seq_at[parent] - current.fork_seq
            fork.turns = [(role, phrase, True) for role, phrase, _ in current.turns[:cut]]
        self.lines[fork_id] = self.line = fork

    # -- blocks

    def thinking(self) -> dict:
        text = " ".join(self.gen.fill(self.gen.rng.choice(SENTENCES)) for _ in range(self.gen.rng.randint(1, 3)))
        return {"type": "thinking", "thinking": text, "signature": self.gen.token("Eo", 64)}

    def tool_use(self, name: str, tool_input: dict) -> dict:
        return {"type": "tool_use", "id": self.gen.token("toolu_01"), "name": name, "input": tool_input}

    # -- tools

    def call(self, name: str, phrase: str | None = None) -> dict:
        """A tool call (a Bash call with `phrase` says it in its description)."""
        g = self.gen
        noun, module = g.rng.choice(NOUNS), g.rng.choice(MODULES)
        path = f"{CWD}/src/{module}/{noun}.py"
        if name == "Bash":
            command = g.rng.choice((f"pytest -q tests/{module}", f"git diff --stat -- src/{module}",
                                    f"python -m {module}.cli check --{noun}", f"tail -n 400 logs/{module}.log",
                                    "git log --oneline -n 20"))
            description = f"Check {phrase}" if phrase else g.fill("Check the {module} {noun}")
            return self.tool_use("Bash", {"command": command, "description": description})
        if name == "Read":
            return self.tool_use("Read", {"file_path": path})
        if name == "Grep":
            return self.tool_use("Grep", {"pattern": f"{g.rng.choice(FUNCTIONS)}_{noun}", "path": f"{CWD}/src",
                                          "output_mode": "content", "-n": True})
        old = g.code_line().strip() or f"{noun} = None"
        return self.tool_use("Edit", {"file_path": path, "old_string": old,
                                      "new_string": f"{old}  # {g.rng.choice(ADJECTIVES)} {noun}"})

    def answer(self, use: dict, phrase: str, lines: int, large: bool) -> dict:
        """The result of a Read, Bash, Grep or Edit call: its first line says `phrase`; a
        large one grows later (`_Slot`)."""
        g = self.gen
        name, tool_input = use["name"], use["input"]
        # a result says its phrase in its first line and again in the next few (a function named
        # after it, a log's job label, more matches): within the 2,000 characters the turn index
        # reads of a tool result, a long output still ranks first for its own words
        snake, hyphens = phrase.replace(" ", "_"), phrase.replace(" ", "-")
        if name == "Read":
            head = f'"""{phrase.capitalize()}: {g.fill("{module} {noun} helpers")}."""'
            noun = g.rng.choice(NOUNS)
            raw = [head, "", f"def check_{snake}({noun}, strict=False):",
                   f'    """Whether a {g.rng.choice(ADJECTIVES)} {noun} passes the {phrase} check."""',
                   f"    return {noun} is not None and not strict", "", *g.body(g.code, lines * 40)]
            content = "\n".join(f"{n:>6}\u2192{line}" for n, line in enumerate(raw, start=1))
            result = {"type": "text", "file": {"filePath": tool_input["file_path"], "content": "\n".join(raw),
                                               "numLines": len(raw), "startLine": 1, "totalLines": len(raw)}}
        elif name == "Bash":
            head = f"{phrase} ({g.fill('{n} {noun} records checked')})"
            labelled = [f"{line} job={hyphens}" for line in g.body(g.logs, 300)[:3]]
            content = "\n".join([head, *labelled, *g.body(g.logs, lines * 60)])
            result = {"stdout": content, "stderr": "", "interrupted": False, "isImage": False}
        elif name == "Grep":
            head = f"src/{g.rng.choice(MODULES)}/{g.rng.choice(NOUNS)}.py:{g.rng.randint(1, 400)}:    # {phrase}"
            found = [f"src/{g.rng.choice(MODULES)}/{g.rng.choice(NOUNS)}.py:{g.rng.randint(1, 900)}:{line}"
                     for line in [f"    # {phrase}, again", f"    check_{snake}(row)", *g.body(g.code, lines * 50)]]
            content = "\n".join([head, *found])
            result = {"mode": "content", "numFiles": len(found) + 1, "filenames": [], "content": content,
                      "numLines": len(found) + 1}
        else:
            head = f"    # {phrase}"
            snippet = [head, *g.body(g.code, 300), tool_input["new_string"]]
            content = (f"The file {tool_input['file_path']} has been updated. Here's the result of running `cat -n` on a "
                       "snippet of the edited file:\n" + "\n".join(f"{n:>6}\u2192{line}"
                                                                    for n, line in enumerate(snippet, start=40)))
            original = "\n".join(g.body(g.code, lines * 60))
            result = {"filePath": tool_input["file_path"], "oldString": tool_input["old_string"],
                      "newString": tool_input["new_string"], "originalFile": original,
                      "structuredPatch": [{"oldStart": 41, "oldLines": 1, "newStart": 41, "newLines": 1,
                                           "lines": [f"-{tool_input['old_string']}", f"+{tool_input['new_string']}"]}],
                      "userModified": False, "replaceAll": False}
        event = self.result(use, content, result, phrase)
        if large:
            g.slots.append(_Slot(event, name, head))
        return event


def _grow(gen: _Gen, slot: _Slot, nbytes: int) -> None:
    """Adds about `nbytes` to a large result's event: its output is written twice (in the
    message and in toolUseResult), an Edit's original file once."""
    event, r = slot.event, gen.rng
    block, result = event["message"]["content"][0], event["toolUseResult"]
    if slot.kind == "Edit":
        result["originalFile"] += "\n" + "\n".join(gen.body(gen.code, nbytes))
        return
    added, size = [], 0
    while size < nbytes:
        line = r.choice(gen.logs if slot.kind == "Bash" else gen.code)
        if slot.kind == "Grep":
            line = f"src/{r.choice(MODULES)}/{r.choice(NOUNS)}.py:{r.randint(1, 900)}:{line}"
            size += 2 * len(json.dumps(line, ensure_ascii=False))
        else:  # a Read's listing numbers its lines: `{n:>6}→` (9 bytes) more in the message
            size += 2 * gen.escaped[line] + (9 if slot.kind == "Read" else 0)
        added.append(line)
    if slot.kind == "Read":
        raw = result["file"]["content"].split("\n") + added
        result["file"] |= {"content": "\n".join(raw), "numLines": len(raw), "totalLines": len(raw)}
        block["content"] = "\n".join(f"{n:>6}\u2192{line}" for n, line in enumerate(raw, start=1))
    elif slot.kind == "Bash":
        block["content"] = result["stdout"] = block["content"] + "\n" + "\n".join(added)
    else:
        block["content"] = result["content"] = block["content"] + "\n" + "\n".join(added)
        result["numLines"] = result["numFiles"] = block["content"].count("\n") + 1
    assert slot.head in block["content"].split("\n", 1)[0]


def _dumps(event: dict) -> str:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


class _Session:
    """The main session: exchanges (a prompt, the agent's steps, its answer), with the
    subagents its Task calls launch."""

    def __init__(self, gen: _Gen, root: Path, subagents: int):
        self.gen, self.root = gen, root
        self.chain = _Chain(gen, root / f"{gen.session_id}.jsonl", START)
        self.subagents: list[_Chain] = []
        self.own_prompts: list[tuple[str, str]] = []  # (prompt uuid, its parent) on the line's own part
        self.last_prompt = ""
        r = gen.rng
        groups = []
        while sum(groups) < subagents:
            groups.append(min(subagents - sum(groups), r.choice((1, 1, 2, 2, 3))))
        self.tasks: dict[int, list[int]] = {}
        for size in groups:
            self.tasks.setdefault(r.randrange(2, EXCHANGES), []).append(size)
        self.rewinds = {int(EXCHANGES * share) for share in (0.8, 0.87, 0.94)}
        self.compaction = int(EXCHANGES * 0.35)
        self.branch_switch = int(EXCHANGES * 0.2)
        special = self.rewinds | {self.compaction, self.compaction - 1} | {x - 1 for x in self.rewinds}
        free = [x for x in range(5, EXCHANGES - 1) if x not in special and x not in self.tasks]
        picked = r.sample(free, 6)
        self.interrupted = {x: "text" for x in picked[:4]} | {x: "tool" for x in picked[4:]}

    def write(self) -> None:
        c, g = self.chain, self.gen
        c.link("attachment", {"attachment": {"type": "hook_success", "hookName": "SessionStart:startup",
                                             "hookEvent": "SessionStart", "toolUseID": g.uuid(),
                                             "content": "", "stdout": "", "stderr": "", "exitCode": 0}},
               parent=None)
        for number in range(EXCHANGES):
            if number == self.branch_switch:
                c.git_branch = "fix/export-retries"
            if number == self.compaction:
                self.compact()
            self.exchange(number)
        chained = [e for e in c.events if "uuid" in e]
        summaries = [{"type": "summary", "summary": g.fill("Fix the {module} {noun} retries and the {adj} {noun2}"),
                      "leafUuid": chained[len(chained) // k]["uuid"]} for k in (3, 2)]
        c.events[:0] = summaries

    def compact(self) -> None:
        c, g = self.chain, self.gen
        c.link("system", {"logicalParentUuid": c.tip, "subtype": "compact_boundary",
                          "content": "Conversation compacted", "isMeta": False, "level": "info",
                          "compactMetadata": {"trigger": "manual", "preTokens": 151_873}}, parent=None)
        phrase = g.phrase()
        c.prompt(g.fill(COMPACT, phrase=phrase), phrase,
                 extra={"isVisibleInTranscriptOnly": True, "isCompactSummary": True})
        c.link("system", {"subtype": "local_command", "content": "<command-name>/compact</command-name>\n"
                          "<command-message>compact</command-message>\n<command-args></command-args>",
                          "level": "info"})

    def exchange(self, number: int) -> None:
        c, g = self.chain, self.gen
        r = g.rng
        parent: str | bool = True
        rewind = number in self.rewinds
        if rewind:
            # back to one of the last prompts of this line (not the first prompt of a fork)
            _, parent = r.choice(self.own_prompts[-3:])
        phrase = g.phrase()
        asked = g.fill(r.choice(PROMPTS))
        text = r.choice((f"{phrase.capitalize()}: {asked}", f"For {phrase}: {asked}",
                         f"{asked[0].upper()}{asked[1:]} (ticket {phrase})"))
        prompt = c.prompt(text, phrase, parent, rewind=rewind)
        self.last_prompt = prompt["uuid"]
        if rewind:
            self.own_prompts = []
        else:
            self.own_prompts.append((prompt["uuid"], prompt["parentUuid"]))
        self.snapshot(prompt["uuid"], update=False)
        steps = [("task", n) for n in self.tasks.get(number, [])] + [("tools", 0)] * r.choice((0, 1, 1, 2, 2, 3, 4))
        r.shuffle(steps)
        interrupted = self.interrupted.get(number)
        for kind, n in steps:
            if kind == "task":
                self.task_step(n)
            else:
                self.tool_step()
        if interrupted == "text":
            c.assistant([c.thinking(), {"type": "text", "text": g.prose(p := g.phrase(), 2)}], p)
            c.notice(INTERRUPTED)
            return
        if interrupted == "tool":
            use = c.call("Edit")
            c.assistant([{"type": "text", "text": g.prose(p := g.phrase(), 1)}, use], p, stop="tool_use")
            c.result(use, REJECTED, "User rejected tool use", None, error=True)
            c.notice(INTERRUPTED_TOOL)
            return
        blocks = ([c.thinking()] if r.random() < 0.3 else []) + [{"type": "text", "text": g.prose(p := g.phrase(), 3)}]
        c.assistant(blocks, p, stop="end_turn")
        if r.random() < 0.3:
            c.link("system", {"subtype": "turn_duration", "content": "", "durationMs": r.randint(4_000, 400_000),
                              "isMeta": False, "level": "info"})
        elif r.random() < 0.1:
            c.link("system", {"subtype": "stop_hook_summary", "content": "Stop hook ran: 1 hook, 0 errors",
                              "hookCount": 1, "hookErrors": [], "preventedContinuation": False, "level": "info"})
        elif r.random() < 0.08:
            c.link("attachment", {"attachment": {"type": "edited_text_file",
                                                 "filename": f"{CWD}/src/{r.choice(MODULES)}/{r.choice(NOUNS)}.py",
                                                 "snippet": g.code_line()}})

    def snapshot(self, message_id: str, update: bool) -> None:
        c, g = self.chain, self.gen
        files = {f"src/{g.rng.choice(MODULES)}/{g.rng.choice(NOUNS)}.py": {
            "backupFileName": f"{g.token('', 16).lower()}@v{v}", "version": v, "backupTime": c.clock.isoformat()}
            for v in range(1, g.rng.randint(1, 4))}
        c.side({"type": "file-history-snapshot", "messageId": message_id,
                "snapshot": {"messageId": message_id, "trackedFileBackups": files,
                             "timestamp": c.clock.isoformat(timespec="milliseconds").replace("+00:00", "Z")},
                "isSnapshotUpdate": update})

    def tool_step(self) -> None:
        c, g = self.chain, self.gen
        r = g.rng
        names = [r.choice(("Read", "Read", "Bash", "Bash", "Grep", "Edit")) for _ in range(r.choice((1, 1, 1, 2, 2, 3)))]
        with_text = r.random() < 0.55
        phrase = g.phrase()
        if not with_text:
            names[0] = "Bash"
        uses = [c.call(name, phrase if i == 0 and not with_text else None) for i, name in enumerate(names)]
        blocks = ([c.thinking()] if r.random() < 0.4 else []) + \
            ([{"type": "text", "text": g.prose(phrase, r.randint(1, 2))}] if with_text else []) + uses
        c.assistant(blocks, phrase, stop="tool_use")
        for use in uses:
            c.answer(use, g.phrase(), r.randint(2, 30), large=True)
            if use["name"] == "Edit" and r.random() < 0.5:
                self.snapshot(self.last_prompt, update=True)

    def task_step(self, n: int) -> None:
        c, g = self.chain, self.gen
        r = g.rng
        phrase = g.phrase()
        briefs = []
        for _ in range(n):
            brief_phrase = g.phrase()
            task = g.fill(r.choice(BRIEFS))
            brief = f"{brief_phrase.capitalize()}: {task}. Do not modify any files; answer with a short list."
            briefs.append((brief_phrase, brief, c.tool_use("Task", {
                "description": g.fill("{adj} {noun} in {module}").capitalize(),
                "prompt": brief, "subagent_type": r.choice(("general-purpose", "Explore"))})))
        text = g.prose(phrase, 1) + f" I'll hand {'this' if n == 1 else f'{n} questions'} to subagents."
        c.assistant([{"type": "text", "text": text}, *(use for _, _, use in briefs)], phrase, stop="tool_use")
        finished = []
        for brief_phrase, brief, use in briefs:
            agent = self.subagent(brief_phrase, brief, c.clock)
            finished.append((agent.clock, brief, use, agent))
        finished.sort(key=lambda f: f[0])
        for ended, brief, use, agent in finished:
            c.clock = max(c.clock, ended)
            answer, answer_phrase, calls = agent.final
            result = {"status": "completed", "prompt": brief, "agentId": agent.agent_id,
                      "content": [{"type": "text", "text": answer}],
                      "totalDurationMs": int((ended - agent.started).total_seconds() * 1000),
                      "totalTokens": r.randint(8_000, 90_000), "totalToolUseCount": calls,
                      "usage": {"input_tokens": 12, "output_tokens": r.randint(200, 3000)}}
            c.result(use, [{"type": "text", "text": answer}, {"type": "text", "text": f"agentId: {agent.agent_id}"}],
                     result, answer_phrase)

    def subagent(self, brief_phrase: str, brief: str, clock: datetime) -> _Chain:
        g = self.gen
        r = g.rng
        while (agent_id := f"{r.getrandbits(28):07x}") in {a.agent_id for a in self.subagents}:
            pass
        path = self.root / g.session_id / "subagents" / f"agent-{agent_id}.jsonl"
        a = _Chain(g, path, clock, agent_id=agent_id)
        a.git_branch = self.chain.git_branch
        a.prompt(brief, brief_phrase, parent=None, plain=True)
        calls = 0
        for _ in range(r.randint(2, 4)):
            names = [r.choice(("Read", "Grep", "Bash")) for _ in range(r.choice((1, 1, 2)))]
            with_text = r.random() < 0.5
            phrase = g.phrase()
            if not with_text:
                names[0] = "Bash"
            uses = [a.call(name, phrase if i == 0 and not with_text else None) for i, name in enumerate(names)]
            blocks = ([a.thinking()] if r.random() < 0.5 else []) + \
                ([{"type": "text", "text": g.prose(phrase, 1)}] if with_text else []) + uses
            a.assistant(blocks, phrase, stop="tool_use")
            for use in uses:
                a.answer(use, g.phrase(), r.randint(2, 60), large=False)
            calls += len(uses)
        answer_phrase = g.phrase()
        answer = g.prose(answer_phrase, 3)
        a.assistant([{"type": "text", "text": answer}], answer_phrase, stop="end_turn")
        a.final = (answer, answer_phrase, calls)
        self.subagents.append(a)
        return a


def write_project(root: Path, *, subagents: int = 50, target_bytes: int = 50_000_000, seed: int = 7) -> ProjectManifest:
    """Writes a Claude Code project folder at `root` (`<sessionId>.jsonl` and
    `<sessionId>/subagents/agent-<agentId>.jsonl`) of about `target_bytes`, with `subagents`
    Task calls each launching a subagent; returns what the agent-events format must store."""
    gen = _Gen(seed)
    session = _Session(gen, root, subagents)
    session.write()
    chains = [session.chain, *session.subagents]
    base = sum(len(_dumps(e).encode()) + 1 for chain in chains for e in chain.events)
    remaining = target_bytes - base
    if remaining > 0 and gen.slots:
        count = min(len(gen.slots), -(-remaining // LARGE_MEAN_BYTES))
        slots = gen.rng.sample(gen.slots, count)
        weights = [gen.rng.uniform(*LARGE_SHARE) for _ in slots]
        carry = 0  # what the slots grown so far missed their share by (the Read listing's numbers)
        for slot, weight in zip(slots, weights, strict=True):
            wanted = max(0, int(remaining * weight / sum(weights)) + carry)
            before = len(_dumps(slot.event).encode())
            _grow(gen, slot, wanted)
            carry = wanted - (len(_dumps(slot.event).encode()) - before)
    files, total = [], 0
    for chain in chains:
        chain.path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(_dumps(e) + "\n" for e in chain.events).encode()
        biggest = max(len(_dumps(e).encode()) for e in chain.events)
        assert biggest < MAX_EVENT_BYTES, f"{chain.path.name}: an event of {biggest} bytes"
        chain.path.write_bytes(text)
        files.append(chain.path)
        total += len(text)
    end = max(chain.clock for chain in chains)
    assert end.date().isoformat() == DAY, f"the session ran past {DAY}: {end}"
    skipped = Counter(e["type"] for chain in chains for e in chain.events if not isinstance(e.get("message"), dict))
    turns = []
    for chain in chains:
        for line in chain.lines.values():
            turns += [ExpectedTurn(line.session_id, line.fork_seq + i, role, phrase, copied)
                      for i, (role, phrase, copied) in enumerate(line.turns, start=1)]
    forks = {line.session_id: (line.parent, line.fork_seq) for line in session.chain.lines.values() if line.parent}
    return ProjectManifest(root, gen.session_id, [a.agent_id for a in session.subagents], forks, turns,
                           dict(skipped), files, total)
