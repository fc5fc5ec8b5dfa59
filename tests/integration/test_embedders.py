"""Embedders: the hashing one in-process, Ollama and OpenAI against a real HTTP server."""

from __future__ import annotations

import numpy as np
import pytest

from memory_pipelines.config import load
from memory_pipelines.embed import EmbedConfig, EmbeddingError, build_embedder, embed_config
from memory_pipelines.embed.embedders import default_embedder_note, local_available
from tests.fakes import FakeModelServer, Fault


def test_hashing_is_deterministic_unit_norm_and_lexical():
    embedder = build_embedder(EmbedConfig())
    a, b, c = np.array(embedder.embed(["server port 9090", "which port does the server use", "pandas decimal"]))
    assert embedder.dimension == 384 and embedder.model_id == "hashing:hashing-v1:384"
    assert np.allclose([np.linalg.norm(a), np.linalg.norm(b)], 1.0)
    assert a @ b > a @ c + 0.3
    assert np.allclose(a, build_embedder(EmbedConfig()).embed(["server port 9090"])[0])
    assert len(build_embedder(EmbedConfig(dimension=64)).embed(["x"])[0]) == 64


@pytest.fixture
def server():
    fake = FakeModelServer(dimension=12)
    yield fake
    fake.close()


@pytest.mark.parametrize("kind, path", [("ollama", "/api/embed"), ("openai", "/v1/embeddings")])
def test_remote_embedders_batch_and_keep_order(kind, path, server):
    base = server.url + ("/v1" if kind == "openai" else "")
    embedder = build_embedder(EmbedConfig(backend=kind, base_url=base, model="embed-m", batch_size=3, retries=1,
                                          backoff_s=0))
    texts = [f"text number {i}" for i in range(7)]
    vectors = embedder.embed(texts)
    assert [r.path for r in server.requests] == [path] * 3  # 3 + 3 + 1
    assert embedder.dimension == 12 and embedder.model_id == f"{kind}:embed-m:12"
    expected = [np.array(server.vector(t)) / np.linalg.norm(server.vector(t)) for t in texts]
    assert np.allclose(vectors, expected)  # the OpenAI reply came back in reverse index order


def test_retries_and_errors(server):
    server.fail = lambda request, number: Fault(status=503) if number == 1 else None
    embedder = build_embedder(EmbedConfig(backend="ollama", base_url=server.url, model="m", retries=2, backoff_s=0))
    assert len(embedder.embed(["a"])) == 1 and len(server.requests) == 2
    server.fail = lambda request, number: Fault(status=400)
    with pytest.raises(EmbeddingError, match="400"):
        embedder.embed(["b"])
    server.fail = lambda request, number: Fault(garbage=True)
    with pytest.raises(EmbeddingError, match="vectors for a batch"):
        embedder.embed(["c", "d"])


def test_a_model_returning_another_dimension_is_refused(server):
    embedder = build_embedder(EmbedConfig(backend="ollama", base_url=server.url, model="m", dimension=768))
    with pytest.raises(EmbeddingError, match="expected 768"):
        embedder.embed(["a"])


def test_configuration(monkeypatch):
    monkeypatch.delenv("MEMORY_EMBED_BACKEND", raising=False)
    if not local_available():
        assert embed_config(load()).backend == "hashing"  # the default without the local extra
    monkeypatch.setenv("MEMORY_EMBED_BACKEND", "ollama")
    monkeypatch.setenv("MEMORY_LLM_BACKEND", "ollama")
    monkeypatch.setenv("MEMORY_LLM_BASE_URL", "http://127.0.0.1:9999")
    config = embed_config(load())
    assert (config.base_url, config.model, config.batch_size) == ("http://127.0.0.1:9999", "nomic-embed-text", 8)
    monkeypatch.setenv("MEMORY_EMBED_BASE_URL", "http://127.0.0.1:7777/")
    monkeypatch.setenv("MEMORY_EMBED_BATCH", "32")
    assert (embed_config(load()).base_url, embed_config(load()).batch_size) == ("http://127.0.0.1:7777", 32)
    monkeypatch.setenv("MEMORY_EMBED_BACKEND", "word2vec")
    with pytest.raises(ValueError, match="MEMORY_EMBED_BACKEND='word2vec' is not valid: expected one of ollama"):
        embed_config(load())


def test_local_embedder_loads_offline_and_is_semantic(monkeypatch):
    pytest.importorskip("sentence_transformers", reason="needs the 'local' extra (the CI test command installs it)")
    monkeypatch.delenv("MEMORY_EMBED_BACKEND", raising=False)
    # the default once installed is onnx (the same MiniLM, exported: test_onnx_embedder)
    assert local_available() and embed_config(load()).backend == "onnx"
    assert default_embedder_note(load()) == ("onnx, MiniLM at MEMORY_EMBED_PRECISION=mixed (MEMORY_EMBED_BACKEND "
                                             "unset: the 'local' extra is installed)")
    embedder = build_embedder(EmbedConfig(backend="local", model="all-MiniLM-L6-v2", batch_size=16))
    assert embedder.dimension == 384 and embedder.model_id == "local:all-MiniLM-L6-v2:384"
    query, port, pandas = np.array(embedder.embed([
        "how do I change the port my web server listens on?",
        "switch ledger-api to port 9090 from now on",
        "pandas reads the decimal comma as text",
    ]))
    assert query @ port > query @ pandas + 0.15
    # word pieces as the model reads them: more than the words, cut at its longest input (bench distill's tokens/s)
    assert 9 < embedder.count_tokens(["switch ledger-api to port 9090 from now on"]) <= 20
    assert embedder.count_tokens(["word " * 1000]) == embedder._model.max_seq_length
    assert embedder.uses_every_core and not build_embedder(EmbedConfig()).uses_every_core
    import os

    assert os.environ["HF_HUB_OFFLINE"] == "1"
