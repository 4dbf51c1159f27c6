"""The Redis broker: one pub/sub connection per process, read by one task.

Redis pub/sub drops messages silently while a connection is down, and redis-py
reconnects and resubscribes on its own (on the next read after a failure). Its
``on_connect`` hook is where the broker learns of every such reconnect, and it
flags every local subscription for a resync, so readers catch up from the
database. Channels whose SUBSCRIBE failed (Redis was down) are subscribed again
by the reader as soon as Redis answers, followed by a resync as well. Every
SUBSCRIBE and UNSUBSCRIBE goes through ``_reconcile``, one at a time and out of
reach of a leaving caller's cancellation, so Redis ends subscribed to exactly
the channels that have local subscribers.

A message published here reaches this process's subscribers at once
(``Broker.publish``); the copy Redis sends back to this process's own pub/sub
connection is recognised (``_echoed``) and dropped, as Phoenix.PubSub drops
its own node's broadcasts. Should one be delivered all the same (a publish
that failed after all reached Redis), it is a second copy of an event, which
every stream and relay skips by its seq.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from runstate.pubsub.broker import DEFAULT_INBOX, DEFAULT_INBOX_BYTES, Broker

log = logging.getLogger(__name__)

_FAILURES = (RedisError, OSError, TimeoutError, RuntimeError)
"""What a command or a read on the pub/sub connection raises while Redis is down or
coming back. RuntimeError among them: the reader and a SUBSCRIBE each connecting
the one pub/sub connection at once (redis-py reconnects inside a read) read its
socket together, and the second is refused ("readuntil() called while another
coroutine is already waiting"); the first connects, and the second tries again."""
SUBSCRIBE_TIMEOUT = 2.0
ECHOES = 256
"""Own messages kept per channel until Redis sends them back (``_echoed``)."""
FIRST_BACKOFF = 0.05
MAX_BACKOFF = 2.0


class _PubSub(PubSub):
    """redis-py's PubSub, telling the broker each time it has reconnected."""

    def __init__(self, on_reconnect: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_reconnect = on_reconnect

    async def on_connect(self, connection: Any) -> None:
        await super().on_connect(connection)
        self._on_reconnect()


def key_prefix(installation: str) -> str:
    """What every Redis key and channel of one database's servers starts with, so
    that several databases may share one Redis without mixing."""
    return f"runstate:{installation}:"


class RedisBroker(Broker):
    """Pub/sub across server processes through one Redis."""

    def __init__(
        self,
        url: str,
        prefix: str,
        inbox_size: int = DEFAULT_INBOX,
        inbox_bytes: int = DEFAULT_INBOX_BYTES,
    ) -> None:
        super().__init__(inbox_size, inbox_bytes)
        self.url = url
        self.prefix = prefix
        self.reconnects = 0
        self._client: Redis = Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=2.0)
        self._publishing: Redis = Redis.from_url(
            url, socket_connect_timeout=1.0, socket_timeout=None
        )
        """PUBLISH's own connection, with no socket timeout (not even redis-py's
        default): redis-py runs a write under one in a task of its own
        (``wait_for``), which sent the PUBLISH a loop turn later, after the
        writer's answer was made. The ``Publisher`` bounds each publish with a
        timeout of its own instead."""
        self._pubsub = _PubSub(self._reconnected, connection_pool=self._client.connection_pool)
        self._wake = asyncio.Event()
        self._confirmations: dict[str, asyncio.Future[None]] = {}
        self._confirmed: set[str] = set()
        """Channels Redis has confirmed and not since unsubscribed."""
        self._echoes: dict[str, deque[bytes]] = {}
        """By channel: messages published here, already delivered here, whose copy
        Redis is yet to send back (only for channels Redis has confirmed)."""
        self._commands = asyncio.Lock()
        """One SUBSCRIBE or UNSUBSCRIBE at a time (see ``_reconcile``)."""
        self._reader: asyncio.Task[None] | None = None

    def _reconnected(self) -> None:
        self.reconnects += 1
        self._confirmed.clear()  # redis-py subscribes again; Redis confirms again
        self._echoes.clear()  # what was under way is lost
        log.warning("redis pub/sub reconnected; subscribers catch up from the database")
        self._resync_all()

    async def start(self) -> None:
        self._reader = asyncio.create_task(self._read(), name="runstate-redis-reader")

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        with contextlib.suppress(*_FAILURES):
            await self._pubsub.aclose()
        for client in (self._client, self._publishing):
            with contextlib.suppress(*_FAILURES):
                await client.aclose()

    async def ready(self) -> bool:
        """Whether Redis answers a PING within a second."""
        try:
            async with asyncio.timeout(1.0):
                return bool(await self._client.ping())
        except _FAILURES:
            return False

    async def _send(self, channel: str, data: bytes) -> None:
        name = self.prefix + channel
        echoes = None
        if name in self._confirmed:  # Redis will send it back to this process too
            echoes = self._echoes.setdefault(name, deque(maxlen=ECHOES))
            echoes.append(data)
        try:
            await self._publishing.publish(name, data)
        except BaseException:
            if echoes is not None:  # should it come back, it is delivered again
                with contextlib.suppress(ValueError):
                    echoes.remove(data)
            raise

    def _echoed(self, name: str, data: bytes) -> bool:
        """Whether a message from Redis is the copy of one published here (dropped:
        it was delivered here as it was published). Redis sends messages back in
        the order they were published, so those kept before it will not come."""
        echoes = self._echoes.get(name)
        if not echoes or data not in echoes:
            return False
        while echoes.popleft() != data:
            pass
        if not echoes:
            del self._echoes[name]
        return True

    async def _listen(self, channel: str) -> None:
        """Subscribe, and wait until Redis confirms, so nothing published after
        ``subscribe`` returns is missed. While Redis is down the reader retries."""
        name = self.prefix + channel
        confirmed = self._confirmations.setdefault(name, asyncio.get_running_loop().create_future())
        try:
            await self._settle()
            if name in self._confirmed:
                return  # subscribed already: an UNSUBSCRIBE was about to be sent
            # asyncio.timeout, not wait_for: on Python 3.11, wait_for can swallow a
            # cancellation that lands as the awaited call completes.
            async with asyncio.timeout(SUBSCRIBE_TIMEOUT):
                await asyncio.shield(confirmed)
        except _FAILURES as error:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError from error
            log.warning("redis subscribe failed (%s); retrying when redis answers", error)
            self._wake.set()
        finally:
            self._confirmations.pop(name, None)

    async def _unlisten(self, channel: str) -> None:
        with contextlib.suppress(*_FAILURES):
            await self._settle()

    async def _settle(self) -> None:
        """``_reconcile`` in a task of its own: a caller that leaves meanwhile (its
        client disconnected) does not stop it halfway through a command."""
        await asyncio.shield(asyncio.ensure_future(self._reconcile()))

    async def _reconcile(self) -> None:
        """Make the pub/sub connection's channels the wanted ones: SUBSCRIBE those
        missing, UNSUBSCRIBE those no longer wanted.

        Each call works from the wanted channels as they are when it runs, one at a
        time, so however subscribers come and go (and are cancelled), the last call
        leaves Redis subscribed to exactly the wanted channels. A SUBSCRIBE
        interrupted inside redis-py used to leave Redis subscribed with no local
        subscriber at all: redis-py had lost track of it.

        The connection is made first, before redis-py's state is read: made by the
        command itself, redis-py's reconnect (``on_connect``) cleared the pending
        unsubscriptions, the UNSUBSCRIBE's own included, and its reply then left
        the channel in redis-py's ``channels``: the broker took the channel for
        subscribed while Redis had let it go.
        """
        async with self._commands, asyncio.timeout(SUBSCRIBE_TIMEOUT):
            await self._pubsub.connect()  # type: ignore[no-untyped-call]
            wanted = {self.prefix + c for c in self.channels}
            pending = {_text(c) for c in self._pubsub.pending_unsubscribe_channels}
            have = {_text(c) for c in self._pubsub.channels} - pending
            missing, extra = sorted(wanted - have), sorted(have - wanted)
            if missing:
                await self._pubsub.subscribe(*missing)
                self._wake.set()
            if extra:
                self._confirmed.difference_update(extra)
                for name in extra:
                    self._echoes.pop(name, None)
                await self._pubsub.unsubscribe(*extra)

    def _missing(self) -> list[str]:
        """Wanted channels that the pub/sub connection is not subscribed to, leaving
        out those a ``_listen`` is subscribing right now."""
        have = {_text(c) for c in self._pubsub.channels} | self._confirmations.keys()
        return [name for c in self.channels if (name := self.prefix + c) not in have]

    async def _read(self) -> None:
        backoff = FIRST_BACKOFF
        while True:
            try:
                if self._missing():
                    await self._settle()
                    self._resync_all()
                if not self._pubsub.subscribed:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                message = await self._pubsub.get_message(timeout=1.0)
            except _FAILURES as error:
                log.warning("redis pub/sub unavailable (%s); retrying in %.2fs", error, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            backoff = FIRST_BACKOFF
            if message is not None:
                self._handle(message)

    def _handle(self, message: dict[str, Any]) -> None:
        channel = message["channel"].decode()
        if message["type"] == "subscribe":
            self._confirmed.add(channel)
            confirmed = self._confirmations.get(channel)
            if confirmed is not None and not confirmed.done():
                confirmed.set_result(None)
        elif message["type"] == "unsubscribe":
            self._confirmed.discard(channel)
            self._echoes.pop(channel, None)
        elif (
            message["type"] == "message"
            and channel.startswith(self.prefix)
            and not self._echoed(channel, message["data"])
        ):
            self.deliver_here(channel[len(self.prefix) :], message["data"])


def _text(channel: str | bytes) -> str:
    """A channel name as redis-py may hold it (bytes once Redis has confirmed it)."""
    return channel.decode() if isinstance(channel, bytes) else channel
