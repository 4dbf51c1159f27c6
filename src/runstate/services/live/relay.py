"""Live events relayed to every caught-up taskProgress stream of a task at once.

A stream that has sent everything stored and has nothing waiting hands its live
delivery to the house's ``Relay`` (``follow``) and sleeps until handed it back.
Per task, the relay holds one broker subscription and one reader, in place of a
wakeup, a check and a send of each stream per event: for each event it asks one
follower of each ``key`` to ``render`` it (followers of one key render it the
same), then has every follower ``send`` that text, in one pass with no awaits,
each only if the event is the very next one it needs. What it cannot do for a
follower it hands back to the follower's stream, which answers as it always has,
from the database:

- ``"gap"``: the event is not the next one the follower needs (an event was lost
  on the way, or the follower came in behind);
- ``"resync"``: the relay's own inbox overflowed or the broker reconnected (and
  the head checks flag the relay's inbox as they flag a stream's);
- ``"expiry"``: the event was written at or past the session's expiry as the
  stream last read it, or that time has come: the stream reads the session again;
- ``"unshared"``: the event renders with errors (or not at all): the stream sends
  it itself, with the masking and formatting of its own path;
- ``"slow"``: the socket could not take the frame at once; the frame goes on its
  way and the stream, once it is out, goes on from its own inbox, whose bounds
  are the slow-subscriber policy (``pubsub.broker``);
- ``"closed"``: the operation or its socket has ended.

While it follows, a stream's own inbox is off the broker's list and its watch
off the head checks': the relay's inbox and watch stand for all of them. Back
from the relay, the stream is on both again before anything more is dispatched
(no await in between), and reads what it missed from the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from runstate import inflight
from runstate.metrics import DELIVERY_SECONDS
from runstate.pubsub.broker import Resync, Subscription
from runstate.services.clock import utcnow
from runstate.services.live.catch_up import Watch
from runstate.services.live.messages import task_channel
from runstate.services.views import EventView

if TYPE_CHECKING:
    from runstate.services.house import House

log = logging.getLogger(__name__)

QUIET_SECONDS = 60.0
"""How long the relay's reader waits at a time; the head checks flag its inbox."""

Sent = bool | Awaitable[object]
"""What a follower's ``send`` did: True when the frame is written, False when the
operation or its socket has ended, an awaitable when the frame is on its way to a
socket that could not take it at once (done once it is out)."""


class Follower(Protocol):
    """What a stream lends the relay: how its events render, and where they go."""

    @property
    def key(self) -> Hashable:
        """Followers with equal keys render an event to the same text."""

    async def render(self, event: EventView) -> str | None:
        """The event's answer for this follower's selection, as the JSON text of a
        ``next`` message's data; None when it cannot be shared (errors)."""

    def send(self, text: str) -> Sent:
        """Write the rendered event to the follower's socket without waiting."""


def lag(event: EventView) -> float:
    """Seconds from the write of a live event to now (clocks of servers differ a
    little: never below 0)."""
    return max(0.0, (utcnow() - event.at).total_seconds())


@dataclass(eq=False)
class _Member:
    follower: Follower
    watch: Watch
    returned: asyncio.Future[str]
    """Set with the reason once the relay hands the stream its delivery back."""
    sending: Awaitable[object] | None = None
    """A frame still on its way to a slow socket."""
    expires: float = math.inf
    """The watch's ``expires_at`` as a timestamp, read when it began to follow (a
    stream re-reads its session only while not following)."""

    def hand_back(self, reason: str) -> None:
        if not self.returned.done():
            self.returned.set_result(reason)


@dataclass(eq=False)
class _Channel:
    """One task's relay: its inbox, reader and followers."""

    task_pk: int
    inbox: Subscription
    watch: Watch
    members: set[_Member] = field(default_factory=set)
    reader: asyncio.Task[None] | None = None
    heads: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)


class Relay:
    """The task relays of one house (see the module's docstring)."""

    def __init__(self, house: House) -> None:
        self.house = house
        self.renders = 0
        """Events rendered for a key (each shared by that key's followers)."""
        self.sent = 0
        """Frames the relay wrote (or set on their way) to followers."""
        self.returned: Counter[str] = Counter()
        """Deliveries handed back to their streams, by reason."""
        self._channels: dict[int, _Channel] = {}
        self._opening: dict[int, asyncio.Future[_Channel]] = {}

    def following(self, task_pk: int) -> int:
        """How many streams of the task follow the relay now."""
        channel = self._channels.get(task_pk)
        return 0 if channel is None else len(channel.members)

    async def follow(self, watch: Watch, follower: Follower, interval: float) -> str:
        """Deliver the task's live events to ``follower`` from ``watch.last`` on,
        until handed back; the reason (see the module's docstring). The stream's
        inbox must be empty when it calls: else (it filled while the relay's own
        subscription was being opened) the answer is ``"pending"`` at once."""
        assert watch.task_pk is not None
        channel = await self._channel(watch.task_pk, interval)
        if len(watch.inbox) or watch.inbox.flagged:
            self._close_if_idle(channel)
            return "pending"
        loop = asyncio.get_running_loop()
        member = _Member(follower, watch, loop.create_future())
        if watch.expires_at is not None:
            member.expires = watch.expires_at.timestamp()
        broker = self.house.broker
        broker.set_aside(watch.inbox)
        channel.members.add(member)
        # What the follower has sent is stored: the head checks must not take the
        # relay for behind it (and send every follower back to the database).
        channel.watch.last = max(channel.watch.last, watch.last)
        try:
            reason = await self._followed(member)
            self.returned[reason] += 1
            return reason
        finally:
            channel.members.discard(member)
            broker.put_back(watch.inbox)
            self._close_if_idle(channel)
            if member.sending is not None:
                await member.sending  # the stream's next frame goes after it

    @staticmethod
    async def _followed(member: _Member) -> str:
        """Why the relay handed ``member`` back, or ``"expiry"`` once its session's
        expiry (as its stream last read it) has come."""
        expires_at = member.watch.expires_at
        if expires_at is None:
            return await member.returned
        try:
            async with asyncio.timeout(max(0.0, (expires_at - utcnow()).total_seconds())):
                return await asyncio.shield(member.returned)
        except TimeoutError:
            return "expiry"

    async def _channel(self, task_pk: int, interval: float) -> _Channel:
        """The task's relay, opened (subscribed, its reader started) if need be."""
        channel = self._channels.get(task_pk)
        if channel is not None:
            return channel
        opening = self._opening.get(task_pk)
        if opening is not None:
            return await asyncio.shield(opening)
        future: asyncio.Future[_Channel] = asyncio.get_running_loop().create_future()
        self._opening[task_pk] = future
        opened = self._open(task_pk, interval)
        return await inflight.shared(future, opened, lambda: self._opening.pop(task_pk, None))

    async def _open(self, task_pk: int, interval: float) -> _Channel:
        """A new relay for the task: subscribed, its head check and reader started."""
        inbox = await self.house.broker.subscribe([task_channel(task_pk)])
        channel = _Channel(task_pk, inbox, Watch(inbox, task_pk=task_pk))
        channel.heads.enter_context(self.house.heads.watching(channel.watch, interval))
        channel.reader = asyncio.create_task(self._read(channel), name="runstate-relay")
        self._channels[task_pk] = channel
        return channel

    def _close_if_idle(self, channel: _Channel) -> None:
        """Close a relay that no stream follows: its reader, inbox and head check."""
        if channel.members or self._channels.get(channel.task_pk) is not channel:
            return
        del self._channels[channel.task_pk]
        channel.heads.close()
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
                    member.hand_back("resync")
                continue
            event = self.house.decoded(message)
            if event is None or event.task_pk != channel.task_pk:
                continue
            channel.watch.last = max(channel.watch.last, event.seq)
            try:
                await self._deliver(channel, event)
            except Exception:  # the streams answer on their own; the relay goes on
                log.exception("relay of task %s failed", channel.task_pk)
                for member in tuple(channel.members):
                    member.hand_back("unshared")

    async def _deliver(self, channel: _Channel, event: EventView) -> None:
        """One event to every follower that needs it next (see the module's
        docstring): each key rendered once, then every send with no await between."""
        rendered: dict[Hashable, str | None] = {}
        while True:
            due = [m for m in channel.members if m.watch.last < event.seq]
            unrendered = next((m for m in due if m.follower.key not in rendered), None)
            if unrendered is None:
                break
            self.renders += 1
            rendered[unrendered.follower.key] = await unrendered.follower.render(event)
        if due:
            DELIVERY_SECONDS.observe(lag(event))
        at = event.at.timestamp()
        for member in due:
            text = rendered[member.follower.key]
            if member.watch.last != event.seq - 1:
                member.hand_back("gap")
            elif at >= member.expires:
                member.hand_back("expiry")
            elif text is None:
                member.hand_back("unshared")
            else:
                sent = member.follower.send(text)
                self.sent += sent is not False
                if sent is True:
                    member.watch.last = event.seq
                elif sent is False:
                    member.hand_back("closed")
                else:
                    member.watch.last = event.seq
                    member.sending = sent
                    member.hand_back("slow")


def _retrieved(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("closing a relay's subscription failed: %s", task.exception())
