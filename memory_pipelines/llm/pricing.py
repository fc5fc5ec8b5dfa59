"""The price table: what a model's tokens cost, for the estimated cost of every call.

A JSON file named by `MEMORY_PRICE_TABLE` maps a model to its prices in US dollars per
million tokens, keyed `backend/model` (wins) or just `model`:

    {"openai/gpt-4o-mini": {"input_usd_per_mtok": 0.15, "output_usd_per_mtok": 0.60},
     "llama3.1:8b": {"input_usd_per_mtok": 0, "output_usd_per_mtok": 0}}

The `rules` back end is free. A model the table does not name has no estimate (its calls
are counted as unpriced), never a guessed price. `SAMPLE_PRICE_TABLE` is such a file with a
few published list prices, for `bench cost`'s estimates when no table is given.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from memory_pipelines.config import ConfigError


@dataclass(frozen=True)
class Price:
    input_usd_per_mtok: float
    output_usd_per_mtok: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_usd_per_mtok + output_tokens * self.output_usd_per_mtok) / 1_000_000


FREE = Price(0.0, 0.0)
SAMPLE_PRICE_TABLE = Path(__file__).with_name("sample_price_table.json")


def load_price_table(path: Path) -> dict[str, Price]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"MEMORY_PRICE_TABLE {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"MEMORY_PRICE_TABLE {path}: expected an object of model -> prices")
    table = {}
    for model, entry in data.items():
        try:
            price = Price(float(entry["input_usd_per_mtok"]), float(entry["output_usd_per_mtok"]))
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"MEMORY_PRICE_TABLE {path}: {model!r} needs numeric input_usd_per_mtok and "
                              "output_usd_per_mtok") from None
        if price.input_usd_per_mtok < 0 or price.output_usd_per_mtok < 0:
            raise ConfigError(f"MEMORY_PRICE_TABLE {path}: {model!r} has a negative price")
        table[model] = price
    return table


def price_for(backend: str, model: str, table: dict[str, Price]) -> Price | None:
    if backend == "rules":
        return FREE
    return table.get(f"{backend}/{model}", table.get(model))


def configured_price(table: Path | None, backend: str, model: str) -> Price | None:
    """A model's price in the table at `table` (MEMORY_PRICE_TABLE; None: not priced)."""
    return price_for(backend, model, load_price_table(table) if table else {})


def bench_price_table(table: Path | None) -> Path:
    """The prices `bench cost` estimates at: MEMORY_PRICE_TABLE's, else the sample table's."""
    return table or SAMPLE_PRICE_TABLE
