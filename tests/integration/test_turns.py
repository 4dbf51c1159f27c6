"""A user's heavy reads take turns (issue 38, item 5): a query whose estimate it
paid for runs in its user's turn (``schema.bounds.Turns``), so one user's
heaviest reads sent together cost another user at most one of them at a time.
In process, through the schema, with the user's turn held by the test."""

from __future__ import annotations

import asyncio
from pathlib import Path

from runstate.api import build_schema
from runstate.auth import Principal
from runstate.ratelimit import MemoryRateLimiter
from runstate.schema.bounds import Turns
from runstate.schema.context import Context
from runstate.services import sessions, tasks
from runstate.services.house import House
from runstate.services.validation import StepPlan
from runstate.settings import Settings
from tests.support import opened, settled

BIG = "x" * 60_000
"""A step input: three of them are an estimate past 128 KiB, a point's worth."""


def heavy(user: str) -> str:
    return f'{{ task(id: "fat-{user}") {{ ... on Task {{ steps {{ input }} }} }} }}'


async def fat_task(house: House, user: str) -> None:
    await sessions.start_session(house, user, default_ttl=3600, session_id=f"s-{user}")
    plans = [StepPlan("read", input=BIG) for _ in range(3)]
    await tasks.create_task(house, user, f"s-{user}", goal="g", steps=plans, task_id=f"fat-{user}")


async def test_a_users_heavy_reads_wait_for_its_turn_and_others_do_not(tmp_path: Path) -> None:
    """Guards ``Turns`` in ``BoundedAnswers``: while the hog's turn is held (a heavy
    read of its under way), its next heavy read waits, queued, and runs once the
    turn is let go; meanwhile another user's heavy read and the hog's own light
    read (no estimate to pay) run at once. (Eight 30 MB reads of one user ran side
    by side: another user's p99 was 5.54 s.)"""
    turns = Turns()
    schema = build_schema(Settings(), turns=turns)
    limiter = MemoryRateLimiter(per_second=1000, burst=100_000)
    async with opened(f"sqlite://{tmp_path / 'turns.db'}") as house:
        for user in ("hog", "other"):
            await fat_task(house, user)

        def context(user: str) -> Context:
            principal = Principal(user, "digest")
            return Context(principal=principal, settings=Settings(), house=house, limiter=limiter)

        async with turns.turn("hog"):
            other = await schema.execute(heavy("other"), context_value=context("other"))
            assert other.errors is None
            light = '{ task(id: "fat-hog") { ... on Task { version } } }'
            mine = await schema.execute(light, context_value=context("hog"))
            assert mine.errors is None
            waiting = asyncio.create_task(
                schema.execute(heavy("hog"), context_value=context("hog"))
            )
            await settled(lambda: turns.queued("hog") == 2, "the hog's read to wait its turn")
            assert not waiting.done()
        result = await asyncio.wait_for(waiting, 30)
        assert result.errors is None
        assert result.data is not None
        assert [s["input"] for s in result.data["task"]["steps"]] == [BIG] * 3
    assert turns.queued("hog") == 0
