"""The relay's hand-backs (``services.live.relay``): what it cannot deliver for a
follower, the follower's own stream delivers, from the database, in order, and
then the relay takes over again. Real SQLite and the in-process broker; the
followers are the tests' own, so each reason can be caused on purpose."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any, cast

import pytest

from runstate.services.actions import sessions, tasks
from runstate.services.domain.errors import SessionExpiredError
from runstate.services.domain.validation import StepPlan
from runstate.services.domain.views import EventView, TaskView
from runstate.services.live import streams
from runstate.services.live.relay import Parked, Place, Position
from runstate.services.write.house import House
from tests.support import opened, settled

USER = "relayed"


class Watcher:
    """A taskProgress subscriber as its transport runs it (``transport.websocket``):
    its stream runs in a task until it parks; the relay then sends it frames, and
    when handed back, it resumes with a stream from the last seq it was sent. It
    renders an event as its seq; ``renders`` and ``takes`` switch off rendering
    and sending, for the reasons they cause."""

    key = "one selection"

    def __init__(self, house: House, task: TaskView, interval: float = 60) -> None:
        self.house, self.task, self.interval = house, task, interval
        self.renders = True
        self.takes = True
        self.got: list[Any] = []
        """Every event it received (as rendered), from its streams and from the
        relay, in order."""
        self.relayed: list[Any] = []
        """Those the relay sent."""
        self.runs = 0
        """Streams run: the first, and one per resumption."""
        self.error: BaseException | None = None
        self.running: asyncio.Task[None] | None = None
        self._start(None)

    def _start(self, after: Position | None) -> None:
        self.runs += 1
        self.running = asyncio.create_task(self._run(after))

    def stream(self, after: Position | None) -> AsyncIterator[EventView]:
        assert not isinstance(after, Place)
        return streams.task_progress(
            self.house, USER, self.task.id, after, interval=self.interval, follower=self
        )

    def seen(self, event: EventView) -> Any:
        """The event as it renders."""
        return event.seq

    async def _run(self, after: Position | None) -> None:
        try:
            async for event in self.stream(after):
                self.got.append(self.seen(event))
        except Parked:
            pass
        except Exception as error:  # what the transport would answer with
            self.error = error

    async def render(self, event: EventView) -> bytes | None:
        return json.dumps(self.seen(event)).encode() if self.renders else None

    def send(self, data: bytes) -> bool:
        if self.takes:
            self.got.append(json.loads(data))
            self.relayed.append(json.loads(data))
        return self.takes

    def resume(self, after: Position, sending: Awaitable[object] | None) -> None:
        assert sending is None  # nothing here is slow
        self._start(after)

    @property
    def parked(self) -> bool:
        return self.running is not None and self.running.done()

    async def close(self) -> None:
        """End it as its transport does when the client completes it."""
        if self.running is not None:
            self.running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.running
        self.house.relay.leave(self)


class SessionWatcher(Watcher):
    """A sessionActivity subscriber, run as ``Watcher`` runs a taskProgress one; it
    renders an event as [task id, seq]."""

    def __init__(self, house: House, session_id: str, interval: float = 60) -> None:
        self.session_id = session_id
        super().__init__(house, cast(TaskView, None), interval)

    def stream(self, after: Position | None) -> AsyncIterator[EventView]:
        assert not isinstance(after, int)
        return streams.session_activity(
            self.house, USER, self.session_id, interval=self.interval, follower=self, resumed=after
        )

    def seen(self, event: EventView) -> Any:
        return [event.task_id, event.seq]


@pytest.fixture
async def house(tmp_path: object) -> AsyncIterator[House]:
    async with opened(f"sqlite://{tmp_path}/relay.db", live=True) as house:
        yield house


async def new_task(house: House) -> TaskView:
    session = await sessions.start_session(house, USER, default_ttl=3600)
    plan = [StepPlan(f"step-{i}") for i in range(5)]
    return (await tasks.create_task(house, USER, session.id, goal="relayed", steps=plan)).value


async def run_step(house: House, task: TaskView, index: int, version: int) -> tuple[int, list[int]]:
    """Start and complete step ``index``, publishing each write's events as a
    mutation does: the task's version after, and the two seqs written."""
    started = await tasks.start_step(house, USER, task.id, index, expected_version=version)
    house.publish(started.events)
    done = await tasks.complete_step(
        house, USER, task.id, index, expected_version=started.value.version, output=None
    )
    house.publish(done.events)
    return done.value.version, [started.value.event_seq, done.value.event_seq]


async def parked(house: House, task: TaskView, *watchers: Watcher) -> None:
    """Wait until every watcher's stream has parked with the relay."""
    await settled(
        lambda: all(w.parked for w in watchers) and house.relay.following(task.pk) == len(watchers),
        "the watchers parked",
    )


async def test_a_following_subscriber_holds_no_stream(house: House) -> None:
    """Guards parking: once caught up, a subscriber's stream ends (its task, its
    generators, its inbox go), and the relay alone delivers to it, each event once,
    in order; the relay's record goes when its subscriber leaves."""
    task = await new_task(house)
    watchers = [Watcher(house, task) for _ in range(3)]
    await parked(house, task, *watchers)
    version = 1
    for index in range(2):
        version, _ = await run_step(house, task, index, version)
    for watcher in watchers:
        await settled(lambda w=watcher: w.got == [1, 2, 3, 4, 5], "seq 2 to 5 relayed")
        assert watcher.relayed == [2, 3, 4, 5]
        assert watcher.runs == 1
    for watcher in watchers:
        await watcher.close()
    assert house.relay.returned == {"closed": 3}
    await settled(lambda: house.relay.following(task.pk) == 0, "the relay closed")
    await settled(lambda: not house.broker.channels, "the relay's subscription closed")


async def test_an_unshared_answer_resumes_the_stream_and_a_closed_socket_ends_it(
    house: House,
) -> None:
    """Guards "unshared" and "closed": an event the follower's selection cannot
    render (errors) is sent by its resumed stream, from the database, once and in
    order, and the next event goes through the relay again; an event its socket
    will not take (the operation ended) drops the follower, resuming nothing."""
    task = await new_task(house)
    watcher = Watcher(house, task)
    await parked(house, task, watcher)
    watcher.renders = False
    started = await tasks.start_step(house, USER, task.id, 0, expected_version=1)
    house.publish(started.events)
    await settled(lambda: watcher.got == [1, 2], "seq 2 sent by the resumed stream")
    assert watcher.relayed == []
    assert (watcher.runs, house.relay.returned["unshared"]) == (2, 1)
    watcher.renders = True
    await parked(house, task, watcher)
    done = await tasks.complete_step(house, USER, task.id, 0, expected_version=2, output=None)
    house.publish(done.events)
    await settled(lambda: watcher.got == [1, 2, 3], "seq 3 relayed")
    assert watcher.relayed == [3]
    watcher.takes = False
    again = await tasks.start_step(house, USER, task.id, 1, expected_version=3)
    house.publish(again.events)
    await settled(lambda: house.relay.returned["closed"] == 1, "the follower dropped")
    assert house.relay.following(task.pk) == 0
    assert (watcher.got, watcher.runs) == ([1, 2, 3], 2)


async def test_a_lost_message_is_filled_from_the_database_then_the_relay_goes_on(
    house: House,
) -> None:
    """Guards "gap": the broker never carries seq 2 (its write is not published);
    seq 3 comes; the relay hands the follower back instead of sending 3 after 1,
    its resumed stream sends 2 and 3 from the database, and seq 4 goes through the
    relay. Control: the relay sends nothing out of order (it sent only 4)."""
    task = await new_task(house)
    watcher = Watcher(house, task)
    await parked(house, task, watcher)
    await tasks.start_step(house, USER, task.id, 0, expected_version=1)  # never published
    done = await tasks.complete_step(house, USER, task.id, 0, expected_version=2, output=None)
    house.publish(done.events)
    await settled(lambda: watcher.got == [1, 2, 3], "seq 2 and 3 from the database")
    assert house.relay.returned["gap"] == 1
    await parked(house, task, watcher)
    again = await tasks.start_step(house, USER, task.id, 1, expected_version=3)
    house.publish(again.events)
    await settled(lambda: watcher.got == [1, 2, 3, 4], "seq 4 relayed")
    assert watcher.relayed == [4]
    await watcher.close()
    await settled(lambda: house.relay.following(task.pk) == 0, "the relay closed")


async def test_quiet_followers_stay_with_the_relay_across_head_checks(house: House) -> None:
    """Guards the relay's watch: it starts where its followers are, so the head
    checks (every 0.1 s here) do not take a quiet relay for behind the task's head
    and send every follower back to the database at each round. Four rounds pass
    with two followers of a task whose head is seq 1, and nothing is handed back."""
    task = await new_task(house)
    watchers = [Watcher(house, task, interval=0.1) for _ in range(2)]
    await parked(house, task, *watchers)
    rounds = house.heads.rounds
    await settled(lambda: house.heads.rounds >= rounds + 4, "four head checks")
    assert house.relay.returned == {}
    assert house.relay.following(task.pk) == 2
    assert [w.runs for w in watchers] == [1, 1]
    for watcher in watchers:
        await watcher.close()


async def test_a_parked_subscriber_of_an_expiring_session_is_ended_on_time(
    house: House,
) -> None:
    """Guards the relay's expiry timer: nothing is written, the session's expiry
    comes, and the parked subscriber is handed back ("expiry") so that its stream
    reads the session again and ends with SessionExpired, as a stream does."""
    session = await sessions.start_session(house, USER, default_ttl=1)
    plan = [StepPlan("step-0")]
    task = (await tasks.create_task(house, USER, session.id, goal="brief", steps=plan)).value
    watcher = Watcher(house, task)
    await parked(house, task, watcher)
    await settled(lambda: watcher.error is not None, "the subscription ended", within=10)
    assert isinstance(watcher.error, SessionExpiredError)
    assert house.relay.returned == {"expiry": 1}
    assert house.relay.following(task.pk) == 0


async def session_parked(house: House, session_pk: int, *watchers: Watcher) -> None:
    """Wait until every sessionActivity watcher's stream has parked with the relay."""
    await settled(
        lambda: (
            all(w.parked for w in watchers)
            and house.relay.following(session_pk=session_pk) == len(watchers)
        ),
        "the session's watchers parked",
    )


async def test_session_followers_hold_no_stream_and_hear_every_task(house: House) -> None:
    """Guards sessionActivity parking: caught up, a session's subscribers end their
    streams and the session's relay delivers each task's events to them, a task
    created after they subscribed included, each event rendered once for all
    three; their records go when they leave."""
    session = await sessions.start_session(house, USER, default_ttl=3600)
    plan = [StepPlan("step-0")]
    first = (await tasks.create_task(house, USER, session.id, goal="one", steps=plan)).value
    watchers = [SessionWatcher(house, session.id) for _ in range(3)]
    await session_parked(house, session.pk, *watchers)
    renders = house.relay.renders
    house.publish((await tasks.start_step(house, USER, first.id, 0, expected_version=1)).events)
    created = await tasks.create_task(house, USER, session.id, goal="two", steps=plan)
    second = created.value
    house.publish(created.events)
    house.publish((await tasks.start_step(house, USER, second.id, 0, expected_version=1)).events)
    expected = [[first.id, 2], [second.id, 1], [second.id, 2]]
    for watcher in watchers:
        await settled(lambda w=watcher: w.got == expected, "three events relayed")
        assert (watcher.relayed, watcher.runs) == (expected, 1)
    assert house.relay.renders - renders == 3
    for watcher in watchers:
        await watcher.close()
    assert house.relay.returned == {"closed": 3}
    await settled(lambda: house.relay.following(session_pk=session.pk) == 0, "the relay closed")


async def test_a_session_follower_short_of_one_task_is_filled_from_the_database(
    house: House,
) -> None:
    """Guards "gap" for a session's follower: the broker never carries the first
    task's seq 2; its seq 3 comes and the relay hands the follower back instead of
    sending 3 after 1; the resumed stream sends 2 and 3 from the database, and the
    relay goes on with the other task's events, whose place was kept. Control:
    the relay sent nothing out of order."""
    session = await sessions.start_session(house, USER, default_ttl=3600)
    plan = [StepPlan("step-0"), StepPlan("step-1")]
    first = (await tasks.create_task(house, USER, session.id, goal="one", steps=plan)).value
    other = (await tasks.create_task(house, USER, session.id, goal="two", steps=plan)).value
    watcher = SessionWatcher(house, session.id)
    await session_parked(house, session.pk, watcher)
    house.publish((await tasks.start_step(house, USER, other.id, 0, expected_version=1)).events)
    await settled(lambda: watcher.got == [[other.id, 2]], "the other task's seq 2 relayed")
    await tasks.start_step(house, USER, first.id, 0, expected_version=1)  # never published
    done = await tasks.complete_step(house, USER, first.id, 0, expected_version=2, output=None)
    house.publish(done.events)
    await settled(lambda: len(watcher.got) == 3, "seq 2 and 3 from the database")
    assert watcher.got[1:] == [[first.id, 2], [first.id, 3]]
    assert (house.relay.returned["gap"], watcher.runs) == (1, 2)
    await session_parked(house, session.pk, watcher)
    house.publish(
        (
            await tasks.complete_step(house, USER, other.id, 0, expected_version=2, output=None)
        ).events
    )
    await settled(lambda: len(watcher.got) == 4, "the other task's seq 3 relayed")
    assert watcher.relayed == [[other.id, 2], [other.id, 3]]
    await watcher.close()


async def test_a_busy_session_whose_followers_hear_everything_stays_relayed(
    house: House,
) -> None:
    """Guards the session head check's grace: two followers of a session written to
    at every round of the head checks (every 0.1 s here) hear every event, so no
    check flags the relay and nothing is handed back (each check used to flag
    every watcher of a session with a task changed lately, sending all of them to
    the database). The control: one write never published, and the checks hand
    the followers back to fill it from the database."""
    session = await sessions.start_session(house, USER, default_ttl=3600)
    plan = [StepPlan(f"step-{i}") for i in range(10)]
    task = (await tasks.create_task(house, USER, session.id, goal="busy", steps=plan)).value
    watchers = [SessionWatcher(house, session.id, interval=0.1) for _ in range(2)]
    await session_parked(house, session.pk, *watchers)
    version, written = 1, []
    for index in range(4):
        rounds = house.heads.rounds
        version, seqs = await run_step(house, task, index, version)
        written += [[task.id, seq] for seq in seqs]
        await settled(lambda r=rounds: house.heads.rounds >= r + 1, "a head check")
    for watcher in watchers:
        await settled(lambda w=watcher: w.got == written, "every event relayed")
    await settled(lambda h=house.heads.rounds: house.heads.rounds >= h + 2, "two more checks")
    assert house.relay.returned == {}
    assert [w.runs for w in watchers] == [1, 1]
    await tasks.start_step(house, USER, task.id, 4, expected_version=version)  # never published
    lost = [task.id, 10]
    for watcher in watchers:
        await settled(lambda w=watcher: w.got == [*written, lost], "filled from the database")
    assert house.relay.returned["resync"] == 2
    for watcher in watchers:
        await watcher.close()


async def test_the_head_checks_find_one_follower_behind_where_another_is_not(
    house: House,
) -> None:
    """Guards the relay's watch answering for each follower: the broker never
    carries seq 2; one follower parked before it (at seq 1), another after (at
    seq 2, read from the database). The relay is behind as long as one follower is,
    so two head checks hand them back and the first gets seq 2 from the database
    (taken as far as its most advanced follower, the relay was never flagged, and
    the first waited for the task's next write)."""
    task = await new_task(house)
    early = Watcher(house, task)
    await parked(house, task, early)
    await tasks.start_step(house, USER, task.id, 0, expected_version=1)  # never published
    late = Watcher(house, task)
    await parked(house, task, early, late)
    assert (early.got, late.got) == ([1], [2])
    await house.heads.check()  # seq 2 stored at this check
    await house.heads.check()  # and still not sent to the early one
    await settled(lambda: early.got == [1, 2], "seq 2 from the database")
    assert late.got == [2]
    assert house.relay.returned == {"resync": 2}
    for watcher in (early, late):
        await watcher.close()
