"""Publishing after commit without ever holding up the writer.

Mutations hand messages to ``Publisher.publish``, which only appends to a queue
bounded in messages and in bytes; one task sends them in order. When the broker fails, messages
are dropped for a short pause instead of piling up: the database is the source
of truth, and subscribers catch up from it. Dropped for other processes only:
this process's subscribers have every message at once (``Broker.publish``,
``Broker.deliver_here``), so a Redis outage costs live delivery between
processes and nothing within one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from runstate.pubsub.broker import Broker

log = logging.getLogger(__name__)

QUEUE_SIZE = 10_000
QUEUE_BYTES = 64 * 1024 * 1024
SEND_TIMEOUT = 1.0
PAUSE_AFTER_FAILURE = 0.5


class Publisher:
    """An ordered, bounded, fire-and-forget outbox in front of a broker."""

    def __init__(self, broker: Broker, max_bytes: int = QUEUE_BYTES) -> None:
        self.broker = broker
        self.max_bytes = max_bytes
        self.bytes = 0
        """Bytes of the messages waiting to be sent."""
        self.sent = 0
        self.dropped = 0
        self._queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue(QUEUE_SIZE)
        self._paused_until = 0.0
        self._task: asyncio.Task[None] | None = None

    def publish(self, channel: str, data: bytes) -> None:
        """Queue ``data`` for ``channel``; never waits. A full queue drops it."""
        if self.bytes + len(data) > self.max_bytes:
            self.dropped += 1
            return
        try:
            self._queue.put_nowait((channel, data))
        except asyncio.QueueFull:
            self.dropped += 1
            return
        self.bytes += len(data)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="runstate-publisher")

    async def close(self) -> None:
        """Send what is queued (briefly), then stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), SEND_TIMEOUT)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            channel, data = await self._queue.get()
            try:
                await self._send(channel, data)
            finally:
                self.bytes -= len(data)
                self._queue.task_done()

    async def _send(self, channel: str, data: bytes) -> None:
        if time.monotonic() < self._paused_until:
            self.broker.deliver_here(channel, data)  # this process's subscribers still hear it
            self.dropped += 1
            return
        try:
            # Inline, not wait_for's task of its own: woken as a write completes, the
            # publisher sends before the writer's answer is made, not a turn after it.
            async with asyncio.timeout(SEND_TIMEOUT):
                await self.broker.publish(channel, data)
            self.sent += 1
        except Exception as error:  # any broker failure: drop, pause, carry on
            self.dropped += 1
            self._paused_until = time.monotonic() + PAUSE_AFTER_FAILURE
            log.warning("publish to the broker failed (%s); subscribers will catch up", error)
