"""Model prices, for the integrations that report what an agent's model calls
spent (``RunstateSaver(prices=...)``, ``RunstateSession(prices=...)``).

Runstate guesses no price: a model the table does not name costs 0, and its
tokens are recorded all the same.
"""

from __future__ import annotations

from collections.abc import Mapping

from runstate.client.records import SpendReport

Prices = Mapping[str, tuple[float, float]]
"""Per model name: its price in the server's currency per million input tokens and
per million output tokens (which is its price in millionths per token)."""

MODEL_CHARS = 200
"""The longest model name a report may give (the server's limit)."""


def price_of(model: str | None, prices: Prices) -> tuple[float, float]:
    """The price of ``model``: its own, else that of the longest name it starts
    with (APIs answer a dated snapshot, ``gpt-4o-mini-2024-07-18``, for the
    ``gpt-4o-mini`` asked for), else 0."""
    if not model:
        return (0.0, 0.0)
    if model in prices:
        return prices[model]
    named = [name for name in prices if name and model.startswith(name)]
    return prices[max(named, key=len)] if named else (0.0, 0.0)


def priced(tokens_in: int, tokens_out: int, model: str | None, prices: Prices) -> SpendReport:
    """A report of ``tokens_in`` and ``tokens_out`` spent with ``model``, its cost
    from ``prices`` (``price_of``)."""
    price_in, price_out = price_of(model, prices)
    cost = round(tokens_in * price_in + tokens_out * price_out)
    name = model[:MODEL_CHARS] if model and model.strip() else None
    return SpendReport(tokens_in, tokens_out, cost, name)
