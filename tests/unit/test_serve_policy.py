"""How unified search spends a budget (`ServePolicy`): choices that depend on the budget."""

import pytest

from memory_pipelines.passages import Budget, TurnSearch
from memory_pipelines.search.unified import ALONE_WITHIN_CHARS, ServePolicy


def test_a_tight_budget_serves_best_turns_without_their_neighbours():
    policy = ServePolicy()
    widened = policy.how
    assert (widened.before, widened.after) != (0, 0)
    for budget in (Budget(720), Budget(ALONE_WITHIN_CHARS), Budget(ALONE_WITHIN_CHARS // 4, "tokens")):
        tight = policy.how_within(budget)
        assert (tight.before, tight.after) == (0, 0) and tight.session_penalty == widened.session_penalty
    for budget in (Budget(ALONE_WITHIN_CHARS + 1), Budget(400, "tokens"), Budget(None)):
        assert policy.how_within(budget) == widened
    # measured without it (bench retrieval's ablation row): always widened
    assert ServePolicy(alone_within=None).how_within(Budget(720)) == widened
    custom = ServePolicy(how=TurnSearch(before=1, after=2))
    assert custom.how_within(Budget(5000)) == custom.how


def test_a_policy_names_which_questions_get_self_statements_first():
    with pytest.raises(ValueError, match="self_first one of person, first-person, always, never"):
        ServePolicy(self_first="sometimes")
