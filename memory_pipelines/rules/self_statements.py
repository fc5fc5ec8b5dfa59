"""What a person says about themselves (the `rules` back end): likes, plans, relations, work,
places, habits and health, one sentence each, from the turns the person wrote.

A long conversation mentions these in passing ("ugh, the 7:40 ferry was cancelled again")
and never restates them; a question about the person ("would I enjoy a silent retreat?")
is answered by several of them together. Kept as knowledge entries with lineage to their
turn, they are short enough that many fit a tight budget, where the turns they came from
would not. Real turns bury them in clauses about something else ("ugh, I hurt my knee on
Tuesday — anyway, how do I undo a commit?"), so each sentence is cut at dashes, brackets and
semicolons first. A clause is kept when it speaks in the first person in at least five words
(or in eight without: chat drops the "I") and is no question, request, instruction,
greeting or code; its topic is the first of `TOPICS` it speaks
of, else "other" (a taste said in the person's own words, "I burn toast, literally", names
no topic and answers "would I enjoy cooking?" all the same).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from memory_pipelines.records import Message
from memory_pipelines.rules.text import clip, sentences

_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|I’m|I’ve|I’d|I’ll|me|my|mine|we|we're|we've|our)\b")
# topic -> what a sentence about it says (checked in this order: the first that matches names it)
TOPICS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("likes", re.compile(r"\b(?:love|loved|loving|like|liked|enjoy|enjoyed|adore|hate|hated|can't stand|"
                         r"favou?rite|fan of|into|obsessed|prefer|passion|hooked)\b", re.IGNORECASE)),
    ("plans", re.compile(r"\b(?:plan|planning|planned|going to|gonna|want to|wanna|hope to|hoping|dream|"
                         r"someday|one day|next (?:year|month|summer|spring|week)|signed up|booked|saving up)\b",
                         re.IGNORECASE)),
    ("relations", re.compile(r"\b(?:my|our) (?:sister|brother|mum|mom|mother|dad|father|parents?|partner|wife|"
                             r"husband|girlfriend|boyfriend|fianc[ée]e?|son|daughter|kids?|children|grand\w+|"
                             r"aunt|uncle|cousin|niece|nephew|friend|best friend|roommate|neighbou?r|family)\b",
                             re.IGNORECASE)),
    ("work", re.compile(r"\b(?:my (?:job|boss|team|manager|colleagues?|office|shift|interview|offer|contract|"
                        r"career|degree|thesis|class|course)|work(?:ing)? (?:as|at|for|on)|hired|promoted|"
                        r"quit|resigned|interview(?:ed)?|studying|graduated)\b", re.IGNORECASE)),
    ("places", re.compile(r"\b(?:live|living|lived|moved|moving|grew up|born|hometown|commute|my (?:flat|apartment|"
                          r"house|place|street|neighbourhood|neighborhood|city|town))\b", re.IGNORECASE)),
    ("health", re.compile(r"\b(?:allergic|allergy|injur\w*|physio\w*|doctor|surgery|knee|back pain|diet|"
                          r"vegetarian|vegan|sober|sleep|insomnia|therapy|anxious|anxiety)\b", re.IGNORECASE)),
    ("habits", re.compile(r"\b(?:usually|always|never|every (?:morning|evening|night|day|week|weekend|sunday|"
                          r"saturday)|each (?:morning|week)|on weekends|habit|routine|took up|taken up|started|"
                          r"practi[cs]e|learning|training|(?:have|'ve|’ve) been)\b", re.IGNORECASE)),
)
OTHER_TOPIC = "other"
MIN_WORDS = 5
# a clause without "I" or "my" is still the person's news when it is this long ("back to
# running at last, forty minutes and not a twinge": chat drops the pronoun)
MIN_WORDS_UNSAID = 8
MAX_CHARS = 300
# where a sentence joins clauses about different things
_CLAUSES = re.compile(r"\s+[—–]\s+|\s+--?\s+|[();]|\banyway\b,?", re.IGNORECASE)
_LEAD = re.compile(r"^(?:(?:ok(?:ay)?|so|and|but|also|oh|ugh|well|yeah|random|side note|btw|lol)\b[\s,:!.]*)+",
                   re.IGNORECASE)
# a question or a request to the assistant, however it ends
_ASKS = re.compile(r"^(?:can|could|would|will|do|does|did|is|are|how|what|why|where|when|which|who|please|"
                   r"let's|help)\b|\b(?:you|your)\b", re.IGNORECASE)
# an instruction to the assistant ("write me a cache decorator", "switch it to Fly.io")
_IMPERATIVE = re.compile(r"^(?:just\s+)?(?:write|give|find|show|make|add|fix|run|use|switch|change|install|create|"
                         r"tell|explain|list|check|update|remove|delete|move|put|set|send|convert|generate|build|"
                         r"try|keep|stop|start|let|don't|do not|never|always|remember|note)\b", re.IGNORECASE)
_CODE = re.compile(r"[`{}<>=/\\]|\w_\w|\w\(|\.(?:py|js|ts|sql|md|json|ya?ml)\b")


@dataclass(frozen=True)
class SelfStatement:
    seq: int  # the turn it was said in
    topic: str  # one of TOPICS
    sentence: str


def clauses(text: str) -> list[str]:
    """The clauses of `text` a statement could be, leading fillers ("ok so", "ugh,") cut."""
    return [c for c in (_LEAD.sub("", part.strip(" ,")).strip() for sentence in sentences(text)
                        for part in _CLAUSES.split(sentence) if part) if c]


def find_self_statements(messages: Sequence[Message]) -> list[SelfStatement]:
    """Every first-person clause the person wrote about themselves (`Message.speaker` human:
    an assistant's or an agent's "I love hiking too" is not the user's), in turn order, each
    once."""
    found, seen = [], set()
    for m in messages:
        if m.speaker != "human":
            continue
        for clause in clauses(m.content):
            folded = " ".join(clause.casefold().split())
            size = len(clause.split())
            if clause.endswith("?") or size < MIN_WORDS or folded in seen or _ASKS.search(clause) \
                    or _IMPERATIVE.search(clause) or _CODE.search(clause) or (size < MIN_WORDS_UNSAID and not _FIRST_PERSON.search(clause)):
                continue
            seen.add(folded)
            topic = next((name for name, pattern in TOPICS if pattern.search(clause)), OTHER_TOPIC)
            found.append(SelfStatement(m.seq, topic, clip(clause[0].upper() + clause[1:], MAX_CHARS)))
    return found
