"""Model prices (``integrations.pricing``): per million tokens, by the model's own
name or the longest name it starts with."""

from __future__ import annotations

from runstate.client.records import SpendReport
from runstate.integrations.pricing import price_of, priced

PRICES = {"gpt-4o": (2.5, 10.0), "gpt-4o-mini": (0.15, 0.6)}


def test_a_dated_snapshot_takes_the_price_of_its_model() -> None:
    """Guards the prefix match: APIs answer ``gpt-4o-mini-2024-07-18`` for the
    ``gpt-4o-mini`` asked for; an exact match alone priced it at 0."""
    assert price_of("gpt-4o-mini-2024-07-18", PRICES) == (0.15, 0.6)
    assert price_of("gpt-4o-2024-08-06", PRICES) == (2.5, 10.0)
    assert price_of("gpt-4o", PRICES) == (2.5, 10.0)


def test_an_unknown_model_costs_nothing_and_keeps_its_tokens() -> None:
    """Guards that no price is guessed."""
    assert price_of("claude-haiku", PRICES) == (0.0, 0.0)
    assert price_of(None, PRICES) == (0.0, 0.0)
    assert priced(1000, 100, "claude-haiku", PRICES) == SpendReport(1000, 100, 0, "claude-haiku")
    assert priced(1000, 100, "gpt-4o-mini-2024-07-18", PRICES).cost_micros == 210
