"""The temporal tree (navra's, after MemForest): coarse-to-fine views of a user's history in
one table, `memory_tree`, as pure functions from chunks and sessions to nodes.

- A **session tree**'s leaves are the session's chunks (consecutive turn spans) in order;
  internal nodes condense up to `max_children` children. Node `L.i` is the i-th node of
  level L and holds nodes `L-1.(i*m)` .. `L-1.(i*m+m-1)`, so a session that gains chunks
  changes only the nodes on the new leaves' path, and a level that holds more than
  `max_children` nodes grows the tree a level: depth stays logarithmic.
- A **scene tree** per user groups the roots of their session trees by time: day, the part
  of an ISO week within a month, month (the top).
- An **entity tree** per entity of a user's graph holds what their memory says about it
  over time: the relations it is in, the knowledge entries and the facts naming it, as
  leaves grouped by day, month and year (the top).

Summaries here are the `rules` back end's: extractive, the sentences holding most of a
node's keys, and the keys most of its children hold.

**Forest recall** (`descend`) reads the trees top down: the query's words against the scene
tree's months, then the best children level by level (a scene leaf goes on into its session
tree) down to chunk leaves, whose passages search serves with the path as provenance.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, time, timedelta
from functools import cached_property

from memory_pipelines.core.chunk_packing import Chunk
from memory_pipelines.digests import json_digest
from memory_pipelines.rules.text import clip, content_words

MAX_CHILDREN = 8
NODE_KEYS = 8  # keys a node keeps
SUMMARY_CHARS = 400
SENTENCE_CHARS = 200
LEAF_SENTENCES = 2
MODEL = "rules"
FOREST_BEAM = 6  # nodes kept at each depth of a descent
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
# a chunk's lines (memory_pipelines.core.chunk_packing): a message starts with its role's prefix and runs
# to the next one; a message's tool call is a line of its own
_MESSAGE_START = re.compile(r"^(User|Assistant|Tool result \([^)]*\)): ?")
_TOOL_CALL = "[Tool call]"


@dataclass(frozen=True)
class Span:
    session_id: str
    seq_start: int
    seq_end: int


@dataclass(frozen=True)
class EntityItem:
    """A relation, knowledge entry or fact about an entity: an entity tree's leaf."""

    kind: str  # relation | entry | fact
    key: str  # what it is: "subject relation object@valid_from", the entry's key, "category/key"
    at: datetime  # when it was said (conversation time)
    spans: tuple[Span, ...]  # the turns it came from (none: written through the API)
    text: str
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class TreeNode:
    user_id: str
    tree_kind: str  # session | scene | entity
    tree_key: str  # the session's id, the user's id, "user:entity"
    node_key: str
    level: int  # 0: a leaf
    parent_key: str | None  # None: a top node
    position: int  # among its parent's children (among the top nodes for a top node)
    started_at: datetime
    ended_at: datetime
    spans: tuple[Span, ...]
    keys: tuple[str, ...]
    summary: str
    model: str = MODEL  # what wrote the summary
    source_hash: str | None = None  # a model-written summary: what it was written from

    @cached_property
    def content_hash(self) -> str:
        """Of everything the row holds: an unchanged node is not written again."""
        parts = [self.tree_kind, self.tree_key, self.node_key, self.level, self.parent_key, self.position,
                 self.started_at.isoformat(), self.ended_at.isoformat(),
                 [[s.session_id, s.seq_start, s.seq_end] for s in self.spans], list(self.keys), self.summary]
        if self.source_hash is not None:  # (so the rules' nodes keep the hashes they had)
            parts += [self.model, self.source_hash]
        return json_digest(parts, ensure_ascii=False)


def sentences(text: str) -> list[str]:
    """The sentences of a chunk's user and assistant messages (its role prefixes kept off),
    tool calls and tool results left out; text without prefixes is read whole."""
    prose, speaking = [], True
    for line in text.splitlines():
        start = _MESSAGE_START.match(line)
        if start is not None:
            speaking = not start.group(1).startswith("Tool result")
            line = line[start.end():]
        if speaking and not line.lstrip().startswith(_TOOL_CALL):
            prose.append(line)
    return [piece.strip() for piece in _SENTENCE_END.split("\n".join(prose)) if piece.strip()]


def key_sentences(text: str, keys: Sequence[str], limit: int) -> list[str]:
    """The `limit` sentences holding most of the keys (the earliest on ties), in text order."""
    found = sentences(text)
    folded = [k.casefold() for k in keys]
    hits = [sum(k in s.casefold() for k in folded) for s in found]
    best = sorted(range(len(found)), key=lambda i: (-hits[i], i))[:limit]
    return [clip(found[i], SENTENCE_CHARS) for i in sorted(best)]


def _common_keys(children: Sequence[TreeNode]) -> tuple[str, ...]:
    """The keys most children hold, the first seen first on ties."""
    counts: Counter = Counter()
    first: dict[str, int] = {}
    for child in children:
        for key in child.keys:
            counts[key] += 1
            first.setdefault(key, len(first))
    return tuple(sorted(counts, key=lambda k: (-counts[k], first[k]))[:NODE_KEYS])


def _condensed(children: Sequence[TreeNode]) -> str:
    """Each child's first sentence, in order, within the summary's length."""
    firsts = [found[0] for found in (sentences(c.summary) for c in children) if found]
    return clip(" … ".join(firsts), SUMMARY_CHARS)


def _merged_spans(children: Sequence[TreeNode]) -> tuple[Span, ...]:
    """The children's spans, adjacent spans of a session joined."""
    merged: list[Span] = []
    for span in sorted((s for c in children for s in c.spans), key=lambda s: (s.session_id, s.seq_start)):
        last = merged[-1] if merged else None
        if last is not None and last.session_id == span.session_id and span.seq_start <= last.seq_end + 1:
            merged[-1] = Span(last.session_id, last.seq_start, max(last.seq_end, span.seq_end))
        else:
            merged.append(span)
    return tuple(merged)


def _parent(children: Sequence[TreeNode], *, tree_kind: str, tree_key: str, node_key: str, level: int,
            position: int) -> TreeNode:
    return TreeNode(children[0].user_id, tree_kind, tree_key, node_key, level, None, position,
                    min(c.started_at for c in children), max(c.ended_at for c in children),
                    _merged_spans(children), _common_keys(children), _condensed(children))


def _attach(children: Sequence[TreeNode], parent_key: str) -> list[TreeNode]:
    return [replace(c, parent_key=parent_key, position=i) for i, c in enumerate(children)]


def build_session_tree(chunks: Sequence[Chunk], max_children: int = MAX_CHILDREN) -> list[TreeNode]:
    """A session's tree over its chunks (in seq order): leaves, then levels of at most
    `max_children` children each up to one root. A session with one chunk is its leaf."""
    if max_children < 2:
        raise ValueError(f"max_children must be at least 2, not {max_children}")
    if not chunks:
        return []
    ordered = sorted(chunks, key=lambda c: c.start_seq)
    session_id = ordered[0].session_id
    level_nodes = [TreeNode(c.user_id, "session", session_id, f"0.{i}", 0, None, i, c.started_at, c.ended_at,
                            (Span(session_id, c.start_seq, c.end_seq),), c.breadcrumbs[:NODE_KEYS],
                            " ".join(key_sentences(c.content, c.breadcrumbs, LEAF_SENTENCES)))
                   for i, c in enumerate(ordered)]
    nodes: list[TreeNode] = []
    level = 0
    while len(level_nodes) > 1:
        groups = [level_nodes[i:i + max_children] for i in range(0, len(level_nodes), max_children)]
        parents = [_parent(g, tree_kind="session", tree_key=session_id, node_key=f"{level + 1}.{i}",
                           level=level + 1, position=i) for i, g in enumerate(groups)]
        for group, parent in zip(groups, parents, strict=True):
            nodes += _attach(group, parent.node_key)
        level_nodes, level = parents, level + 1
    return nodes + level_nodes


def _midnight(day: date, like: datetime) -> datetime:
    return datetime.combine(day, time(), like.tzinfo)


def _next_month(moment: datetime) -> datetime:
    return _midnight(date(moment.year + moment.month // 12, moment.month % 12 + 1, 1), moment)


@dataclass(frozen=True)
class _Period:
    """A level of a tree grouped by time: a moment's period (its node key) and when it ends."""
    key: Callable[[datetime], str]
    end: Callable[[datetime], datetime]


_DAY = _Period(lambda t: f"day:{t:%Y-%m-%d}", lambda t: _midnight(t.date() + timedelta(days=1), t))
# the part of the moment's ISO week within its month
_WEEK_IN_MONTH = _Period(lambda t: f"week:{t:%Y-%m}:{t.isocalendar()[0]}-W{t.isocalendar()[1]:02d}",
                         lambda t: min(_midnight(t.date() + timedelta(days=7 - t.weekday()), t), _next_month(t)))
_MONTH = _Period(lambda t: f"month:{t:%Y-%m}", _next_month)
_YEAR = _Period(lambda t: f"year:{t:%Y}", lambda t: _midnight(date(t.year + 1, 1, 1), t))
PERIODS = {"scene": (_DAY, _WEEK_IN_MONTH, _MONTH), "entity": (_DAY, _MONTH, _YEAR)}  # by level, from 1


def _grouped_by_time(leaves: Sequence[TreeNode], periods: Sequence[_Period]) -> list[TreeNode]:
    """Leaves (in time order) under one level of parents per period, each grouping the level
    below by the period of its nodes' start (the last level: the top nodes)."""
    nodes: list[TreeNode] = []
    level_nodes = list(leaves)
    for level, period in enumerate(periods, start=1):
        groups: dict[str, list[TreeNode]] = {}
        for node in level_nodes:
            groups.setdefault(period.key(node.started_at), []).append(node)
        parents = [_parent(g, tree_kind=g[0].tree_kind, tree_key=g[0].tree_key, node_key=key, level=level,
                           position=i) for i, (key, g) in enumerate(groups.items())]
        for (_, group), parent in zip(groups.items(), parents, strict=True):
            nodes += _attach(group, parent.node_key)
        level_nodes = parents
    return nodes + level_nodes


def period_end(node: TreeNode) -> datetime | None:
    """When the period a scene or entity tree node groups ends (its day, its part of an ISO
    week within a month, its month or year), in its own time zone; None for a node that
    groups no period (a leaf, a session tree's node)."""
    periods = PERIODS.get(node.tree_kind, ())
    return periods[node.level - 1].end(node.started_at) if 0 < node.level <= len(periods) else None


def open_periods(nodes: Sequence[TreeNode]) -> set[tuple[str, str]]:
    """(tree key, node key) of the internal nodes whose period has not closed: no leaf of their
    tree starts at or after its end (the user has not spoken since, in conversation time).
    Judged from the tree alone, so a backfill and the same days run one by one agree."""
    latest: dict[str, datetime] = {}
    for n in nodes:
        if n.level == 0:
            latest[n.tree_key] = max(latest.get(n.tree_key, n.started_at), n.started_at)
    found = set()
    for n in nodes:
        end = period_end(n) if n.level > 0 else None
        if end is not None and (n.tree_key not in latest or latest[n.tree_key] < end):
            found.add((n.tree_key, n.node_key))
    return found


def build_scene_tree(user_id: str, session_roots: Sequence[TreeNode]) -> list[TreeNode]:
    """A user's scene tree: the roots of their session trees as leaves (copied with the
    scene's keys), grouped by the day each session started, then by week within a month,
    then by month (the top nodes, in time order)."""
    leaves = sorted((TreeNode(user_id, "scene", user_id, f"session:{r.tree_key}", 0, None, 0, r.started_at,
                              r.ended_at, r.spans, r.keys, r.summary) for r in session_roots),
                    key=lambda n: (n.started_at, n.node_key))
    return _grouped_by_time(leaves, PERIODS["scene"])


def entity_tree_key(user_id: str, entity: str) -> str:
    return f"{user_id}:{entity.casefold()}"


def build_entity_tree(user_id: str, entity: str, items: Sequence[EntityItem]) -> list[TreeNode]:
    """An entity's tree: each item about it a leaf (its text, the entity and the item's own
    keys), grouped by the day it was said, then month, then year (the top nodes)."""
    key = entity_tree_key(user_id, entity)
    leaves = sorted((TreeNode(user_id, "entity", key, f"{i.kind}:{i.key}", 0, None, 0, i.at, i.at, i.spans,
                              tuple(dict.fromkeys((entity, *i.keys)))[:NODE_KEYS], clip(i.text, SENTENCE_CHARS))
                     for i in items), key=lambda n: (n.started_at, n.node_key))
    return _grouped_by_time(leaves, PERIODS["entity"])


def node_score(node: TreeNode, words: set[str], hits: Mapping[str, Sequence[tuple[int, float]]]) -> float:
    """How well a node matches the query: the best search hit among the turns it covers
    (`hits`: per session, (seq, score 0-1)), plus a tenth for each query word its summary
    and keys hold (a summary is a few sentences: alone it misses most of what its turns say)."""
    inside = [score for span in node.spans for seq, score in hits.get(span.session_id, ())
              if span.seq_start <= seq <= span.seq_end]
    return max(inside, default=0.0) + 0.1 * len(words & content_words(" ".join((node.summary, *node.keys))))


def descend(nodes: Sequence[TreeNode], words: set[str], beam: int = FOREST_BEAM,
            hits: Mapping[str, Sequence[tuple[int, float]]] | None = None) -> list[tuple[TreeNode, ...]]:
    """Forest recall's descent over one user's trees: from the scene tree's top nodes, the
    `beam` best nodes at each depth (`node_score`, then the newest) and their children next,
    a scene leaf going on into its session tree, down to chunk leaves. Returns the path to
    each leaf reached (top node first), best leaf first."""
    hits = hits or {}
    children: dict[tuple[str, str, str], list[TreeNode]] = {}
    roots: dict[str, TreeNode] = {}
    for n in nodes:
        if n.parent_key is not None:
            children.setdefault((n.tree_kind, n.tree_key, n.parent_key), []).append(n)
        elif n.tree_kind == "session":
            roots[n.tree_key] = n
    scores: dict[tuple[str, str, str], float] = {}

    def score(node: TreeNode) -> float:
        key = (node.tree_kind, node.tree_key, node.node_key)
        if key not in scores:
            scores[key] = node_score(node, words, hits)
        return scores[key]

    def best(paths: list[tuple[TreeNode, ...]]) -> list[tuple[TreeNode, ...]]:
        return sorted(paths, key=lambda p: (-score(p[-1]), -p[-1].ended_at.timestamp(), p[-1].node_key))[:beam]

    frontier = best([(n,) for n in nodes if n.tree_kind == "scene" and n.parent_key is None])
    reached: list[tuple[TreeNode, ...]] = []
    while frontier:
        deeper = []
        for path in frontier:
            node = path[-1]
            if node.tree_kind == "scene" and node.level == 0:
                root = roots.get(node.node_key.removeprefix("session:"))
                if root is None:
                    continue
                node, path = root, path + (root,)
            below = children.get((node.tree_kind, node.tree_key, node.node_key), [])
            if below:
                deeper += [path + (c,) for c in below]
            elif node.tree_kind == "session":
                reached.append(path)
        frontier = best(deeper)
    return sorted(reached, key=lambda p: (-score(p[-1]), -sum(score(n) for n in p), -p[-1].ended_at.timestamp()))
