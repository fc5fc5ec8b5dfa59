"""The sha256 of a value's JSON text: the digests rows keep to tell what changed since they
were written (content hashes, fingerprints, source hashes).

The text hashed is exactly `json.dumps(value, **options)`'s, so stored digests stay valid.
What differs is the cost: `json.dumps` given any option builds a new encoder on every call,
which is half the time of a short row's digest; here the encoder of each set of options is
built once per process."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import lru_cache
from json.encoder import c_make_encoder, encode_basestring, encode_basestring_ascii

COMPACT = (",", ":")


def json_digest(value: object, *, sort_keys: bool = False, ensure_ascii: bool = True,
                separators: tuple[str, str] = (", ", ": "), default: Callable[[object], object] | None = None) -> str:
    """The hex sha256 of `json.dumps(value, sort_keys=..., ensure_ascii=..., separators=..., default=...)`
    encoded as UTF-8."""
    return hashlib.sha256(_encoder(sort_keys, ensure_ascii, separators, default)(value).encode()).hexdigest()


@lru_cache(maxsize=None)
def _encoder(sort_keys: bool, ensure_ascii: bool, separators: tuple[str, str],
             default: Callable[[object], object] | None) -> Callable[[object], str]:
    encoder = json.JSONEncoder(sort_keys=sort_keys, ensure_ascii=ensure_ascii, separators=separators,
                               default=default)
    if c_make_encoder is None:  # an interpreter without the C accelerator
        return encoder.encode
    # what JSONEncoder.iterencode builds on each call, built once (no circular-reference
    # check: a digest's value is a tree of plain values)
    item_separator, key_separator = separators
    encode = c_make_encoder(None, encoder.default, encode_basestring_ascii if ensure_ascii else encode_basestring,
                            None, key_separator, item_separator, sort_keys, False, True)
    return lambda value: "".join(encode(value, 0))
