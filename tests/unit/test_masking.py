"""Unexpected failures reach clients as "Unexpected error.", in answers and in
subscription messages alike (``MaskUnexpectedErrors``)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tortoise.backends.base.executor import EXECUTOR_CACHE

from runstate.resolvers.build import build_schema
from runstate.schema.context import Context
from runstate.services.actions.tokens import Principal
from runstate.services.write.house import House
from runstate.settings import Settings
from runstate.storage.database import open_database

schema = build_schema()


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


async def test_only_unexpected_errors_are_logged(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """Guards ``Schema.process_errors``: a refusal the client caused (a syntax error, a
    page too large) leaves nothing in the log, while an unexpected failure is logged
    with its traceback."""
    EXECUTOR_CACHE.clear()
    database = await open_database(f"sqlite://{tmp_path / 'log.db'}")
    try:
        context = Context(principal=Principal("u", "d"), settings=Settings(), house=House())
        with caplog.at_level(logging.ERROR):
            await schema.execute("{ sessions { ", context_value=context)
            await schema.execute(
                "{ sessions(first: 101) { edges { cursor } } }", context_value=context
            )
        assert caplog.records == []
        with caplog.at_level(logging.ERROR):
            await schema.execute("{ sessions { edges { cursor } } }", context_value=None)
        assert [r.exc_info is not None for r in caplog.records] == [True]
    finally:
        await database.close()
