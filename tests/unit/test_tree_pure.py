"""The temporal tree as pure functions: levels grow past max_children, an appended chunk
changes only the nodes on its path, leaves cover each chunk once, scene trees by day, week
within the month and month, extractive summaries without tool lines."""

from datetime import UTC, datetime, timedelta

import pytest

from memory_pipelines.core.chunk_packing import Chunk
from memory_pipelines.core.temporal_tree import (
    EntityItem, Span, build_entity_tree, build_scene_tree, build_session_tree, descend, open_periods, period_end,
    sentences,
)

T0 = datetime(2026, 9, 28, 9, tzinfo=UTC)


def chunks(n: int, session: str = "s1") -> list[Chunk]:
    return [Chunk(session, "u1", 10 * i + 1, 10 * i + 10, T0 + timedelta(minutes=10 * i),
                      T0 + timedelta(minutes=10 * i + 9), f"User: we talk about topic{i} today.\nAssistant: noted.",
                      2, (f"topic{i}", "shared"))
            for i in range(n)]


def by_key(nodes):
    return {n.node_key: n for n in nodes}


def test_eight_chunks_make_one_level_the_ninth_grows_the_tree_a_level():
    eight = by_key(build_session_tree(chunks(8)))
    assert [k for k, n in eight.items() if n.parent_key is None] == ["1.0"]
    assert sorted(n.parent_key for n in eight.values() if n.level == 0) == ["1.0"] * 8
    nine = by_key(build_session_tree(chunks(9)))
    assert [k for k, n in nine.items() if n.parent_key is None] == ["2.0"]
    assert (nine["1.0"].parent_key, nine["1.1"].parent_key, nine["0.8"].parent_key) == ("2.0", "2.0", "1.1")
    assert max(n.level for n in build_session_tree(chunks(65))) == 3  # 8^2 < 65 leaves: depth stays logarithmic
    assert [n.node_key for n in build_session_tree(chunks(1))] == ["0.0"]
    assert build_session_tree([]) == []
    with pytest.raises(ValueError, match="max_children must be at least 2"):
        build_session_tree(chunks(3), max_children=1)


def test_an_appended_chunk_changes_only_the_nodes_on_its_path():
    before = by_key(build_session_tree(chunks(20), max_children=4))
    after = by_key(build_session_tree(chunks(21), max_children=4))
    changed = {k for k, n in after.items() if k not in before or before[k].content_hash != n.content_hash}
    path, key = [], "0.20"
    while key is not None:
        path.append(key)
        key = after[key].parent_key
    assert changed == set(path) == {"0.20", "1.5", "2.1", "3.0"}  # the leaf, its parent, grandparent, the new root
    assert set(before) <= set(after)  # nothing removed


def test_leaves_cover_each_chunk_once_and_a_parent_spans_its_children():
    nodes = build_session_tree(chunks(11), max_children=3)
    leaves = [n for n in nodes if n.level == 0]
    assert [(s.seq_start, s.seq_end) for n in leaves for s in n.spans] == [(c.start_seq, c.end_seq) for c in chunks(11)]
    [root] = [n for n in nodes if n.parent_key is None]
    assert root.spans == (Span("s1", 1, 110),) and root.keys[0] == "shared"
    assert (root.started_at, root.ended_at) == (chunks(11)[0].started_at, chunks(11)[-1].ended_at)


def test_scene_tree_groups_sessions_by_day_week_within_the_month_and_month():
    # 2026-09-29 (Tue) and 2026-10-01 (Thu) share ISO week 40 but not a month
    roots = []
    for session, start in (("a", T0 + timedelta(days=1)), ("b", T0 + timedelta(days=1, hours=3)),
                           ("c", T0 + timedelta(days=3)), ("d", T0 + timedelta(days=10))):
        [root] = [n for n in build_session_tree([Chunk(session, "u1", 1, 4, start, start + timedelta(minutes=5),
                                                           f"User: about {session}.", 1, (session,))])]
        roots.append(root)
    scene = by_key(build_scene_tree("u1", roots))
    assert [k for k, n in scene.items() if n.parent_key is None] == ["month:2026-09", "month:2026-10"]
    assert scene["session:a"].parent_key == scene["session:b"].parent_key == "day:2026-09-29"
    assert scene["day:2026-09-29"].parent_key == "week:2026-09:2026-W40"
    assert scene["day:2026-10-01"].parent_key == "week:2026-10:2026-W40"
    assert scene["day:2026-10-08"].parent_key == "week:2026-10:2026-W41"
    assert {n.level for n in scene.values()} == {0, 1, 2, 3}
    assert scene["month:2026-10"].spans == (Span("c", 1, 4), Span("d", 1, 4))
    assert build_scene_tree("u1", []) == []


def test_a_period_stays_open_until_a_leaf_of_its_tree_starts_after_it_ends():
    def scene(*days: int) -> list:
        roots = []
        for day in days:
            start = T0 + timedelta(days=day)  # T0: Monday 2026-09-28
            roots += build_session_tree([Chunk(f"s{day}", "u1", 1, 2, start, start + timedelta(minutes=5),
                                               f"User: day {day}.", 1, (f"d{day}",))])
        return build_scene_tree("u1", roots)

    nodes = by_key(scene(1, 2))
    assert period_end(nodes["day:2026-09-29"]) == datetime(2026, 9, 30, tzinfo=UTC)
    # the part of ISO week 40 in September ends with the month, before the week does
    assert period_end(nodes["week:2026-09:2026-W40"]) == datetime(2026, 10, 1, tzinfo=UTC)
    assert period_end(nodes["month:2026-09"]) == datetime(2026, 10, 1, tzinfo=UTC)
    assert period_end(nodes["session:s1"]) is None
    assert open_periods(list(nodes.values())) == {("u1", "day:2026-09-30"), ("u1", "week:2026-09:2026-W40"),
                                                  ("u1", "month:2026-09")}
    # a session on 2026-10-05 (week 41) closes September and its part of week 40, not week 41 or October
    later = open_periods(scene(1, 2, 7))
    assert later == {("u1", "day:2026-10-05"), ("u1", "week:2026-10:2026-W41"), ("u1", "month:2026-10")}
    # the entity tree's years close the same way
    years = build_entity_tree("u1", "api", [EntityItem("fact", str(i), datetime(2025 + i, 6, 1, tzinfo=UTC), (),
                                                       f"fact {i}") for i in range(2)])
    assert {k for _, k in open_periods(years)} == {"day:2026-06-01", "month:2026-06", "year:2026"}


def test_summaries_are_the_sentences_of_what_was_said_never_tool_lines():
    text = ("User: switch ledger-api to port 9090. It clashes.\nAssistant: Switching now.\n"
            "[Tool call] shell({\"cmd\": \"sed -i s/8080/9090/\"})\nTool result (shell): port: 9090\nmore output\n"
            "Assistant: Done, ledger-api listens on 9090.")
    assert sentences(text) == ["switch ledger-api to port 9090.", "It clashes.", "Switching now.",
                               "Done, ledger-api listens on 9090."]
    [leaf] = build_session_tree([Chunk("s", "u", 1, 5, T0, T0, text, 4, ("9090", "ledger-api"))])
    assert leaf.summary == "switch ledger-api to port 9090. Done, ledger-api listens on 9090."


def test_forest_descent_follows_the_query_words_down_to_the_chunk_that_holds_them():
    # two sessions on two days; the second's third chunk talks about the port
    first = [Chunk("a", "u1", i * 10 + 1, i * 10 + 10, T0 + timedelta(minutes=i), T0 + timedelta(minutes=i + 1),
                   f"User: about gardening tomatoes {i}.", 1, ("tomatoes",)) for i in range(3)]
    later = T0 + timedelta(days=2)
    second = [Chunk("b", "u1", i * 10 + 1, i * 10 + 10, later + timedelta(minutes=i), later + timedelta(minutes=i + 1),
                    "User: switch ledger-api to port 9090." if i == 2 else f"User: reading novels {i}.", 1,
                    ("ledger-api", "9090") if i == 2 else ("novels",)) for i in range(12)]
    sessions = build_session_tree(first) + build_session_tree(second)
    scene = build_scene_tree("u1", [n for n in sessions if n.parent_key is None])
    paths = descend(sessions + scene, {"ledger-api", "port", "9090"}, beam=1)
    [path] = paths
    assert [n.node_key for n in path] == ["month:2026-09", "week:2026-09:2026-W40", "day:2026-09-30", "session:b",
                                          "2.0", "1.0", "0.2"]
    assert path[-1].spans == (Span("b", 21, 30),)
    wide = descend(sessions + scene, {"ledger-api"}, beam=3)
    assert (wide[0][-1].tree_key, wide[0][-1].node_key) == ("b", "0.2")  # the best leaf first
    assert {p[-1].tree_key for p in wide} == {"a", "b"}  # a wider beam reaches the other session too
    assert descend([], {"port"}) == []


def test_forest_descent_follows_the_search_hits_among_a_nodes_turns_over_its_summary_words():
    start = T0 + timedelta(days=1)
    a = build_session_tree([Chunk("a", "u1", 1, 10, start, start, "User: the port is 8080.", 1, ("port",))])
    b = build_session_tree([Chunk("b", "u1", 1, 10, start + timedelta(hours=1), start + timedelta(hours=1),
                                  "User: something else entirely.", 1, ("else",))])
    scene = build_scene_tree("u1", a + b)
    [by_words] = descend(a + b + scene, {"port"}, beam=1)
    [by_hits] = descend(a + b + scene, {"port"}, beam=1, hits={"b": [(4, 0.9)]})
    assert (by_words[-1].tree_key, by_hits[-1].tree_key) == ("a", "b")


def test_an_entity_tree_holds_each_item_once_by_day_month_and_year():
    def item(kind, ident, day, text, session="s1"):
        return EntityItem(kind, str(ident), datetime(2025 + day // 400, 1 + (day % 400) // 32, 1 + day % 32,
                                                     tzinfo=UTC), (Span(session, ident, ident + 1),), text,
                          ("listens_on",))

    items = [item("relation", 1, 2, "api listens_on 8080"), item("fact", 2, 2, "decisions/api_port: 8080"),
             item("relation", 3, 40, "api listens_on 9090"), item("entry", 4, 401, "api moved to the new cluster")]
    nodes = build_entity_tree("u1", "API", items)
    assert {n.tree_kind for n in nodes} == {"entity"} and {n.tree_key for n in nodes} == {"u1:api"}
    leaves = [n for n in nodes if n.level == 0]
    assert sorted(n.node_key for n in leaves) == ["entry:4", "fact:2", "relation:1", "relation:3"]
    assert all(n.keys[0] == "API" for n in leaves)
    by_key = {n.node_key: n for n in nodes}
    assert [n.node_key for n in nodes if n.parent_key is None] == ["year:2025", "year:2026"]
    assert by_key["relation:1"].parent_key == by_key["fact:2"].parent_key == "day:2025-01-03"
    assert by_key["day:2025-02-09"].parent_key == "month:2025-02" and by_key["month:2025-02"].parent_key == "year:2025"
    assert "api listens_on 8080" in by_key["year:2025"].summary and "9090" in by_key["month:2025-02"].summary
    assert build_entity_tree("u1", "api", []) == []
