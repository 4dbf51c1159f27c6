"""The broker interface: publish bytes to a channel; subscribers read bounded inboxes.

Slow-consumer policy: each subscription holds at most ``maxsize`` messages and
``max_bytes`` bytes of them. When either is reached, the newest message is
dropped and the subscription is flagged for a resync, which its reader sees
before anything else and answers by catching up from the database. The broker's
reader only ever appends to inboxes, so one slow subscriber never holds up
delivery to the others.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Final


class Resync:
    """Marker returned by ``Subscription.next``: messages may have been lost."""

    def __repr__(self) -> str:
        return "RESYNC"


RESYNC: Final = Resync()

DEFAULT_INBOX = 1000
DEFAULT_INBOX_BYTES = 4 * 1024 * 1024


class Subscription:
    """One subscriber's bounded inbox for a set of channels."""

    def __init__(
        self,
        channels: Iterable[str],
        maxsize: int = DEFAULT_INBOX,
        max_bytes: int = DEFAULT_INBOX_BYTES,
    ) -> None:
        self.channels = frozenset(channels)
        self.maxsize = maxsize
        self.max_bytes = max_bytes
        self.dropped = 0
        self.bytes = 0
        """Bytes of the messages waiting in the inbox."""
        self._inbox: deque[bytes] = deque()
        self._resync = False
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._inbox)

    @property
    def flagged(self) -> bool:
        """Whether the reader is to be told of a resync before anything else."""
        return self._resync

    def deliver(self, data: bytes) -> None:
        """Queue a message without ever waiting; a full inbox (by count or by bytes)
        drops it and flags a resync."""
        if len(self._inbox) >= self.maxsize or self.bytes + len(data) > self.max_bytes:
            self.dropped += 1
            self._resync = True
        else:
            self._inbox.append(data)
            self.bytes += len(data)
        self._ready.set()

    def request_resync(self) -> None:
        """Tell the reader that messages may have been lost (a broker reconnect)."""
        self._resync = True
        self._ready.set()

    async def next(self, wait: float) -> bytes | Resync | None:
        """The next message, RESYNC when messages may be missing, or None after ``wait`` s."""
        while True:
            if self._resync:
                self._resync = False
                return RESYNC
            if self._inbox:
                data = self._inbox.popleft()
                self.bytes -= len(data)
                return data
            self._ready.clear()
            try:
                async with asyncio.timeout(wait):  # cheaper than wait_for: no new task
                    await self._ready.wait()
            except TimeoutError:
                return None


class Broker(ABC):
    """Publishes bytes to named channels and fans them out to local subscriptions."""

    def __init__(
        self, inbox_size: int = DEFAULT_INBOX, inbox_bytes: int = DEFAULT_INBOX_BYTES
    ) -> None:
        self.inbox_size = inbox_size
        self.inbox_bytes = inbox_bytes
        self._subscribers: defaultdict[str, set[Subscription]] = defaultdict(set)

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Connect, if the backend needs to."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Disconnect, if the backend needs to."""

    async def ready(self) -> bool:
        """Whether the backend answers now (an in-process broker always does)."""
        return True

    async def publish(self, channel: str, data: bytes) -> None:
        """Send ``data`` to every subscriber of ``channel``: this process's at once,
        other processes' through the backend. Local first: a subscriber on the
        writer's own server does not wait for the backend's round trip, nor for
        the rest of the write's answer to be made while it is under way."""
        self.deliver_here(channel, data)
        await self._send(channel, data)

    @abstractmethod
    async def _send(self, channel: str, data: bytes) -> None:
        """Send ``data`` to the subscribers of ``channel`` in other processes."""

    @abstractmethod
    async def _listen(self, channel: str) -> None:
        """Start receiving ``channel`` from the backend."""

    @abstractmethod
    async def _unlisten(self, channel: str) -> None:
        """Stop receiving ``channel`` from the backend."""

    async def subscribe(
        self, channels: Iterable[str], inbox_size: int | None = None
    ) -> Subscription:
        """A new subscription to ``channels``; listening has begun when this returns."""
        subscription = Subscription(channels, inbox_size or self.inbox_size, self.inbox_bytes)
        try:
            for channel in subscription.channels:
                first = not self._subscribers[channel]
                self._subscribers[channel].add(subscription)
                if first:
                    await self._listen(channel)
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # A backend library may have swallowed the cancellation (redis-py
                # can): the caller left all the same.
                raise asyncio.CancelledError
        except BaseException:
            # The caller left (or listening failed) before it could hold the
            # subscription: take it back, so that no inbox or backend subscription
            # outlives it. Shielded: a cancelled caller still gets the cleanup.
            await asyncio.shield(self.unsubscribe(subscription))
            raise
        return subscription

    async def unsubscribe(self, subscription: Subscription) -> None:
        """Stop delivering to ``subscription``."""
        for channel in subscription.channels:
            subscribers = self._subscribers.get(channel)
            if subscribers is None:
                continue
            subscribers.discard(subscription)
            if not subscribers:
                del self._subscribers[channel]
                await self._unlisten(channel)

    @asynccontextmanager
    async def subscription(
        self, channels: Iterable[str], inbox_size: int | None = None
    ) -> AsyncIterator[Subscription]:
        """``subscribe`` for the duration of a ``with`` block."""
        subscription = await self.subscribe(channels, inbox_size)
        try:
            yield subscription
        finally:
            await self.unsubscribe(subscription)

    @property
    def channels(self) -> frozenset[str]:
        """Channels with at least one local subscriber."""
        return frozenset(self._subscribers)

    def deliver_here(self, channel: str, data: bytes) -> None:
        """Hand ``data`` to this process's subscribers of ``channel`` only."""
        for subscription in tuple(self._subscribers.get(channel, ())):
            subscription.deliver(data)

    def _resync_all(self) -> None:
        for subscribers in self._subscribers.values():
            for subscription in subscribers:
                subscription.request_resync()
