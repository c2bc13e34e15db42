"""Turn reported token counts into dollars with a user-editable price table.

The table is TOML (``prices.toml`` next to this module, or a file the user
names, which replaces it): ``[models."<name>"]`` with ``input`` and ``output``
in USD per million tokens.  Token counts always come from the provider; this
module only multiplies.  An unknown model costs ``None``, never a guess.
"""

from __future__ import annotations

import logging
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tik_agent.errors import UsageError

log = logging.getLogger(__name__)

BUNDLED_PRICES = Path(__file__).with_name("prices.toml")

# "-20250929" or "-2025-04-14": provider snapshot suffixes priced like the alias.
_DATE_SUFFIX = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")


@dataclass(frozen=True)
class ModelPrice:
    """USD per million input and output tokens."""

    input: float
    output: float

    def __post_init__(self) -> None:
        for name in ("input", "output"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}: {value!r} is not a non-negative price")


@dataclass(frozen=True)
class PriceTable:
    """Prices per model name; :meth:`cost` is None for models it does not know."""

    prices: Mapping[str, ModelPrice]
    source: str = "<memory>"

    @classmethod
    def load(cls, path: Path | None = None) -> PriceTable:
        """Read ``path``, or the bundled table when ``path`` is None."""
        path = path or BUNDLED_PRICES
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UsageError(f"price table {path}: file not found") from None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise UsageError(f"price table {path}: {err}") from None
        models = data.get("models", {})
        if not isinstance(models, dict):
            raise UsageError(f"price table {path}: models: expected a table")
        prices: dict[str, ModelPrice] = {}
        for name, entry in models.items():
            where = f"price table {path}: models.{name!r}"
            if not isinstance(entry, dict) or set(entry) != {"input", "output"}:
                raise UsageError(f"{where}: expected exactly the keys 'input' and 'output'")
            try:
                prices[name] = ModelPrice(float(entry["input"]), float(entry["output"]))
            except (TypeError, ValueError) as err:
                raise UsageError(f"{where}: {err}") from None
        return cls(prices, source=str(path))

    def price_of(self, model: str | None) -> ModelPrice | None:
        if model is None:
            return None
        if model in self.prices:
            return self.prices[model]
        return self.prices.get(_DATE_SUFFIX.sub("", model))

    def cost(self, model: str | None, input_tokens: int, output_tokens: int) -> float | None:
        """USD for one call, or None when the model has no price here."""
        price = self.price_of(model)
        if price is None:
            return None
        return (input_tokens * price.input + output_tokens * price.output) / 1_000_000
