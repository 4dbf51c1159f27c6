"""The relay's hand-backs (``services.live.relay``): what it cannot deliver for a
follower, the follower's own stream delivers, from the database, in order, and
then the relay takes over again. Real SQLite and the in-process broker; the
followers are the tests' own, so each reason can be caused on purpose."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator

import pytest

from runstate.services import sessions, tasks
from runstate.services.house import House
from runstate.services.live import streams
from runstate.services.validation import StepPlan
from runstate.services.views import EventView, TaskView
from tests.support import opened, settled

USER = "relayed"


class Follower:
    """Renders an event as its seq; notes what the relay sends it. ``renders`` and
    ``takes`` switch off rendering and sending, for the reasons they cause."""

    key = "one selection"

    def __init__(self) -> None:
        self.renders = True
        self.takes = True
        self.sent: list[int] = []

    async def render(self, event: EventView) -> str | None:
        return json.dumps(event.seq) if self.renders else None

    def send(self, text: str) -> bool:
        if self.takes:
            self.sent.append(json.loads(text))
        return self.takes


@pytest.fixture
async def house(tmp_path: object) -> AsyncIterator[House]:
    async with opened(f"sqlite://{tmp_path}/relay.db", live=True) as house:
        yield house


async def new_task(house: House) -> TaskView:
    session = await sessions.start_session(house, USER, default_ttl=3600)
    plan = [StepPlan(f"step-{i}") for i in range(5)]
    return (await tasks.create_task(house, USER, session.id, goal="relayed", steps=plan)).value


async def following(
    house: House, task: TaskView, follower: Follower
) -> AsyncGenerator[EventView, None]:
    """A taskProgress stream with ``follower``, past its SNAPSHOT, following."""
    stream = streams.task_progress(house, USER, task.id, None, interval=60, follower=follower)
    assert (await anext(stream)).seq == 1
    return stream


async def ended(pending: asyncio.Future[EventView]) -> None:
    """Cancel a stream's pending step and wait until it has stopped."""
    pending.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await pending


async def test_an_unshared_answer_and_a_closed_socket_go_through_the_stream(
    house: House,
) -> None:
    """Guards "unshared" and "closed": an event the follower's selection cannot
    render (errors), and one its socket will not take, are sent by the stream
    itself, each once and in order; the next event goes through the relay again."""
    task = await new_task(house)
    follower = Follower()
    stream = await following(house, task, follower)
    pending = asyncio.ensure_future(anext(stream))
    await settled(lambda: house.relay.following(task.pk) == 1, "the stream following")
    follower.renders = False
    started = await tasks.start_step(house, USER, task.id, 0, expected_version=1)
    house.publish(started.events)
    assert (await asyncio.wait_for(pending, 10)).seq == 2
    assert house.relay.returned["unshared"] == 1
    follower.renders, follower.takes = True, False
    pending = asyncio.ensure_future(anext(stream))
    await settled(lambda: house.relay.following(task.pk) == 1, "following again")
    done = await tasks.complete_step(house, USER, task.id, 0, expected_version=2, output=None)
    house.publish(done.events)
    assert (await asyncio.wait_for(pending, 10)).seq == 3
    assert house.relay.returned["closed"] == 1
    follower.takes = True
    pending = asyncio.ensure_future(anext(stream))
    await settled(lambda: house.relay.following(task.pk) == 1, "following once more")
    again = await tasks.start_step(house, USER, task.id, 1, expected_version=3)
    house.publish(again.events)
    await settled(lambda: follower.sent == [4], "seq 4 sent by the relay")
    assert not pending.done()
    await ended(pending)
    await stream.aclose()


async def test_a_lost_message_is_filled_from_the_database_then_the_relay_goes_on(
    house: House,
) -> None:
    """Guards "gap": the broker never carries seq 2 (its write is not published);
    seq 3 comes; the relay hands the follower back instead of sending 3 after 1,
    its stream sends 2 and 3 from the database, and seq 4 goes through the relay.
    Control: the relay sends nothing out of order (the follower got only 4)."""
    task = await new_task(house)
    follower = Follower()
    stream = await following(house, task, follower)
    pending = asyncio.ensure_future(anext(stream))
    await settled(lambda: house.relay.following(task.pk) == 1, "the stream following")
    await tasks.start_step(house, USER, task.id, 0, expected_version=1)  # never published
    done = await tasks.complete_step(house, USER, task.id, 0, expected_version=2, output=None)
    house.publish(done.events)
    assert (await asyncio.wait_for(pending, 10)).seq == 2
    assert (await asyncio.wait_for(anext(stream), 10)).seq == 3
    assert house.relay.returned["gap"] == 1
    pending = asyncio.ensure_future(anext(stream))
    await settled(lambda: house.relay.following(task.pk) == 1, "following again")
    again = await tasks.start_step(house, USER, task.id, 1, expected_version=3)
    house.publish(again.events)
    await settled(lambda: follower.sent == [4], "seq 4 sent by the relay")
    await ended(pending)
    await stream.aclose()
    await settled(lambda: house.relay.following(task.pk) == 0, "the relay closed")


async def test_quiet_followers_stay_with_the_relay_across_head_checks(house: House) -> None:
    """Guards the relay's watch: it starts where its followers are, so the head
    checks (every 0.1 s here) do not take a quiet relay for behind the task's head
    and send every follower back to the database at each round. Four rounds pass
    with two followers of a task whose head is seq 1, and nothing is handed back."""
    task = await new_task(house)
    streams_ = [
        streams.task_progress(house, USER, task.id, None, interval=0.1, follower=Follower())
        for _ in range(2)
    ]
    for stream in streams_:
        assert (await anext(stream)).seq == 1
    pending = [asyncio.ensure_future(anext(stream)) for stream in streams_]
    await settled(lambda: house.relay.following(task.pk) == 2, "both following")
    rounds = house.heads.rounds
    await settled(lambda: house.heads.rounds >= rounds + 4, "four head checks")
    assert house.relay.returned == {}
    assert house.relay.following(task.pk) == 2
    for step, stream in zip(pending, streams_, strict=True):
        await ended(step)
        await stream.aclose()
