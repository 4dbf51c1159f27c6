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


def priced(tokens_in: int, tokens_out: int, model: str | None, prices: Prices) -> SpendReport:
    """A report of ``tokens_in`` and ``tokens_out`` spent with ``model``, its cost
    from ``prices`` (0 for a model they do not name)."""
    price_in, price_out = prices.get(model or "", (0.0, 0.0))
    cost = round(tokens_in * price_in + tokens_out * price_out)
    name = model[:MODEL_CHARS] if model and model.strip() else None
    return SpendReport(tokens_in, tokens_out, cost, name)
