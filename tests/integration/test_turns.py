"""A user's heavy work takes turns (issue 38, items 3 and 5): a query whose
estimate it paid for runs in its user's turn, and so does each page a replay
reads (``schema.turns.Turns``), so one user's heaviest reads or replays sent
together cost another user at most one of them at a time. In process, with the
user's turn held by the test."""

from __future__ import annotations

import asyncio
from pathlib import Path

from runstate.models import Task
from runstate.resolvers.build import build_schema
from runstate.schema.context import Context
from runstate.schema.turns import Turns
from runstate.services.actions import sessions, tasks
from runstate.services.actions.tokens import Principal
from runstate.services.domain.events import TaskRef
from runstate.services.domain.ratelimit import MemoryRateLimiter
from runstate.services.domain.validation import StepPlan
from runstate.services.live import streams
from runstate.services.write.house import House
from runstate.settings import Settings
from tests.support import opened, settled

BIG = "x" * 60_000
"""A step input: three of them are an estimate past 128 KiB, a point's worth."""


def caller(house: House, user: str, replays: Turns | None = None) -> Context:
    """A request's context for ``user``, with a budget larger than these tests spend."""
    return Context(
        principal=Principal(user, "digest"),
        settings=Settings(),
        house=house,
        limiter=MemoryRateLimiter(per_second=1000, burst=100_000),
        replays=replays or Turns(),
    )


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
    async with opened(f"sqlite://{tmp_path / 'turns.db'}") as house:
        for user in ("hog", "other"):
            await fat_task(house, user)

        def context(user: str) -> Context:
            return caller(house, user)

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


async def test_a_users_replays_read_their_pages_in_turn(tmp_path: Path) -> None:
    """Guards ``Context.replaying`` (issue 38, item 3: a user's concurrent replays
    bounded): while the replayer's turn is held, its replay reads no page and sends
    nothing, queued, and sends every event once the turn is let go; another user's
    replay goes on meanwhile."""
    turns = Turns()
    async with opened(f"sqlite://{tmp_path / 'replays.db'}") as house:
        for user in ("replayer", "other"):
            await fat_task(house, user)

        def context(user: str) -> Context:
            return caller(house, user, replays=turns)

        async def replay(user: str) -> list[int]:
            ref = TaskRef(*await task_keys(house, user))
            found = streams.stored_events(ref, 0, head=1, pay=context(user).replaying)
            return [event.seq async for event in found]

        async with turns.turn("replayer"):
            assert await replay("other") == [1]
            waiting = asyncio.create_task(replay("replayer"))
            await settled(lambda: turns.queued("replayer") == 2, "the replay to wait its turn")
            assert not waiting.done()
        assert await asyncio.wait_for(waiting, 30) == [1]
    assert turns.queued("replayer") == 0


async def task_keys(house: House, user: str) -> tuple[int, str, int]:
    """The row id, id and session row id of the user's task ``fat-<user>``."""
    row = await Task.get(public_id=f"fat-{user}")
    return row.id, row.public_id, row.session_id
