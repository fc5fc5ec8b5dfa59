"""Every MEMORY_* setting parsed by its spec: defaults, one-line errors, typos (pure)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from memory_pipelines.config import SPECS, ConfigError, DecaySettings, default_home, load, mask_url, validate_environment


def setting(name: str, environ: dict[str, str]):
    """One setting's value as a process loading `environ` holds it."""
    return getattr(load(environ), SPECS[name].field)


def test_every_default_is_a_value_its_own_spec_accepts():
    for name, spec in SPECS.items():
        assert setting(name, {}) == (default_home() if name == "MEMORY_HOME" else spec.default), name
        if spec.default is not None and not isinstance(spec.default, (bool, Path, date)):
            assert setting(name, {name: str(spec.default)}) == spec.default, name


@pytest.mark.parametrize("name, text, accepted", [
    ("MEMORY_DECAY_THRESHOLD", "abc", "a number from 0 to 1"),
    ("MEMORY_DECAY_THRESHOLD", "5", "a number from 0 to 1"),  # no score ever reaches it
    ("MEMORY_DECAY_THRESHOLD", "nan", "a number from 0 to 1"),
    ("MEMORY_DECAY_MIN_AGE_DAYS", "0", "an integer >= 1"),
    ("MEMORY_DECAY_BASE_RATE", "0", "a number > 0 and <= 1"),
    ("MEMORY_STALE_MINUTES", "ten", "an integer >= 1"),
    ("MEMORY_STALE_MINUTES", "0", "an integer >= 1"),
    ("MEMORY_CONTEXT_MESSAGES", "2.5", "an integer from 1 to 1000"),
    ("MEMORY_TIMEZONE", "Mars/Olympus", "an IANA time zone"),
    ("MEMORY_PARTITION_START", "01/10/2024", "a date like 2024-01-01"),
    ("MEMORY_LLM_BACKEND", "gpt", "one of ollama, openai, rules"),
    ("MEMORY_LLM_BASE_URL", "localhost:11434", "an http:// or https:// URL"),
    ("MEMORY_DECISION_RETRIES", "-1", "an integer from 0 to 20"),
    ("MEMORY_EMBED_BACKEND", "word2vec", "one of ollama, openai, local, onnx, model2vec, hashing"),
    ("MEMORY_EMBED_PRECISION", "int4", "one of fp32, int8"),
    ("MEMORY_CONSENT_BASIS", "because", "one of legitimate_interest"),
    ("MEMORY_PII_SANITIZE", "maybe", "1/0, true/false, yes/no or on/off"),
    ("MEMORY_SCHEDULE_CRON", "every minute", "a cron expression of five fields"),
    ("MEMORY_PRICE_TABLE", "/no/such/prices.json", "the path of a JSON file"),
    ("MEMORY_RUN_TOKEN_BUDGET", "-5", "an integer >= 0"),
    ("MEMORY_API_TIMEOUT", "30s", "a number > 0"),
    ("MEMORY_API_MAX_BODY_BYTES", "10", "an integer >= 1024"),
    ("MEMORY_API_POOL_SIZE", "0", "an integer from 1 to 100"),
])
def test_a_bad_value_is_one_line_naming_the_variable_the_value_and_what_is_accepted(name, text, accepted):
    with pytest.raises(ConfigError) as caught:
        setting(name, {name: text})
    message = str(caught.value)
    assert message.startswith(f"{name}={text!r} is not valid: expected ") and accepted in message
    assert "\n" not in message


def test_values_are_typed_and_trimmed():
    env = {"MEMORY_DECAY_THRESHOLD": " 0.25 ", "MEMORY_DECAY_FACTS": "on", "MEMORY_LLM_BACKEND": "Ollama",
           "MEMORY_LLM_BASE_URL": "http://127.0.0.1:11434/", "MEMORY_SCHEDULE_CRON": "0  *  * * *"}
    assert setting("MEMORY_DECAY_THRESHOLD", env) == 0.25
    assert setting("MEMORY_DECAY_FACTS", env) is True
    assert setting("MEMORY_LLM_BACKEND", env) == "ollama"
    assert setting("MEMORY_LLM_BASE_URL", env) == "http://127.0.0.1:11434"
    assert setting("MEMORY_SCHEDULE_CRON", env) == "0 * * * *"
    assert setting("MEMORY_DECAY_THRESHOLD", {"MEMORY_DECAY_THRESHOLD": "   "}) == 0.5  # blank: unset


def test_validation_reports_every_bad_value_and_warns_of_unknown_names():
    env = {"MEMORY_DECAY_THRESHOLD": "abc", "MEMORY_STALE_MINUTES": "ten", "MEMORY_TIMEZONE": "UTC"}
    with pytest.raises(ConfigError) as caught:
        validate_environment(env)
    assert str(caught.value).splitlines() == [
        "MEMORY_STALE_MINUTES='ten' is not valid: expected an integer >= 1",
        "MEMORY_DECAY_THRESHOLD='abc' is not valid: expected a number from 0 to 1 (0: never by score)",
    ]
    warnings = validate_environment({"MEMORY_DECAY_TRESHOLD": "0.3", "MEMORY_QQQQQQQQQQQQQQQQQQQQQQ": "1", "PATH": "/bin"})
    assert warnings == [
        "MEMORY_DECAY_TRESHOLD is not a memory-pipelines setting (ignored); did you mean MEMORY_DECAY_THRESHOLD?",
        "MEMORY_QQQQQQQQQQQQQQQQQQQQQQ is not a memory-pipelines setting (ignored)",
    ]


def test_a_secret_is_never_echoed():
    with pytest.raises(ConfigError) as caught:
        setting("MEMORY_DATABASE_URL", {"MEMORY_DATABASE_URL": "mysql://root:hunter2@db/x"})
    assert "hunter2" not in str(caught.value) and "MEMORY_DATABASE_URL=(hidden)" in str(caught.value)
    assert mask_url("postgresql://ann:hunter2@db:5432/memory") == "postgresql://ann:***@db:5432/memory"
    assert mask_url("postgresql://db/memory") == "postgresql://db/memory"


def test_settings_and_decay_settings_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMORY_TRANSCRIPTS", str(tmp_path))
    monkeypatch.setenv("MEMORY_PARTITION_START", "2025-02-01")
    monkeypatch.setenv("MEMORY_DECAY_MIN_AGE_DAYS", "30")
    monkeypatch.setenv("MEMORY_DECAY_FACTS", "1")
    settings = load()
    assert settings.transcripts == str(tmp_path) and settings.partition_start == date(2025, 2, 1)
    assert DecaySettings.from_settings(settings) == DecaySettings(min_age_days=30, decay_facts=True)
    assert DecaySettings() == DecaySettings(min_age_days=90, threshold=0.5, base_rate=0.001, decay_facts=False,
                                            pii_retention_days=180)


@pytest.mark.parametrize("text, accepted", [
    ("s3://bucket/prefix", True), ("postgresql://u@h/db?table=chat_messages", True), ("~/transcripts", True),
    ("s3:///no-bucket", False), ("postgresql://u@h/db", False), ("ftp://host/x", False),
])
def test_a_transcript_location_is_a_path_a_bucket_prefix_or_a_table(text, accepted):
    if accepted:
        assert setting("MEMORY_TRANSCRIPTS", {"MEMORY_TRANSCRIPTS": text}) == (
            str(Path(text).expanduser()) if "://" not in text else text)
    else:
        with pytest.raises(ConfigError, match="MEMORY_TRANSCRIPTS=.* is not valid: expected a file or folder path, "
                                              "s3://bucket/prefix, or postgresql://…\\?table=NAME"):
            setting("MEMORY_TRANSCRIPTS", {"MEMORY_TRANSCRIPTS": text})


def test_a_name_mapping_comes_as_pairs_or_a_yaml_file(tmp_path):
    pairs = setting("MEMORY_SOURCE_COLUMNS", {"MEMORY_SOURCE_COLUMNS": "session_id=conv,ts=created_at"})
    assert pairs == {"session_id": "conv", "ts": "created_at"}
    (tmp_path / "columns.yaml").write_text("session_id: conv\nts: created_at\n")
    assert setting("MEMORY_SOURCE_COLUMNS", {"MEMORY_SOURCE_COLUMNS": str(tmp_path / "columns.yaml")}) == pairs
    with pytest.raises(ConfigError, match="MEMORY_SOURCE_COLUMNS='speaker=who' is not valid"):
        setting("MEMORY_SOURCE_COLUMNS", {"MEMORY_SOURCE_COLUMNS": "speaker=who"})


def test_a_transcript_table_url_never_shows_its_password():
    with pytest.raises(ConfigError) as refused:
        setting("MEMORY_TRANSCRIPTS", {"MEMORY_TRANSCRIPTS": "postgresql://agent:s3cret@db/agents"})
    assert "s3cret" not in str(refused.value) and "postgresql://agent:***@db/agents" in str(refused.value)


def test_the_dask_executor_needs_a_scheduler_address():
    with pytest.raises(ConfigError, match="MEMORY_EXECUTOR=dask needs MEMORY_DASK_SCHEDULER"):
        validate_environment({"MEMORY_EXECUTOR": "dask"})
    with pytest.raises(ConfigError, match="MEMORY_DASK_SCHEDULER='127.0.0.1:8786' is not valid: expected tcp://"):
        validate_environment({"MEMORY_EXECUTOR": "dask", "MEMORY_DASK_SCHEDULER": "127.0.0.1:8786"})
    with pytest.raises(ConfigError, match="MEMORY_SHARDS='0' is not valid"):
        validate_environment({"MEMORY_SHARDS": "0"})
    assert validate_environment({"MEMORY_EXECUTOR": "dask", "MEMORY_DASK_SCHEDULER": "tcp://10.0.0.5:8786"}) == []


def test_every_onnx_precision_names_its_cache_file_and_model_id():
    """A precision without a label would fail at its first use, not at start-up."""
    from memory_pipelines.config import EMBED_PRECISIONS
    from memory_pipelines.embed.onnx_model import PRECISION_LABELS

    assert set(PRECISION_LABELS) == set(EMBED_PRECISIONS)
    assert len(set(PRECISION_LABELS.values())) == len(PRECISION_LABELS)  # no two precisions share a file
