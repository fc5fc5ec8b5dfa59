"""The Dagster instance `run` and `ui` prepare: a long range's events are written in batches
and planned once per asset, unless the user chose otherwise."""

import os

from assets.runner import EVENT_BATCH_SIZE, EVENT_BATCH_SWITCH, PLANNED_EVENTS_SWITCH, ensure_dagster_home


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
