"""User shards: a user's shard is a stable hash of `user_id`, the same in Python and in SQL
(`memory_shard(user_id, shards)`, migration 0024), so a shard's run reads and writes only its
own users' rows and never waits on another shard."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


def shard_of(user_id: str, shards: int) -> int:
    """The shard of `user_id` among `shards`: the first 32 bits of its md5, modulo."""
    if shards <= 1:
        return 0
    return int(hashlib.md5(user_id.encode("utf-8")).hexdigest()[:8], 16) % shards


@dataclass(frozen=True)
class Shard:
    """One shard of `count` (the default: every user, the unsharded pipeline)."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index} does not exist among {self.count}")

    @property
    def params(self) -> dict[str, int]:
        """What a query's shard predicate binds: `memory_shard(user_id, %(shards)s) = %(shard)s`."""
        return {"shard": self.index, "shards": self.count}

    def holds(self, user_id: str) -> bool:
        return shard_of(user_id, self.count) == self.index

    @property
    def label(self) -> str:
        return "" if self.count == 1 else f"shard {self.index}/{self.count}"


ALL_USERS = Shard()


class ShardLayoutMismatch(RuntimeError):
    """MEMORY_SHARDS is not the shard count the database is distilled with."""

    def __init__(self, stored: int, configured: int):
        self.stored, self.configured = stored, configured
        super().__init__(
            f"MEMORY_SHARDS is {configured} but this database is distilled with {stored} shard(s): set "
            f"MEMORY_SHARDS={stored}, or once no run is in progress run `memory-pipelines reshard --shards "
            f"{configured}` (docs/operations.md, Shards)")
