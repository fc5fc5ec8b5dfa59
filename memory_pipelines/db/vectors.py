"""Embeddings on the wire: every numpy array a statement binds or a COPY writes goes to the
server as pgvector's `halfvec`, the type every embedding is stored and compared as
(migration 0025). The embedded server's float `vector` functions run AVX-512 instructions
and kill the backend on a CPU without them; a numpy array bound as pgvector-python's
default `vector` would reach them. Reading back, a halfvec column gives a `HalfVector`
(`.to_numpy()` is float16)."""

from __future__ import annotations

from typing import Any

import psycopg
from pgvector import HalfVector
from pgvector.psycopg import register_vector
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.types import TypeInfo


class _HalfvecTextDumper(Dumper):
    format = Format.TEXT

    def dump(self, obj: Any) -> bytes:
        return (obj if isinstance(obj, HalfVector) else HalfVector(obj)).to_text().encode()


class _HalfvecBinaryDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        return (obj if isinstance(obj, HalfVector) else HalfVector(obj)).to_binary()


def register_vector_types(conn: psycopg.Connection) -> None:
    """pgvector's types on `conn`, with numpy arrays dumped as halfvec (also for a COPY
    whose column type is set to "halfvec")."""
    register_vector(conn)
    info = TypeInfo.fetch(conn, "halfvec")
    for base in (_HalfvecTextDumper, _HalfvecBinaryDumper):
        dumper = type(base.__name__, (base,), {"oid": info.oid})
        conn.adapters.register_dumper("numpy.ndarray", dumper)
        conn.adapters.register_dumper(HalfVector, dumper)
