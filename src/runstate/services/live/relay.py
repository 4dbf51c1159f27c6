"""Live events relayed to every caught-up subscriber of a task, or of a session, at once.

A taskProgress or sessionActivity stream that has sent everything stored and has
nothing waiting hands its live delivery to the house's ``Relay`` (``park``) and
ends: its generators, its inbox and the task running it go, and the relay keeps
a small record of the subscriber (its ``Follower``, where it is: the last seq it
was sent, of each task for a session's; its session's expiry). Per task or
session, the relay holds one broker subscription and one reader: for each event
it asks one follower of each ``key`` to ``render`` it (followers of one key
render it the same), then has every follower ``send`` that JSON, in one pass
with no awaits, each only if the event is the very next one it needs. What it
cannot do for a follower it hands back: the follower ``resume``s its
subscription from where it was, and the new stream answers as a stream always
has, from the database:

- ``"gap"``: the event is not the next one the follower needs (an event was lost
  on the way, or the follower came in behind);
- ``"resync"``: the relay's own inbox overflowed or the broker reconnected, or
  the head checks found a follower short of an event stored an interval ago
  (they ask the relay's watch as they ask a stream's, and it answers for its
  followers);
- ``"expiry"``: the event was written at or past the session's expiry as the
  stream last read it, or that time has come: the stream reads the session again;
- ``"unshared"``: the event renders with errors (or not at all): the stream sends
  it itself, with the masking and formatting of its own path;
- ``"slow"``: the socket could not take the frame at once; the frame goes on its
  way and the resumed stream waits for it, then goes on from its own inbox, whose
  bounds are the slow-subscriber policy (``pubsub.broker``).

A follower whose operation or socket has ended (``send`` says so, or its
transport calls ``leave``) is dropped, and resumes nothing (``"closed"``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Protocol

from runstate.basics import inflight
from runstate.observe.metrics import Metrics
from runstate.pubsub.broker import Broker, Resync
from runstate.services.domain.views import EventView
from runstate.services.live.catch_up import Heads, Watch
from runstate.services.live.messages import Decoded, session_channel, task_channel
from runstate.storage.clock import utcnow

log = logging.getLogger(__name__)

QUIET_SECONDS = 60.0
"""How long the relay's reader waits at a time; the head checks flag its inbox."""

LINGER_SECONDS = 5.0
"""How long a relay nobody follows stays open for followers coming back."""

Sent = bool | Awaitable[object]
"""What a follower's ``send`` did: True when the frame is written, False when the
operation or its socket has ended, an awaitable when the frame is on its way to a
socket that could not take it at once (done once it is out)."""


class Hearing(Protocol):
    """What live delivery needs of the app that runs it (``write.house.House``):
    the broker to subscribe with, the head checks of quiet inboxes, and the
    decoded messages shared by every subscriber of a channel."""

    @property
    def broker(self) -> Broker:
        """The broker live streams subscribe to."""

    @property
    def heads(self) -> Heads:
        """The head checks of quiet inboxes."""

    @property
    def decoded(self) -> Decoded:
        """Broker messages decoded once."""

    @property
    def metrics(self) -> Metrics:
        """The app's instruments."""


class Parked(BaseException):
    """Raised by a stream whose follower the relay now delivers to: the stream and
    everything running it end here, quietly. A BaseException, so that no
    ``except Exception`` on the way (GraphQL's, Strawberry's) takes it for an error
    to answer; the transport that started the operation catches it."""


@dataclass(eq=False, slots=True)
class Place:
    """Where a sessionActivity subscriber is: the last seq it was sent of each task
    of its session, and when its stream last caught up from the database (a
    resumed stream reads the tasks changed since, ``streams``)."""

    lasts: dict[int, int]
    since: datetime


Position = int | Place
"""Where a subscriber is: a taskProgress subscriber's last seq, or a
sessionActivity subscriber's ``Place``."""


class Follower(Protocol):
    """What a subscriber lends the relay: how its events render, where they go, and
    how its subscription starts again when the relay hands it back."""

    @property
    def key(self) -> Hashable:
        """Followers with equal keys render an event the same."""

    async def render(self, event: EventView) -> bytes | None:
        """The event's answer for this follower's selection, as the JSON of a
        ``next`` message's data (UTF-8); None when it cannot be shared (errors)."""

    def send(self, data: bytes) -> Sent:
        """Write the rendered event to the follower's socket without waiting."""

    def resume(self, after: Position, sending: Awaitable[object] | None) -> None:
        """Start the subscription's stream again from the stored events after
        ``after``, once ``sending`` (a frame still on its way) is out."""


def lag(event: EventView) -> float:
    """Seconds from the write of a live event to now (clocks of servers differ a
    little: never below 0)."""
    return max(0.0, (utcnow() - event.at).total_seconds())


@dataclass(eq=False, slots=True)
class _Member:
    """What the relay keeps of one parked subscriber."""

    follower: Follower
    channel: _Channel
    last: Position
    """Where the subscriber is: what it was last sent."""
    expires: float = math.inf
    """Its session's expiry as its stream last read it, as a timestamp."""

    def sent(self, task_pk: int) -> int:
        """The last seq of the task it was sent."""
        last = self.last
        return last if isinstance(last, int) else last.lasts.get(task_pk, 0)

    def advance(self, event: EventView) -> None:
        """It was sent ``event``."""
        if isinstance(self.last, int):
            self.last = event.seq
        else:
            self.last.lasts[event.task_pk] = event.seq


@dataclass(eq=False)
class _Channel(Watch):
    """One task's or session's relay: its inbox, reader and followers. The head
    checks watch it as they watch a stream, and it is behind when any of its
    followers is."""

    members: set[_Member] = field(default_factory=set)
    reader: asyncio.Task[None] | None = None
    heads: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    expiry: asyncio.TimerHandle | None = None
    """Hands back the followers whose session's expiry has come; set for the soonest."""
    expiry_at: float = math.inf
    linger: asyncio.TimerHandle | None = None
    """Closes the relay once it has been idle for ``LINGER_SECONDS``."""

    @property
    def name(self) -> str:
        """Its broker channel."""
        return _name(self.task_pk, self.session_pk)

    def carries(self, event: EventView) -> bool:
        """Whether the event is one its followers subscribed to."""
        if self.task_pk is not None:
            return event.task_pk == self.task_pk
        return event.session_pk == self.session_pk

    def behind(self, task_pk: int, seq: int) -> bool:
        return any(member.sent(task_pk) < seq for member in self.members)


def _name(task_pk: int | None, session_pk: int | None) -> str:
    """The broker channel of a task's (or else a session's) events."""
    if task_pk is not None:
        return task_channel(task_pk)
    assert session_pk is not None
    return session_channel(session_pk)


class Relay:
    """The task relays of one house (see the module's docstring)."""

    def __init__(self, house: Hearing) -> None:
        self.house = house
        self.renders = 0
        """Events rendered for a key (each shared by that key's followers)."""
        self.sent = 0
        """Frames the relay wrote (or set on their way) to followers."""
        self.returned: Counter[str] = Counter()
        """Deliveries handed back (or dropped: ``"closed"``), by reason."""
        self._channels: dict[str, _Channel] = {}
        """By broker channel."""
        self._opening: dict[str, asyncio.Future[_Channel]] = {}
        self._members: dict[Follower, _Member] = {}
        self.flush: Callable[[], None] = _nothing
        """Writes the frames the followers' sends left waiting: called once a
        relay has sent everything its inbox held, so that the frames of several
        events, or of several subscriptions of one socket, go out together
        (``transport.wsprotocol.uncork_all``, set by the app)."""

    def following(self, task_pk: int | None = None, *, session_pk: int | None = None) -> int:
        """How many subscribers of the task (or of the session) the relay delivers
        to now."""
        channel = self._channels.get(_name(task_pk, session_pk))
        return 0 if channel is None else len(channel.members)

    async def park(self, watch: Watch, follower: Follower, interval: float) -> bool:
        """Deliver the live events of the stream's task or session to ``follower``
        from where ``watch`` is on, until handed back (``follower.resume``) or it
        leaves: True, and the stream is to end (``Parked``). False, at once, when
        the stream's inbox is not empty (it filled while the relay's own
        subscription was being opened): the stream goes on with it."""
        channel = await self._channel(watch, interval)
        if len(watch.inbox) or watch.inbox.flagged:
            self._close_if_idle(channel)
            return False
        last: Position = watch.last
        if watch.session_pk is not None:
            last = Place(watch.lasts, watch.since)
            # The head checks read its session's changes since the stream's own
            # last round: what it missed before that, they found then.
            channel.checked = min(channel.checked_from, watch.checked_from)
        member = _Member(follower, channel, last)
        if watch.expires_at is not None:
            member.expires = watch.expires_at.timestamp()
        channel.members.add(member)
        self._members[follower] = member
        self.house.metrics.subscriptions.inc()  # the stream's own count ends as it parks
        if member.expires < channel.expiry_at:
            self._expire_at(channel, member.expires)
        return True

    def leave(self, follower: Follower) -> None:
        """Drop ``follower``, whose operation has ended (completed by its client, or
        its socket closed), if it is parked."""
        member = self._members.get(follower)
        if member is not None:
            self._drop(member, "closed")

    def _drop(self, member: _Member, reason: str) -> None:
        """Forget ``member``: counted by ``reason``; its relay closed if it was the last."""
        channel = member.channel
        channel.members.discard(member)
        del self._members[member.follower]
        self.house.metrics.subscriptions.dec()
        self.returned[reason] += 1
        self.house.metrics.handed_back.labels(reason).inc()
        self._close_if_idle(channel)

    def _hand_back(
        self, member: _Member, reason: str, sending: Awaitable[object] | None = None
    ) -> None:
        """Give ``member`` its delivery back: its subscription resumes after the last
        seq it was sent (once ``sending`` is out)."""
        self._drop(member, reason)
        member.follower.resume(member.last, sending)

    def _expire_at(self, channel: _Channel, at: float) -> None:
        """Check the channel's followers' expiry at timestamp ``at`` (the soonest)."""
        if channel.expiry is not None:
            channel.expiry.cancel()
        channel.expiry_at = at
        delay = max(0.0, at - time.time())
        channel.expiry = asyncio.get_running_loop().call_later(delay, self._expired, channel)

    def _expired(self, channel: _Channel) -> None:
        """Hand back the followers whose session's expiry (as last read) has come:
        each resumed stream reads its session again, and ends if it did expire."""
        channel.expiry, channel.expiry_at = None, math.inf
        now = time.time()
        soonest = math.inf
        for member in tuple(channel.members):
            if member.expires <= now:
                self._hand_back(member, "expiry")
            else:
                soonest = min(soonest, member.expires)
        if soonest < math.inf and self._channels.get(channel.name) is channel:
            self._expire_at(channel, soonest)

    async def _channel(self, watch: Watch, interval: float) -> _Channel:
        """The relay of the stream's task or session, opened (subscribed, its reader
        started) if need be."""
        name = _name(watch.task_pk, watch.session_pk)
        channel = self._channels.get(name)
        if channel is not None:
            return channel
        opening = self._opening.get(name)
        if opening is not None:
            return await asyncio.shield(opening)
        future: asyncio.Future[_Channel] = asyncio.get_running_loop().create_future()
        self._opening[name] = future
        opened = self._open(name, watch, interval)
        return await inflight.shared(future, opened, lambda: self._opening.pop(name, None))

    async def _open(self, name: str, watch: Watch, interval: float) -> _Channel:
        """A new relay: subscribed, its head check and reader started."""
        inbox = await self.house.broker.subscribe([name])
        channel = _Channel(inbox, watch.task_pk, watch.session_pk)
        channel.heads.enter_context(self.house.heads.watching(channel, interval))
        channel.reader = asyncio.create_task(self._read(channel), name="runstate-relay")
        channel.reader.add_done_callback(partial(self._reader_ended, channel))
        self._channels[name] = channel
        return channel

    def _close_if_idle(self, channel: _Channel) -> None:
        """Close a relay that nobody has followed for ``LINGER_SECONDS``: its reader,
        inbox, timer and head check. Handed back all at once (a resync), its
        followers are back within moments: kept open meanwhile, the relay's
        subscription spares the broker an UNSUBSCRIBE and a SUBSCRIBE of the
        channel each time, which during a Redis outage left a server subscribed
        to nothing while it believed otherwise (test_scaleout's outage, under
        load)."""
        if channel.members or self._channels.get(channel.name) is not channel:
            return
        if channel.linger is None:
            channel.linger = asyncio.get_running_loop().call_later(
                LINGER_SECONDS, self._close, channel
            )

    def _close(self, channel: _Channel) -> None:
        channel.linger = None
        if channel.members or self._channels.get(channel.name) is not channel:
            return
        del self._channels[channel.name]
        channel.heads.close()
        if channel.expiry is not None:
            channel.expiry.cancel()
        if channel.reader is not None:
            channel.reader.cancel()
        task = asyncio.get_running_loop().create_task(
            self.house.broker.unsubscribe(channel.inbox), name="runstate-relay-close"
        )
        task.add_done_callback(_retrieved)

    async def _read(self, channel: _Channel) -> None:
        while True:
            message = await channel.inbox.next(QUIET_SECONDS)
            if message is None:
                continue
            if isinstance(message, Resync):
                for member in tuple(channel.members):
                    self._hand_back(member, "resync")
                continue
            event = self.house.decoded(message)
            if event is None or not channel.carries(event):
                continue
            try:
                await self._deliver(channel, event)
            except Exception:  # the streams answer on their own; the relay goes on
                log.exception("relay of %s failed", channel.name)
                for member in tuple(channel.members):
                    self._hand_back(member, "unshared")
            if not len(channel.inbox):
                self.flush()

    def _reader_ended(self, channel: _Channel, reader: asyncio.Task[None]) -> None:
        """A reader ends only when its relay closes; should one fail, its followers
        are handed back and the relay closed at once, so that none waits for
        events it will never read, nor parks with it again."""
        if reader.cancelled():
            return
        log.error("relay of %s stopped", channel.name, exc_info=reader.exception())
        for member in tuple(channel.members):
            self._hand_back(member, "unshared")
        self._close(channel)

    async def _deliver(self, channel: _Channel, event: EventView) -> None:
        """One event to every follower that needs it next (see the module's
        docstring): each key rendered once, then every send with no await between."""
        rendered: dict[Hashable, bytes | None] = {}
        while True:
            due = [m for m in channel.members if m.sent(event.task_pk) < event.seq]
            unrendered = next((m for m in due if m.follower.key not in rendered), None)
            if unrendered is None:
                break
            self.renders += 1
            rendered[unrendered.follower.key] = await unrendered.follower.render(event)
        if due:
            self.house.metrics.delivery_seconds.observe(lag(event))
        at = event.at.timestamp()
        for member in due:
            data = rendered[member.follower.key]
            if member.sent(event.task_pk) != event.seq - 1:
                self._hand_back(member, "gap")
            elif at >= member.expires:
                self._hand_back(member, "expiry")
            elif data is None:
                self._hand_back(member, "unshared")
            else:
                sent = member.follower.send(data)
                self.sent += sent is not False
                if sent is True:
                    member.advance(event)
                elif sent is False:
                    self._drop(member, "closed")
                else:
                    member.advance(event)
                    self._hand_back(member, "slow", sent)


def _nothing() -> None:
    """A relay's ``flush`` where sends write at once."""


def _retrieved(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("closing a relay's subscription failed: %s", task.exception())
