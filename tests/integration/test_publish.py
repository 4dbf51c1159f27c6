"""A write's events are published once its outermost transaction has committed,
by the owner of that transaction (``idempotency.once``), through its house."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runstate.services.actions import sessions, tasks
from runstate.services.domain.validation import StepPlan
from runstate.services.domain.views import TaskView, Written
from runstate.services.live.messages import task_channel
from runstate.services.write import idempotency
from runstate.services.write.house import House
from tests.support import opened

USER = "publisher"


@pytest.fixture
async def house(tmp_path: Path) -> AsyncIterator[House]:
    async with opened(f"sqlite://{tmp_path / 'publish.db'}", live=True) as house:
        yield house


async def test_a_write_whose_caller_left_is_still_published(house: House) -> None:
    """Guards the publishing in ``idempotency.once``'s shielded work: a keyed write
    whose caller is cancelled while it runs (its client left) commits, and its
    event still reaches the broker. Seen failing with the events published by the
    caller after ``once`` returned (the cancelled caller never gets there)."""
    session = await sessions.start_session(house, USER, default_ttl=3600)
    task = (await tasks.create_task(house, USER, session.id, goal="g", steps=[StepPlan("a")])).value
    begun = asyncio.Event()

    async def write() -> Written[TaskView]:
        begun.set()
        return await tasks.start_step(house, USER, task.id, 0, expected_version=1)

    call = idempotency.keyed(USER, "left", "startStep", {"taskId": task.id})
    async with house.broker.subscription([task_channel(task.pk)]) as inbox:
        caller = asyncio.ensure_future(idempotency.once(house, call, 60, TaskView, write))
        await begun.wait()
        caller.cancel()
        message = await inbox.next(10)
        assert isinstance(message, bytes), message
        event = house.decoded(message)
        assert event is not None
        assert (event.task_id, event.seq, event.kind.value) == (task.id, 2, "STEP_STARTED")
    assert caller.cancelled()
