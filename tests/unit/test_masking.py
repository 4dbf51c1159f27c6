"""Unexpected failures reach clients as "Unexpected error.", in answers and in
subscription messages alike (``MaskUnexpectedErrors``)."""

from __future__ import annotations

from runstate.schema.build import schema


async def test_an_unexpected_error_is_masked_in_an_answer() -> None:
    """A resolver that fails (here: no context at all) answers with the masked
    message, never the exception's own text."""
    result = await schema.execute("{ sessions { edges { cursor } } }", context_value=None)
    assert result.errors is not None
    assert [e.message for e in result.errors] == ["Unexpected error."]


async def test_an_unexpected_error_is_masked_in_a_subscription() -> None:
    stream = await schema.subscribe(
        'subscription { taskProgress(taskId: "t") { seq } }', context_value=None
    )
    assert not hasattr(stream, "errors")
    first = await anext(stream)
    assert first.errors is not None
    assert [e.message for e in first.errors] == ["Unexpected error."]
