"""The Dagster instance `run` and `ui` prepare: a long range's events are written in batches
and planned once per asset, unless the user chose otherwise."""

import os

from assets.run.runner import EVENT_BATCH_SIZE, EVENT_BATCH_SWITCH, PLANNED_EVENTS_SWITCH, ensure_dagster_home


def _unset(monkeypatch, *names: str) -> None:
    # set first, so that monkeypatch restores what was there before (ensure_dagster_home
    # writes os.environ itself) and nothing leaks into later tests
    for name in names:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def test_the_instance_batches_events_and_plans_a_range_once_by_default(tmp_path, monkeypatch):
    _unset(monkeypatch, "DAGSTER_HOME", EVENT_BATCH_SWITCH, PLANNED_EVENTS_SWITCH)
    home = ensure_dagster_home(tmp_path)
    assert (home / "dagster.yaml").exists()
    assert os.environ[EVENT_BATCH_SWITCH] == str(EVENT_BATCH_SIZE) and os.environ[PLANNED_EVENTS_SWITCH] == "1"


def test_a_users_own_choice_of_the_switches_is_kept(tmp_path, monkeypatch):
    _unset(monkeypatch, "DAGSTER_HOME")
    monkeypatch.setenv(EVENT_BATCH_SWITCH, "0")
    monkeypatch.setenv(PLANNED_EVENTS_SWITCH, "0")
    ensure_dagster_home(tmp_path)
    assert (os.environ[EVENT_BATCH_SWITCH], os.environ[PLANNED_EVENTS_SWITCH]) == ("0", "0")


def test_the_instance_queues_runs_one_per_shard_at_a_time(tmp_path, monkeypatch):
    import dagster as dg
    from dagster._core.run_coordinator import QueuedRunCoordinator

    _unset(monkeypatch, "DAGSTER_HOME")
    home = ensure_dagster_home(tmp_path)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        coordinator = instance.run_coordinator
        assert isinstance(coordinator, QueuedRunCoordinator)
        assert coordinator.get_run_queue_config().max_concurrent_runs == 4  # MEMORY_MAX_CONCURRENT_RUNS
        assert [(limit["key"], limit["limit"], limit["value"]) for limit in
                coordinator.get_run_queue_config().tag_concurrency_limits] == [
            ("memory/shard", 1, {"applyLimitPerUniqueValue": True})]
