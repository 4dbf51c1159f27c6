"""uvicorn's WebSocket protocol (websockets' sans-I/O one, which uvicorn picks by
default), keeping less of each open connection.

With thousands of idle subscribers, what uvicorn keeps for each connection is
most of what each costs the server (``bench.memory``). Two parts of it are
larger than they need be: the opening handshake's request and response (their
header structures, several KB), which uvicorn reads only while the handshake is
under way and keeps for the connection's life; and the inbox of messages for
the app, an ``asyncio.Queue`` (three deques, about 2 KB) where one list and one
future do for its single reader.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn._types import ASGIReceiveEvent, ASGISendEvent
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol


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
    response go once it is done."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue = Inbox()  # type: ignore[assignment]

    async def send(self, message: ASGISendEvent) -> None:
        opening = not self.handshake_complete
        await super().send(message)
        if opening and self.handshake_complete:
            del self.request, self.response
