"""The hashing embedder's definition: each word and each 3-gram of `<word>` hashed into a
signed bucket (words 1.0, 3-grams 0.5), the sum normalized to unit length."""

import hashlib
import math

from memory_pipelines.embed import EmbedConfig, HashingEmbedder


def _by_definition(features: list[tuple[str, float]], dimension: int) -> list[float]:
    vector = [0.0] * dimension
    for feature, weight in features:
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        vector[int.from_bytes(digest[:4], "little") % dimension] += weight if digest[4] & 1 else -weight
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector]


def test_a_text_embeds_to_its_words_and_trigrams_in_order_and_repeats_are_the_same():
    embedder = HashingEmbedder(EmbedConfig(backend="hashing", dimension=64))
    # NFKC folds the ligature and casefold the capitals: the words are file, go, file
    features = [("w:file", 1.0), ("w:go", 1.0), ("w:file", 1.0)]
    features += [(f"g:{g}", 0.5) for g in ("<fi", "fil", "ile", "le>", "<go", "go>", "<fi", "fil", "ile", "le>")]
    first, again = embedder.embed(["ﬁle GO, File", "ﬁle GO, File"])
    assert first.tolist() == again.tolist() == _by_definition(features, 64)
    assert embedder.embed(["  "]).tolist() == [[0.0] * 64]  # no words: the zero vector, not a division by zero


def test_a_repeated_text_is_embedded_once_batches_go_by_length_and_rows_keep_their_order():
    class Counted(HashingEmbedder):
        def __init__(self, config):
            super().__init__(config)
            self.batches: list[list[str]] = []

        def _embed_batch(self, texts):
            self.batches.append(list(texts))
            return super()._embed_batch(texts)

    embedder = Counted(EmbedConfig(backend="hashing", dimension=64, batch_size=2))
    texts = ["a much longer text than the others", "ok", "ok thanks", "ok", "a much longer text than the others"]
    rows = embedder.embed(texts)
    assert embedder.batches == [["ok", "ok thanks"], ["a much longer text than the others"]]
    alone = [HashingEmbedder(EmbedConfig(backend="hashing", dimension=64)).embed([t])[0].tolist() for t in texts]
    assert rows.tolist() == alone
    assert embedder.embed([]).shape == (0, 64)


def test_a_batch_embeds_each_text_as_alone_blank_ones_among_them():
    embedder = HashingEmbedder(EmbedConfig(backend="hashing", dimension=64, batch_size=8))
    texts = ["deploy ledger-api", "   ", "port 9090 ok", "", "deploy"]
    alone = [embedder.embed([t])[0].tolist() for t in texts]
    assert embedder.embed(texts).tolist() == alone
    assert alone[1] == alone[3] == [0.0] * 64 and alone[0] != alone[4]
