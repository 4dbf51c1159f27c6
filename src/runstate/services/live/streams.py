"""Live progress: gap-free streams of a task's or a session's events for subscribers.

A stream subscribes to its broker channel first, then reads the database (the
snapshot, or the stored events after ``after_seq``), then relays live events.
It drops what it has already sent and, whenever a live event skips ahead or the
broker asks for a resync, it compares the stored ``event_seq`` with the last seq
it sent and sends what is missing from the database. Quiet streams are checked
together, one statement per interval for all of them (``services.live.catch_up``), and
flagged for that resync when they are behind. So every subscriber sees seq 1, 2,
3, ... whatever the broker lost.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Protocol

from runstate.models import Session, Task
from runstate.observe.metrics import Metrics
from runstate.pubsub import RESYNC, Resync
from runstate.services.domain import events
from runstate.services.domain.conditions import session_expired
from runstate.services.domain.errors import InvalidInputError, SessionExpiredError
from runstate.services.domain.views import EventView, TaskView
from runstate.services.live.catch_up import MARGIN, Watch
from runstate.services.live.messages import session_channel, task_channel
from runstate.services.live.relay import Follower, Hearing, Parked, Place, Relay, lag
from runstate.services.read import history
from runstate.services.read.lookups import get_session, get_task
from runstate.storage.clock import utcnow


class Watching(Hearing, Protocol):
    """What a live stream needs of the app that runs it (``write.house.House``):
    what its relay needs, and the relay that takes caught-up followers."""

    @property
    def relay(self) -> Relay:
        """Live events relayed to the caught-up followers of each task."""


CATCH_UP_PAGE = 200

QUIET_SECONDS = 60.0
"""How long a stream's inbox waits at a time; quiet streams are checked by
the house's head checks (``catch_up.Heads``), never by themselves."""


Pay = Callable[[int], AbstractAsyncContextManager[None]]
"""Pays for reading and sending this many stored events, waiting while the
caller's budget is short, and holds the caller's turn while they are read
(``Context.replaying``)."""


async def stored_events(
    task: events.TaskRef, after_seq: int, head: int | None = None, pay: Pay | None = None
) -> AsyncIterator[EventView]:
    """Every stored event of a task after ``after_seq``, oldest first, page by page;
    with ``pay``, each page paid for before it is read, and read in ``pay``'s
    block (as many events as the page may hold, or up to ``head``, the task's seq
    when the stream began)."""
    while True:
        ahead = CATCH_UP_PAGE if head is None else min(CATCH_UP_PAGE, head - after_seq)
        paying = pay(ahead) if pay is not None and ahead > 0 else contextlib.nullcontext()
        async with paying:
            page = await history.events(task, after_seq, CATCH_UP_PAGE)
        for event in page:
            yield event
        if len(page) < CATCH_UP_PAGE:
            return
        after_seq = page[-1].seq


async def task_progress(
    house: Watching,
    user_id: str,
    task_id: str,
    after_seq: int | None,
    *,
    interval: float,
    gap_fill: bool = True,
    follower: Follower | None = None,
    resumed: bool = False,
    pay: Pay | None = None,
) -> AsyncGenerator[EventView, None]:
    """The task's events, gap-free: a SNAPSHOT (or the stored events after
    ``after_seq``, each page paid for with ``pay`` unless ``resumed``: a replay of
    60,001 events cost 5 points and about 54 s of CPU), then each new event as it
    commits; with a ``follower``, once
    it is caught up the house's relay delivers its live events and the stream
    ends with ``Parked`` (``relay``). An ``after_seq`` past the
    task's head (a cursor kept from before a database reset or restore) answers a
    SNAPSHOT, never silence.

    ``resumed``: the relay handed the subscription back, and the stored events
    after ``after_seq`` are what live delivery did not bring: they count as
    gap-filled (``runstate_gap_filled_events``), as a running stream's would.

    Someone else's task answers NotFound before anything is sent. ``gap_fill=False``
    relays live events only, never reading the database again (a test switch that
    shows what the broker alone loses).
    """
    view = await get_task(user_id, task_id)
    ref = events.TaskRef(view.pk, view.id, view.session_pk)
    if after_seq is not None and after_seq < 0:
        raise InvalidInputError("afterSeq", "must be 0 or more")
    async with house.broker.subscription([task_channel(view.pk)]) as inbox:
        if after_seq is not None and after_seq > view.event_seq:
            after_seq = None  # a cursor from before a reset or restore: start over
        watch = Watch(inbox, task_pk=view.pk)
        await _task_head(view, watch)  # the session's expiry, for the stream's deadline
        if after_seq is None:
            view = await get_task(user_id, task_id)
            yield events.snapshot(view, utcnow())
            watch.last = view.event_seq
        else:
            watch.last = after_seq
            payer = None if resumed else pay  # a hand-back's events were never sent
            async for event in stored_events(ref, watch.last, view.event_seq, payer):
                if resumed:
                    house.metrics.gap_filled.inc()
                yield event
                watch.last = event.seq
        heard = _heard(house, watch, interval, gap_fill, follower)
        async with contextlib.aclosing(heard):
            async for message in heard:
                if isinstance(message, bytes):
                    live = house.decoded(message)
                    if live is None or live.task_pk != view.pk or live.seq <= watch.last:
                        continue
                    if _past_expiry(watch, live.at) and await _task_head(view, watch) is None:
                        return
                    if live.seq == watch.last + 1 or not gap_fill:
                        house.metrics.delivery_seconds.observe(lag(live))
                        yield live
                        watch.last = live.seq
                        continue
                if not gap_fill and not _past_expiry(watch, utcnow()):
                    continue
                head = await _task_head(view, watch)
                if head is None:
                    return  # the task was deleted with its session
                if gap_fill and head > watch.last:
                    async for event in stored_events(ref, watch.last):
                        house.metrics.gap_filled.inc()
                        yield event
                        watch.last = event.seq


async def _heard(
    house: Watching,
    watch: Watch,
    interval: float,
    gap_fill: bool,
    follower: Follower | None = None,
) -> AsyncGenerator[bytes | Resync, None]:
    """What a stream's inbox receives, messages and resyncs; while ``gap_fill``,
    the house's head checks see to the quiet spells and flag a resync when one
    missed anything. When its session's expiry (as last read) comes, a resync too:
    the stream reads the session again, and ends if it did expire.

    With a ``follower``, whenever the inbox is empty the house's relay takes the
    live events over (``relay``) and the stream ends, raising ``Parked``; the
    follower resumes its subscription when the relay hands it back."""
    with contextlib.ExitStack() as checked:
        if gap_fill:
            checked.enter_context(house.heads.watching(watch, interval))
        while True:
            if follower is not None and gap_fill and not (len(watch.inbox) or watch.inbox.flagged):
                if await house.relay.park(watch, follower, interval):
                    raise Parked
                continue
            wait = QUIET_SECONDS
            if watch.expires_at is not None:
                wait = min(wait, max(0.0, (watch.expires_at - utcnow()).total_seconds()))
            message = await watch.inbox.next(wait)
            if message is not None:
                yield message
            elif _past_expiry(watch, utcnow()):
                yield RESYNC


def _past_expiry(watch: Watch, at: datetime) -> bool:
    """Whether ``at`` is at or past the session's expiry as the stream last read it:
    then the stream reads the session again, before it delivers an event written
    then (a lease release, which works in an expired session) or goes on waiting."""
    return watch.expires_at is not None and at >= watch.expires_at


async def _task_head(view: TaskView, watch: Watch) -> int | None:
    """The task's latest seq, None once it is deleted; SessionExpiredError once its
    session has expired, which ends the subscription with that error. The stream's
    ``expires_at`` is what the session's is now."""
    row = await (
        Task.filter(id=view.pk)
        .first()
        .values_list("event_seq", "session__status", "session__expires_at")
    )
    if row is None:
        return None
    seq, status, expires_at = row
    refuse_expired(view.session_id, status, expires_at)
    watch.expires_at = expires_at
    return int(seq)


def refuse_expired(session_id: str, status: object, expires_at: datetime) -> None:
    """SessionExpiredError for a session read as its status and expiry, once expired."""
    if session_expired(status, expires_at, utcnow()):
        raise SessionExpiredError(session_id)


async def _session_state(session_pk: int, session_id: str, watch: Watch) -> bool:
    """Read the session again: False once it is deleted; SessionExpiredError once it
    has expired; else the stream's ``expires_at`` is the session's now."""
    state = await Session.filter(id=session_pk).first().values_list("status", "expires_at")
    if state is None:
        return False
    status, expires_at = state
    refuse_expired(session_id, status, expires_at)
    watch.expires_at = expires_at
    return True


async def session_activity(
    house: Watching,
    user_id: str,
    session_id: str,
    *,
    interval: float,
    gap_fill: bool = True,
    resync: bool = False,
    follower: Follower | None = None,
    resumed: Place | None = None,
) -> AsyncGenerator[EventView, None]:
    """Events of every task in the session from now on, tasks created later included,
    each task's events gap-free and in order. ``resync`` (a client that held events
    of another timeline) first sends a SNAPSHOT of each of the session's tasks.
    With a ``follower``, once it is caught up the house's relay delivers its live
    events and the stream ends with ``Parked`` (``relay``); ``resumed``: the relay
    handed it back, and it goes on from that place, first with the stored events
    it was not sent (counted as gap-filled)."""
    session = await get_session(user_id, session_id)
    async with house.broker.subscription([session_channel(session.pk)]) as inbox:
        watch = Watch(inbox, session_pk=session.pk)
        await _session_state(session.pk, session.id, watch)  # its expiry: the deadline
        if resumed is not None:
            watch.lasts, watch.since = resumed.lasts, resumed.since
            async for event in _session_catch_up(session.pk, watch, house.metrics):
                yield event
        else:
            watch.lasts = dict(
                await Task.filter(session_id=session.pk).values_list("id", "event_seq")
            )
        last = watch.lasts
        if resync:
            for public_id in (
                await Task.filter(session_id=session.pk)
                .order_by("id")
                .values_list("public_id", flat=True)
            ):
                view = await get_task(user_id, str(public_id))
                yield events.snapshot(view, utcnow())
                last[view.pk] = max(last.get(view.pk, 0), view.event_seq)
        heard = _heard(house, watch, interval, gap_fill, follower)
        async with contextlib.aclosing(heard):
            async for message in heard:
                if isinstance(message, bytes):
                    live = house.decoded(message)
                    if live is None or live.session_pk != session.pk:
                        continue
                    seen = last.get(live.task_pk, 0)
                    if live.seq <= seen:
                        continue
                    if _past_expiry(watch, live.at) and not await _session_state(
                        session.pk, session.id, watch
                    ):
                        return  # the session was deleted
                    if live.seq == seen + 1 or not gap_fill:
                        house.metrics.delivery_seconds.observe(lag(live))
                        yield live
                        last[live.task_pk] = live.seq
                        continue
                if not gap_fill and not _past_expiry(watch, utcnow()):
                    continue
                if not await _session_state(session.pk, session.id, watch):
                    return  # the session was deleted
                if gap_fill:
                    async for event in _session_catch_up(session.pk, watch, house.metrics):
                        yield event


async def _session_catch_up(
    session_pk: int, watch: Watch, metrics: Metrics
) -> AsyncIterator[EventView]:
    """The stored events of the session's tasks that ``watch`` has not sent, task by
    task, each in order. Only the tasks changed since its last catch-up (and a
    margin for other processes' clocks) are read, never the whole session again."""
    since, watch.since = watch.since - MARGIN, utcnow()
    stored = await Task.filter(session_id=session_pk, updated_at__gte=since).values_list(
        "id", "public_id", "event_seq"
    )
    for task_pk, public_id, latest in stored:
        if latest > watch.lasts.get(task_pk, 0):
            ref = events.TaskRef(task_pk, public_id, session_pk)
            async for event in stored_events(ref, watch.lasts.get(task_pk, 0)):
                metrics.gap_filled.inc()
                yield event
                watch.lasts[task_pk] = event.seq
