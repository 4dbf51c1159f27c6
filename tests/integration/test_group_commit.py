"""Group commit on SQLite (in-process): writes that arrive together share one
transaction and one COMMIT, and a refused one among them rolls back only itself."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from pathlib import Path

import pytest

from runstate.basics.enums import TaskStatus
from runstate.services.actions import sessions, tasks
from runstate.services.domain.errors import InvalidInputError, VersionConflictError
from runstate.services.domain.validation import StepPlan
from runstate.services.domain.views import TaskView
from runstate.services.read import lookups
from runstate.services.write import idempotency
from runstate.services.write.house import House
from tests.integration.test_write_cost import Statements
from tests.support import opened

USER = "grouper"
WRITERS = 16


@pytest.fixture
async def house(tmp_path: Path) -> AsyncIterator[House]:
    async with opened(f"sqlite://{tmp_path / 'group.db'}") as house:
        yield house


async def new_tasks(house: House, count: int) -> list[str]:
    session = await sessions.start_session(house, USER, default_ttl=3600)
    plan = [StepPlan("a"), StepPlan("b")]
    return [
        (await tasks.create_task(house, USER, session.id, goal="g", steps=plan)).value.id
        for _ in range(count)
    ]


def commits(statements: Statements) -> int:
    return sum(s.startswith("COMMIT") for s in statements.seen)


async def test_writes_that_arrive_together_share_one_commit(house: House) -> None:
    """Guards ``group_commit.Group``: 16 concurrent step writes run in one transaction with
    one COMMIT, and every one of them is stored. The control: the same writes one
    after the other take a COMMIT each (without grouping, so would concurrent ones)."""
    ids = await new_tasks(house, 2 * WRITERS)
    together, apart = ids[:WRITERS], ids[WRITERS:]
    before = house.group.transactions
    async with Statements() as grouped:
        await asyncio.gather(
            *(tasks.start_step(house, USER, i, 0, expected_version=1) for i in together)
        )
    assert (commits(grouped), house.group.transactions - before) == (1, 1)
    async with Statements() as one_by_one:
        for task_id in apart:
            await tasks.start_step(house, USER, task_id, 0, expected_version=1)
    assert commits(one_by_one) == WRITERS
    for task_id in ids:
        task = await lookups.get_task(USER, task_id)
        assert (task.version, task.event_seq) == (2, 2)


async def test_a_refused_write_rolls_back_only_itself(house: House) -> None:
    """Guards the savepoint of each write in a shared transaction: of 8 writes sent
    together, a stale version and a step that does not exist are refused with their own
    errors and leave their tasks as they were (the missing step's write had already
    raised its task's version when it was refused); the 6 others are stored."""
    ids = await new_tasks(house, 8)
    stale, impossible, fine = ids[0], ids[1], ids[2:]
    before = house.group.transactions
    results = await asyncio.gather(
        tasks.start_step(house, USER, stale, 0, expected_version=7),
        tasks.start_step(house, USER, impossible, 5, expected_version=1),  # no step 5
        *(tasks.start_step(house, USER, i, 0, expected_version=1) for i in fine),
        return_exceptions=True,
    )
    assert house.group.transactions - before == 1
    assert isinstance(results[0], VersionConflictError)
    assert isinstance(results[1], InvalidInputError)
    for task_id in (stale, impossible):
        task = await lookups.get_task(USER, task_id)
        assert (task.version, task.event_seq) == (1, 1)
    for task_id in fine:
        task = await lookups.get_task(USER, task_id)
        assert (task.version, task.event_seq) == (2, 2)
        assert task.status is TaskStatus.RUNNING


async def test_keyed_writes_share_a_commit_and_a_key_writes_once(house: House) -> None:
    """Guards the idempotency key's transaction going through the group (the SDK
    sends a key with every write): 16 keyed writes sent together share COMMITs (each
    first looks its key up, so they reach the group a few at a time: one or two
    transactions here, sixteen without the group), and two calls with one key among
    them answer alike and write once."""
    ids = await new_tasks(house, WRITERS)

    def call(task_id: str, key: str) -> Awaitable[TaskView]:
        keyed = idempotency.keyed(USER, key, "startStep", {"taskId": task_id})
        return idempotency.once(
            house,
            keyed,
            60,
            TaskView,
            lambda: tasks.start_step(house, USER, task_id, 0, expected_version=1),
        )

    async with Statements() as statements:
        answers = await asyncio.gather(
            *(call(task_id, f"key-{task_id}") for task_id in ids),
            call(ids[0], f"key-{ids[0]}"),
        )
    assert commits(statements) <= WRITERS // 4
    # A replay answers from taskAt, with the steps it read; the first call's answer
    # leaves them to be read when selected.
    first, repeat = (replace(a, steps=None, tool_states=None) for a in (answers[0], answers[-1]))
    assert first == repeat
    for task_id in ids:
        task = await lookups.get_task(USER, task_id)
        assert (task.version, task.event_seq) == (2, 2)
