"""Idle costs little: quiet live streams share one head check per interval, and a
session's catch-up reads only the tasks changed lately.

Counted in database statements (SQLite's trace hook), not in time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tortoise import connections

from runstate.pubsub import RESYNC
from runstate.pubsub.broker import Subscription
from runstate.services.actions import sessions, tasks
from runstate.services.domain.validation import StepPlan
from runstate.services.live import streams
from runstate.services.live.catch_up import Heads, Watch
from runstate.services.write.house import House
from tests.integration.test_write_cost import Statements
from tests.support import opened

USER = "idler"
INTERVAL = 0.05
STREAMS = 2000
TASKS = 20


@pytest.fixture
async def house(tmp_path: Path) -> AsyncIterator[House]:
    async with opened(f"sqlite://{tmp_path / 'idle.db'}", live=True) as house:
        yield house


async def wait_for_rounds(house: House, rounds: int) -> None:
    """Until the house's head checks have run ``rounds`` more."""
    target = house.heads.rounds + rounds
    async with asyncio.timeout(60):
        while house.heads.rounds < target:  # noqa: ASYNC110 - a poll, with a deadline, of a counter
            await asyncio.sleep(INTERVAL / 2)


async def test_2000_idle_streams_cost_one_statement_per_interval(house: House) -> None:
    """Guards the shared head check: 2,000 quiet taskProgress streams over 20 tasks
    run exactly one SELECT per check between them (each stream used to run its own,
    2,000 per interval), and a write still reaches every one of them."""
    session = await sessions.start_session(house, USER, default_ttl=3600)
    ids = [
        (
            (
                await tasks.create_task(house, USER, session.id, goal="g", steps=[StepPlan("a")])
            ).value
        ).id
        for _ in range(TASKS)
    ]
    watching = [
        streams.task_progress(house, USER, ids[i % TASKS], None, interval=INTERVAL)
        for i in range(STREAMS)
    ]
    for stream in watching:
        assert (await anext(stream)).kind.value == "SNAPSHOT"
    pending = [asyncio.ensure_future(anext(stream)) for stream in watching]
    await wait_for_rounds(house, 1)
    async with Statements() as statements:
        before = house.heads.rounds
        await wait_for_rounds(house, 10)
        rounds = house.heads.rounds - before
    selects = [s for s in statements.seen if s.startswith("SELECT")]
    assert len(selects) in (rounds - 1, rounds, rounds + 1)  # a round may straddle an edge
    assert all('FROM "tasks"' in s for s in selects)
    started = await tasks.start_step(house, USER, ids[0], 0, expected_version=1)
    house.publish(started.events)
    woken = await asyncio.gather(*pending[::TASKS])  # the streams of the first task
    assert {event.seq for event in woken} == {2}
    for future in pending:
        future.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for stream in watching:
        await stream.aclose()


async def test_a_session_catch_up_reads_only_tasks_changed_lately(house: House) -> None:
    """Guards sessionActivity's catch-up: a write the broker never carried (never
    published here) reaches a quiet stream through the head checks, and the
    catch-up asks only for tasks updated since the last one, by the (session_id,
    updated_at) index, never for all 300 tasks of the session."""
    session = await sessions.start_session(house, USER, default_ttl=3600)
    ids = [
        (
            (
                await tasks.create_task(house, USER, session.id, goal="g", steps=[StepPlan("a")])
            ).value
        ).id
        for _ in range(300)
    ]
    stream = streams.session_activity(house, USER, session.id, interval=INTERVAL)
    waiting = asyncio.ensure_future(anext(stream))
    await wait_for_rounds(house, 1)
    # Committed, its events never published: as if the broker lost them.
    await tasks.start_step(house, USER, ids[7], 0, expected_version=1)
    async with Statements() as statements:
        event = await asyncio.wait_for(waiting, 30)
    assert (event.task_id, event.seq) == (ids[7], 2)
    catch_up = [
        s
        for s in statements.seen
        if s.startswith("SELECT") and '"public_id"' in s and 'FROM "tasks"' in s
    ]
    assert len(catch_up) == 1
    assert '"updated_at">=' in catch_up[0]
    _, plan = await connections.get("default").execute_query(f"EXPLAIN QUERY PLAN {catch_up[0]}")
    assert any("USING INDEX tasks_session_updated" in str(row[-1]) for row in plan), plan
    await stream.aclose()


async def test_the_head_check_leaves_a_stream_an_interval_to_hear_an_event(house: House) -> None:
    """Guards ``Heads.check``'s grace: a stream short of an event committed since the
    previous check is not flagged (the event is on its way; flagging it sent every
    watcher of a busy task to the database at each check), one still short of it a
    check later is. The control: a stream that heard it in between is never flagged."""
    session = await sessions.start_session(house, USER, default_ttl=3600)
    task = (await tasks.create_task(house, USER, session.id, goal="g", steps=[StepPlan("a")])).value
    await tasks.start_step(house, USER, task.id, 0, expected_version=1)  # seq 2, not yet heard
    heads = Heads()
    late = Watch(Subscription(["late"]), task_pk=task.pk, last=1)
    hearing = Watch(Subscription(["hearing"]), task_pk=task.pk, last=1)
    with heads.watching(late, 3600), heads.watching(hearing, 3600):
        await heads.check()
        assert await late.inbox.next(0) is None
        assert await hearing.inbox.next(0) is None
        hearing.last = 2
        await heads.check()
        assert await late.inbox.next(0) is RESYNC
        assert await hearing.inbox.next(0) is None


async def test_the_head_check_flags_only_a_session_stream_short_of_an_event(
    house: House,
) -> None:
    """Guards the session check's grace: a session with a task written lately flags
    only a sessionActivity stream still short of a stored event a check later, not
    one that heard it (each check used to flag every stream of a session with a
    task changed lately, sending all of them to the database at every check)."""
    session = await sessions.start_session(house, USER, default_ttl=3600)
    task = (await tasks.create_task(house, USER, session.id, goal="g", steps=[StepPlan("a")])).value
    await tasks.start_step(house, USER, task.id, 0, expected_version=1)  # seq 2, not yet heard
    heads = Heads()
    late = Watch(Subscription(["late"]), session_pk=session.pk, lasts={task.pk: 1})
    hearing = Watch(Subscription(["hearing"]), session_pk=session.pk, lasts={task.pk: 1})
    with heads.watching(late, 3600), heads.watching(hearing, 3600):
        await heads.check()
        assert await late.inbox.next(0) is None
        assert await hearing.inbox.next(0) is None
        hearing.lasts[task.pk] = 2
        await heads.check()
        assert await late.inbox.next(0) is RESYNC
        assert await hearing.inbox.next(0) is None
        await heads.check()
        assert await hearing.inbox.next(0) is None
