"""Each Dagster resource holds its settings class's fields and defaults, and is built from
the validated settings: a default lives in one place (pure: no database)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from assets.resources import (
    EmbedderResource, LifecycleSettings, MemorySettings, ModelResource, SummarySettings, TranscriptSourceResource,
    resources_from,
)
from memory_pipelines.config import SPECS, DecaySettings, load
from memory_pipelines.sources import SourceSettings
from memory_pipelines.embed import EmbedConfig
from memory_pipelines.llm import ModelConfig


@pytest.mark.parametrize("resource, config", [(ModelResource, ModelConfig), (EmbedderResource, EmbedConfig)])
def test_a_back_end_resource_has_its_config_classes_fields_and_defaults(resource, config):
    names = {f.name for f in fields(config)}
    assert names <= set(resource.model_fields), names - set(resource.model_fields)
    built = resource()
    for field in fields(config):
        if field.name != "api_key":  # a secret: an EnvVar in the resource, never a default
            assert getattr(built, field.name) == getattr(config(), field.name), field.name


def test_settings_resources_default_to_their_specs():
    assert LifecycleSettings().decay() == DecaySettings()
    assert SummarySettings().language == SPECS["MEMORY_SUMMARY_LANGUAGE"].default
    assert SummarySettings().chunk_chars == SPECS["MEMORY_SUMMARY_CHUNK_CHARS"].default
    assert MemorySettings().stale_minutes == SPECS["MEMORY_STALE_MINUTES"].default
    assert MemorySettings().context_messages == SPECS["MEMORY_CONTEXT_MESSAGES"].default
    assert TranscriptSourceResource().settings() == SourceSettings()


def test_resources_from_the_environment_carry_every_setting(monkeypatch):
    for name in SPECS:
        monkeypatch.delenv(name, raising=False)
    moved = {"MEMORY_CONTEXT_MESSAGES": "32", "MEMORY_STALE_MINUTES": "45", "MEMORY_DECAY_MIN_AGE_DAYS": "120",
             "MEMORY_LLM_TIMEOUT": "7", "MEMORY_DECISION_RETRIES": "5", "MEMORY_EMBED_BACKEND": "hashing",
             "MEMORY_EMBED_BATCH": "3", "MEMORY_SUMMARY_CHUNK_CHARS": "9000"}
    for name, value in moved.items():
        monkeypatch.setenv(name, value)
    built = resources_from(load())
    assert built["memory_settings"].context_messages == 32 == load().context_messages
    assert built["memory_settings"].stale_minutes == 45
    assert built["lifecycle"].decay().min_age_days == 120
    assert built["llm"].config().timeout_s == 7.0 and built["decision"].config().retries == 5
    assert built["decision"].config().timeout_s == 7.0, "the decision model inherits the chat model's timeout"
    assert built["embedder"].batch_size == 3 and built["summary_settings"].chunk_chars == 9000
