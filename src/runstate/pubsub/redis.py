"""The Redis broker: one pub/sub connection per process, read by one task.

Redis pub/sub drops messages silently while a connection is down, and redis-py
reconnects and resubscribes on its own. Both ways back (our own reconnect after
an error, and redis-py's silent one, seen through ``on_connect``) flag every
local subscription for a resync, so readers catch up from the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from runstate.pubsub.broker import DEFAULT_INBOX, Broker

log = logging.getLogger(__name__)

_FAILURES = (RedisError, OSError, TimeoutError)
SUBSCRIBE_TIMEOUT = 2.0
MAX_BACKOFF = 2.0


class _PubSub(PubSub):
    """redis-py's PubSub, telling us when it has reconnected by itself."""

    def __init__(self, on_reconnect: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_reconnect = on_reconnect

    async def on_connect(self, connection: Any) -> None:
        await super().on_connect(connection)
        self._on_reconnect()


class RedisBroker(Broker):
    """Pub/sub across server processes through one Redis."""

    def __init__(self, url: str, prefix: str, inbox_size: int = DEFAULT_INBOX) -> None:
        super().__init__(inbox_size)
        self.url = url
        self.prefix = prefix
        self.reconnects = 0
        self._client: Redis = Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=2.0)
        self._pubsub = self._new_pubsub()
        self._broken = False
        self._wake = asyncio.Event()
        self._confirmations: dict[str, asyncio.Future[None]] = {}
        self._reader: asyncio.Task[None] | None = None

    def _new_pubsub(self) -> _PubSub:
        return _PubSub(self._reconnected, connection_pool=self._client.connection_pool)

    def _reconnected(self) -> None:
        self.reconnects += 1
        log.warning("redis pub/sub reconnected; subscribers catch up from the database")
        self._resync_all()

    async def start(self) -> None:
        self._reader = asyncio.create_task(self._read(), name="runstate-redis-reader")

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        await _close_quietly(self._pubsub)
        with contextlib.suppress(*_FAILURES):
            await self._client.aclose()

    async def publish(self, channel: str, data: bytes) -> None:
        await self._client.publish(self.prefix + channel, data)

    async def _listen(self, channel: str) -> None:
        """Subscribe, and wait until Redis confirms, so nothing published after
        ``subscribe`` returns is missed."""
        name = self.prefix + channel
        confirmed = self._confirmations.setdefault(name, asyncio.get_running_loop().create_future())
        try:
            await asyncio.wait_for(self._pubsub.subscribe(name), SUBSCRIBE_TIMEOUT)
            self._wake.set()
            await asyncio.wait_for(asyncio.shield(confirmed), SUBSCRIBE_TIMEOUT)
        except _FAILURES as error:
            log.warning("redis subscribe failed (%s); will resubscribe on reconnect", error)
            self._break()
        finally:
            self._confirmations.pop(name, None)

    async def _unlisten(self, channel: str) -> None:
        if self._broken:
            return
        try:
            await asyncio.wait_for(
                self._pubsub.unsubscribe(self.prefix + channel), SUBSCRIBE_TIMEOUT
            )
        except _FAILURES:
            self._break()

    def _break(self) -> None:
        """Have the reader replace the pub/sub connection."""
        self._broken = True
        self._wake.set()

    async def _read(self) -> None:
        while True:
            if self._broken:
                await self._reconnect()
                continue
            if not self._pubsub.subscribed:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                message = await self._pubsub.get_message(timeout=1.0)
            except _FAILURES as error:
                log.warning("redis pub/sub connection lost (%s)", error)
                self._broken = True
                continue
            if message is None:
                continue
            channel = message["channel"].decode()
            if message["type"] == "subscribe":
                confirmed = self._confirmations.get(channel)
                if confirmed is not None and not confirmed.done():
                    confirmed.set_result(None)
            elif message["type"] == "message" and channel.startswith(self.prefix):
                self._dispatch(channel[len(self.prefix) :], message["data"])

    async def _reconnect(self) -> None:
        """A fresh pub/sub connection subscribed to every wanted channel, then a resync."""
        await _close_quietly(self._pubsub)
        delay = 0.05
        while True:
            await asyncio.sleep(delay)
            self._pubsub = self._new_pubsub()
            channels = [self.prefix + c for c in self.channels]
            try:
                if channels:
                    await asyncio.wait_for(self._pubsub.subscribe(*channels), SUBSCRIBE_TIMEOUT)
                break
            except _FAILURES:
                await _close_quietly(self._pubsub)
                delay = min(delay * 2, MAX_BACKOFF)
        self._broken = False
        self._reconnected()


async def _close_quietly(pubsub: PubSub) -> None:
    with contextlib.suppress(*_FAILURES):
        await pubsub.aclose()  # type: ignore[no-untyped-call]
