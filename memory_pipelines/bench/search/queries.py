"""The benchmark's query set: a user and a few content words of one of their rows, in a
question template, drawn from the data with a seed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import psycopg

from memory_pipelines.db import bench as bench_db
from memory_pipelines.rules.text import content_words

QUESTION_TEMPLATES = ("{w}", "what did we decide about {w}?", "how do I fix {w}", "remind me about {w}",
                      "{w} again?", "where is the {w} from last time")


@dataclass(frozen=True)
class BenchQuery:
    user_id: str
    text: str
    source: str  # chunk | fact (a turn of the turn-level load counts as a chunk)


def draw_queries(conn: psycopg.Connection, count: int, seed: int, turns: bool = False) -> list[BenchQuery]:
    """A user and 2-4 content words of one of their chunks (three in four; turns, with the
    turn-level load) or facts, in a question template; seeded, drawn from the data."""
    rng = np.random.default_rng([seed, 5])
    from_facts = rng.random(count) < 0.25
    picked: dict[str, list] = {}
    texts = ("memory_turns", bench_db.turns_by_id) if turns else ("memory_chunks", bench_db.chunks_by_id)
    for table, rows_by_id, n in ((*texts, int((~from_facts).sum())),
                                 ("memory_facts", bench_db.facts_by_id, int(from_facts.sum()))):
        low, high = bench_db.id_range(conn, table)
        if n == 0 or high == 0:
            picked[table] = []
            continue
        ids = sorted(set(rng.integers(low, high + 1, size=n * 2).tolist()))
        rows = rows_by_id(conn, ids)
        order = rng.permutation(len(rows))
        picked[table] = [rows[i] for i in order[:n]]
    chunks, facts = iter(picked[texts[0]]), iter(picked["memory_facts"])
    out = []
    for fact in from_facts.tolist():
        row = next(facts, None) if fact else None
        if row is None:
            row, fact = next(chunks, None), False
            if row is None:
                row, fact = next(facts, None), True
        if row is None:
            break
        text = f"{row[2].replace('_', ' ')} {row[3]}" if fact else row[2]
        words = sorted(content_words(text))
        if not words:
            continue
        chosen = [words[i] for i in rng.choice(len(words), size=min(len(words), int(rng.integers(2, 5))),
                                               replace=False)]
        template = QUESTION_TEMPLATES[int(rng.integers(0, len(QUESTION_TEMPLATES)))]
        out.append(BenchQuery(row[1], template.format(w=" ".join(chosen)), "fact" if fact else "chunk"))
    return out
