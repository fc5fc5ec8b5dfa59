"""Deterministic fact extraction from explicit statements (the `rules` back end).

From the messages the person wrote (`Message.speaker` human: a user turn an agent or the
harness wrote states nothing about the user): name, preferred name, location, time zone, employer,
preferences ("I prefer X as my Y", "my preferred Y is X", "Y: X is what I use", "I like
X"), reply language, tools used ("I use X at work"), and decisions such as a chosen port
("run ledger-api on port 9090") or deploy target. From successful tool results: blocks of
`key: value` lines. Each item names the message it came from (`seq`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath

from memory_pipelines.formats import call_arguments
from memory_pipelines.records import Message

_NAME = r"([A-ZÀ-Þ][\w'’-]+(?:\s+[A-ZÀ-Þ][\w'’-]+){0,2})"
_PLACE = r"([A-ZÀ-Þ][\w'’-]+(?:,? [A-ZÀ-Þ][\w'’-]+){0,3})"
_VALUE = r"((?:[^.,;!?\n]|\.(?=\d)){1,80}?)"  # "Python 3.12" keeps its dot
_END = r"(?=\s*(?:[.,;!?\n]|$|\band\b|\bbut\b|\bso\b))"

# (category, key or None for a captured key, pattern, hint): a message without the pattern's
# hint, a part every match holds, is not scanned with it (most messages hold none of them)
USER_PATTERNS: tuple[tuple[str, str | None, re.Pattern[str], re.Pattern[str]], ...] = (
    # names and places are capitalized words: only the lead-in ignores case
    ("identity", "name", re.compile(r"\b(?i:my name is) " + _NAME), re.compile(r"(?i:my name is)")),
    ("identity", "name", re.compile(r"\b(?i:ich hei(?:ß|ss)e) " + _NAME), re.compile(r"(?i:ich hei)")),
    ("identity", "name", re.compile(r"\b(?i:me llamo) " + _NAME), re.compile(r"(?i:me llamo)")),
    ("identity", "preferred_name", re.compile(r"\bcall me " + _NAME), re.compile(r"call me ")),
    ("identity", "location", re.compile(r"\bI (?:live|am based|'m based|moved) (?:in|to) " + _PLACE),
     re.compile(r"I (?:live|am based|'m based|moved) ")),
    ("identity", "location", re.compile(r"\b(?i:ich wohne|ich lebe) in " + _PLACE),
     re.compile(r"(?i:ich wohne|ich lebe) in ")),
    ("identity", "location", re.compile(r"\b(?i:vivo en) " + _PLACE), re.compile(r"(?i:vivo en) ")),
    ("identity", "location", re.compile(r"我住在([^\s，。,.!?！？]{1,20})"), re.compile(r"我住在")),
    ("identity", "name", re.compile(r"我叫([^\s，。,.!?！？]{1,12})"), re.compile(r"我叫")),
    ("identity", "email", re.compile(r"\b(?i:my e-?mail(?: address)? is|mail me at|reach me at) ([\w.+-]+@[\w-]+(?:\.[\w-]+)+)"),
     re.compile(r"@")),
    ("identity", "timezone", re.compile(r"\bmy time ?zone is ([A-Za-z_]+/[A-Za-z_]+|UTC[+-]?\d*|[A-Z]{3,4})", re.IGNORECASE),
     re.compile(r"(?i:time ?zone)")),
    ("work", "employer", re.compile(r"\bI work (?:at|for) " + _PLACE), re.compile(r"I work ")),
    ("work", "manager", re.compile(r"\b" + _NAME + r" is my manager\b"), re.compile(r" is my manager")),
    ("preferences", None, re.compile(r"\bI prefer " + _VALUE + r" (?:as|for) my (\w[\w -]{0,30}?)" + _END, re.IGNORECASE),
     re.compile(r"(?i:prefer)")),
    ("preferences", None, re.compile(r"\bmy (?:preferred|favou?rite) (\w[\w -]{0,30}?) is " + _VALUE + _END, re.IGNORECASE),
     re.compile(r"(?i:preferred|favou?rite)")),
    ("preferences", None, re.compile(r"\b(\w[\w-]{0,30}):\s*" + _VALUE + r" is what I use", re.IGNORECASE),
     re.compile(r"(?i: is what I use)")),
    ("preferences", "answer_style", re.compile(r"\bI (?:like|prefer) (concise|short|detailed|long|brief) answers", re.IGNORECASE),
     re.compile(r"(?i: answers)")),
    ("preferences", "reply_language", re.compile(
        r"\b(?:always )?(?:answer|reply|respond) (?:to me )?in (English|German|Spanish|French|Japanese|Chinese|"
        r"Deutsch|Español|Italian|Portuguese)\b", re.IGNORECASE),
     re.compile(r"(?i:answer|reply|respond)")),
    ("tools", None, re.compile(r"\bI use ([A-Z][\w.+#-]*(?: \d[\w.]*)?) (?:at work|for work|daily|every day|for (\w[\w -]{0,30}?))" + _END),
     re.compile(r"I use ")),
)
_PORT = re.compile(r"\b(?:run|serve|start|put|switch|move|change|keep)\s+([a-z][\w-]*[a-z0-9])\s+(?:\w+\s+){0,2}?"
                   r"(?:on|to)\s+port\s+(\d{2,5})\b", re.IGNORECASE)
_DEPLOY_TARGETS = r"Heroku|Fly\.io|Fly|Render|Vercel|Netlify|AWS|GCP|Azure|Kubernetes|Railway|Cloud Run"
_DATABASES = r"SQLite|PostgreSQL|Postgres|MySQL|MariaDB|MongoDB|Redis|DuckDB"
_DEPLOY = re.compile(r"\b(?:deploy|deploying|host|hosting)\s+(?:it\s+|([a-z][\w-]*)\s+)?(?:to|on)\s+"
                     r"(" + _DEPLOY_TARGETS + r")\b", re.IGNORECASE)
# "switch tapas-finder from Heroku to Fly.io", "recipe-botはSQLiteで行きましょう"
_SWITCH = re.compile(r"\bswitch(?:ing)?\s+([a-z][\w-]*)\s+from\s+[\w.]+\s+to\s+(" + _DEPLOY_TARGETS + "|" + _DATABASES + r")\b",
                     re.IGNORECASE)
_CHOOSE_JA = re.compile(r"([a-z][\w-]*)は(" + _DEPLOY_TARGETS + "|" + _DATABASES + r")(?:で行きましょう|にします)", re.IGNORECASE)
# (pattern, hint) of the (service, target) choices, hinted as USER_PATTERNS are
CHOICE_PATTERNS = ((_DEPLOY, re.compile(r"(?i:deploy|host)")), (_SWITCH, re.compile(r"(?i:switch)")),
                   (_CHOOSE_JA, re.compile("は")))
# "key: value" or "key = value", not "name==1.0" (a pinned requirement) nor a log line
_KV_LINE = re.compile(r"^\s*([A-Za-z_][\w.-]{0,40})\s*(?::|=(?!=))\s*(\S.{0,200}?)\s*$")
_LOG_LEVELS = {"DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL", "TRACE", "NOTICE"}
_CODE_FILES = (".py", ".js", ".ts", ".go", ".rs", ".java", ".rb", ".sh", ".sql", ".c", ".h", ".cpp")
_DECISION_CONTEXT = re.compile(r"\b(let'?s|from now on|switch|change|we'll|we will|go with|decided|use)\b", re.IGNORECASE)


def _clean(value: str) -> str:
    return value.strip().strip("\"'`“”").strip()


def _user_items(message: Message) -> list[dict]:
    items = []
    for category, key, pattern, hint in USER_PATTERNS:
        if not hint.search(message.content):
            continue
        for match in pattern.finditer(message.content):
            if key is None:
                # "I prefer X as my Y" captures (value, key); "my preferred Y is X" and "Y: X" capture (key, value)
                first, second = match.group(1), match.group(2)
                if pattern.pattern.startswith(r"\bI prefer"):
                    value, name = first, second
                elif category == "tools":
                    value, name = first, second or first.split()[0]
                else:
                    name, value = first, second
                items.append(_item(category, f"preferred_{name}" if "preferred" in pattern.pattern and
                                   category == "preferences" and not pattern.pattern.startswith(r"^") else name,
                                   value, "user_explicit", message))
            else:
                items.append(_item(category, key, match.group(1), "user_explicit", message))
    if _DECISION_CONTEXT.search(message.content):
        for service, port in _PORT.findall(message.content):
            items.append(_item("decisions", f"{service}_port", port, "user_explicit", message))
    choices = [found for pattern, hint in CHOICE_PATTERNS if hint.search(message.content)
               for found in pattern.findall(message.content)]
    for service, target in choices:
        kind = "database" if re.fullmatch(_DATABASES, target, re.IGNORECASE) else "deploy_target"
        items.append(_item("decisions", f"{service}_{kind}" if service else kind, target, "user_explicit", message))
    return items


def _tool_items(message: Message, args: dict | None) -> list[dict]:
    if message.metadata.get("is_error"):
        return []
    lines = [m for m in (_KV_LINE.match(line) for line in message.content.splitlines())
             if m and m.group(1).upper() not in _LOG_LEVELS and "(" not in m.group(2)]
    if len(lines) < 2 or len(lines) * 2 < len([line for line in message.content.splitlines() if line.strip()]):
        return []  # not a key: value block
    args = args or {}
    command = str(args.get("command") or args.get("cmd") or "")
    path = args.get("path") or next((t for t in reversed(command.split())
                                     if re.search(r"\.\w{1,8}$", t) and not t.startswith("-")), "")
    if str(path).endswith(_CODE_FILES):
        return []  # source code, not configuration
    prefix = PurePosixPath(path).stem.replace(".", "_") + "_" if path else ""
    return [_item("environment", prefix + key, value, "tool_call", message) for key, value in
            (m.groups() for m in lines[:10])]


def _item(category: str, key: str, value: str, source: str, message: Message) -> dict:
    quote = message.content if len(message.content) <= 200 else message.content[:197] + "…"
    return {"category": category, "key": key, "value": _clean(value), "source": source,
            "source_context": quote, "seq": message.seq}


def extract_facts(messages: Sequence[Message]) -> list[dict]:
    calls = call_arguments(messages)
    items: list[dict] = []
    for message in messages:
        if message.speaker == "human":  # not an agent's brief nor harness text stored as a user turn
            items.extend(_user_items(message))
        elif message.role == "tool":
            items.extend(_tool_items(message, calls.get(message.tool_call_id)))
    return items


def summarize_facts(facts: Sequence[tuple[str, str, str]]) -> str:
    """A deterministic narrative: one sentence per category, facts in key order."""
    by_category: dict[str, list[str]] = {}
    for category, key, value in sorted(facts):
        by_category.setdefault(category, []).append(f"{key.replace('_', ' ')}: {value}")
    return " ".join(f"{category.capitalize()} — {'; '.join(entries)}." for category, entries in by_category.items())
