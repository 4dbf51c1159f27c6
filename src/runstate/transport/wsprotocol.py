"""uvicorn's WebSocket protocol (websockets' sans-I/O one, which uvicorn picks by
default), keeping less of each open connection.

With thousands of idle subscribers, what uvicorn keeps for each connection is
most of what each costs the server (``bench.memory``). Two parts of it are
larger than they need be: the opening handshake's request and response (their
header structures, several KB), which uvicorn reads only while the handshake is
under way and keeps for the connection's life; and the inbox of messages for
the app, an ``asyncio.Queue`` (three deques, about 2 KB) where one list and one
future do for its single reader.

Idle, what such a server does is mostly keepalive: uvicorn pings every socket
every ``ws_ping_interval`` (20 s), each ping a write, a pong to parse and two
timers, about half of the server's idle CPU with 10,000 sockets open (py-spy).
A peer heard from within the interval (its messages, its own pings, as clients
on websockets' library send every 20 s) is known to be there: its ping waits
until an interval has passed without a word from it.
"""

from __future__ import annotations

import asyncio
import struct
import weakref
from collections.abc import Sequence
from functools import partial
from typing import Any

from uvicorn._types import ASGIReceiveEvent, ASGISendEvent
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.http11 import Request
from websockets.protocol import Protocol, State

from runstate.transport.admission import ADMISSION, VOUCH

WRITE_TEXT = "runstate.write_text"
"""The scope extension naming a connection's ``WebSocketProtocol.write_text``."""


class Inbox:
    """What uvicorn's protocol uses of ``asyncio.Queue``: ``put_nowait``, ``get`` and
    ``empty``, unbounded, for one reader at a time (the app's ``receive``)."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[ASGIReceiveEvent] = []
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: ASGIReceiveEvent) -> None:
        self._items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def get(self) -> ASGIReceiveEvent:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.pop(0)

    def empty(self) -> bool:
        return not self._items


class WebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's, with a lighter inbox, letting the handshake's request and
    response go once it is done, and pinging only peers it has not heard from."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue = Inbox()  # type: ignore[assignment]
        self.heard = self.loop.time()
        """When data last came from the peer (the loop's clock)."""
        self.corked = False
        """Whether frames from ``write_text`` wait for the loop's next turn."""

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:
            scope["extensions"][WRITE_TEXT] = self.write_text
            admission = self.app_state.get(ADMISSION)
            if admission is not None:
                scope["extensions"][VOUCH] = partial(admission.vouch, self.transport)

    def connection_lost(self, exc: Exception | None) -> None:
        admission = self.app_state.get(ADMISSION)
        if admission is not None:  # admitted by the HTTP protocol it was upgraded from
            admission.leave(self.transport)
        super().connection_lost(exc)

    def write_text(self, *parts: bytes) -> bool | None:
        """A text frame of ``parts`` (UTF-8, joined) on its way to the socket past
        the ASGI send chain: True; False once the connection is closing or closed;
        None while the transport is paused (past its high-water mark), when the
        frame is to go the ASGI way, which waits.

        The frame's header is made here and the parts follow it as they are: one
        event rendered once goes to every follower's buffer without being copied,
        encoded or framed again for each (websockets' ``send_text`` did all three:
        about 4 microseconds a follower against 1, ``bench.frames``). The
        frame is never compressed: the server does not offer permessage-deflate
        (``app.server_options``), and RFC 7692 lets any message go uncompressed.

        The frame waits in the connection's own buffer until ``uncork_all`` (the
        relay calls it once it has sent what it read) or the loop's next turn, and
        goes with every other frame written to this socket until then, in one
        write: several subscriptions of one socket, or several events read at
        once, cost one system call. uvicorn's send drains the same buffer in order
        before anything it writes, so no frame overtakes another."""
        if self.close_sent or self.disconnected or not self.handshake_complete:
            return False
        if not self.writable.is_set():
            return None
        conn = self.conn
        if conn.state is not State.OPEN:
            return False
        queue_text(conn, parts)
        if not self.corked:
            self.corked = True
            corked = _CORKED.get(self.loop)
            if corked is None:
                corked = _CORKED[self.loop] = []
                self.loop.call_soon(_uncork, self.loop)
            corked.append(self)
        return True

    def uncork(self) -> None:
        """Write what ``write_text`` left in the connection's buffer."""
        self.corked = False
        output = self.conn.data_to_send()
        if output and not self.transport.is_closing():
            self.transport.write(b"".join(output))

    def data_received(self, data: bytes) -> None:
        self.heard = self.loop.time()
        super().data_received(data)

    def send_keepalive_ping(self) -> None:
        """uvicorn's ping, unless the peer was heard from within the interval: then
        the ping is due an interval after that."""
        assert self.ping_interval is not None
        quiet = self.loop.time() - self.heard
        if quiet < self.ping_interval:
            self.ping_timer = self.loop.call_later(
                self.ping_interval - quiet, self.send_keepalive_ping
            )
            return
        super().send_keepalive_ping()

    async def send(self, message: ASGISendEvent) -> None:
        opening = not self.handshake_complete
        await super().send(message)
        if opening and self.handshake_complete:
            del self.request, self.response


def queue_text(conn: Protocol, parts: Sequence[bytes]) -> None:
    """One final text frame of ``parts`` (joined) queued on ``conn``'s output, as
    its ``send_text`` would, with the parts as they are (see ``write_text``)."""
    conn.writes.append(text_header(sum(map(len, parts))))
    conn.writes.extend(parts)


def text_header(length: int) -> bytes:
    """The header of an unmasked, final text frame of ``length`` bytes, as a server
    sends it (RFC 6455, 5.2)."""
    if length < 126:
        return bytes((0x81, length))
    if length < 1 << 16:
        return struct.pack("!BBH", 0x81, 126, length)
    return struct.pack("!BBQ", 0x81, 127, length)


_CORKED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[WebSocketProtocol]] = (
    weakref.WeakKeyDictionary()
)
"""Each loop's connections with frames waiting for its next turn: one callback a
turn writes them all, not one a socket."""


def _uncork(loop: asyncio.AbstractEventLoop) -> None:
    for protocol in _CORKED.pop(loop, ()):
        protocol.uncork()


def uncork_all() -> None:
    """Write now every frame ``write_text`` left waiting on the running loop."""
    _uncork(asyncio.get_running_loop())
