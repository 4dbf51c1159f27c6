"""The SDK's subscriptions: graphql-transport-ws on one ``websockets`` connection.

``Runstate.watch`` follows a task through ``Subscriptions``: the connection opened
with the token (in the upgrade's headers and in ``connection_init``), then one
subscription at a time, its ``next`` messages yielded as their ``data``. A
general GraphQL client (gql) took about twice this one's CPU a watched event
(``docs/performance.md``): it parsed the document, kept a task and a queue per
subscription and checked every message against the protocol's models, where a
watcher needs one socket and a ``json.loads`` a message.

Errors: ``QueryError`` for GraphQL errors answered to a subscription (an ``error``
message, or a ``next`` carrying ``errors``); ``BrokenProtocolError`` for a
message the protocol does not allow; ``websockets``' own exceptions and
``OSError`` for the connection. ``Watch`` turns each into the SDK's exceptions.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, Self

from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

PROTOCOL = Subprotocol("graphql-transport-ws")
ACK_SECONDS = 10.0
"""How long the server has to acknowledge ``connection_init``."""


class QueryError(Exception):
    """GraphQL errors the server answered to a subscription."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors[0].get("message") if errors else "GraphQL error")
        self.errors = errors


class BrokenProtocolError(Exception):
    """A message graphql-transport-ws does not allow here: the connection is dropped."""


class Subscriptions:
    """One graphql-transport-ws connection to ``url`` (``ws://host/graphql``),
    acknowledged before ``async with`` enters; ``subscribe`` runs one subscription
    on it at a time."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token
        self._socket: ClientConnection | None = None
        self._ids = itertools.count(1)

    async def __aenter__(self) -> Self:
        # The upgrade names the token too: the server then charges it to the user's
        # budget, not to the address's anonymous one, which many watchers share.
        authorization = f"Bearer {self.token}"
        self._socket = await connect(
            self.url,
            subprotocols=[PROTOCOL],
            additional_headers={"Authorization": authorization},
        )
        try:
            await self._send(
                {"type": "connection_init", "payload": {"authorization": authorization}}
            )
            async with asyncio.timeout(ACK_SECONDS):
                while (message := await self._receive())["type"] != "connection_ack":
                    await self._answered(message)
        except BaseException:
            await self._socket.close()
            raise
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._socket is not None:
            await self._socket.close()

    async def subscribe(self, query: str, variables: Mapping[str, Any]) -> AsyncIterator[Any]:
        """The ``data`` of each result of the subscription, until the server completes
        it; ``QueryError`` for the errors it answers instead."""
        id_ = str(next(self._ids))
        payload = {"query": query, "variables": dict(variables)}
        await self._send({"id": id_, "type": "subscribe", "payload": payload})
        while True:
            message = await self._receive()
            kind = message["type"]
            if message.get("id") != id_:
                await self._answered(message)
            elif kind == "next":
                result = message.get("payload") or {}
                if result.get("errors"):
                    raise QueryError(list(result["errors"]))
                yield result.get("data")
            elif kind == "error":
                raise QueryError(list(message.get("payload") or []))
            elif kind == "complete":
                return
            else:
                raise BrokenProtocolError(f"unexpected message: {kind}")

    async def _answered(self, message: dict[str, Any]) -> None:
        """A message outside the running subscription: a ping is answered; a pong, or
        what comes late for a subscription that ended, ignored; anything else breaks
        the protocol."""
        kind = message["type"]
        if kind == "ping":
            await self._send({"type": "pong"})
        elif kind != "pong" and message.get("id") is None:
            raise BrokenProtocolError(f"unexpected message: {kind}")

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._socket is not None
        await self._socket.send(json.dumps(message, separators=(",", ":")))

    async def _receive(self) -> dict[str, Any]:
        assert self._socket is not None
        message = json.loads(await self._socket.recv())
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise BrokenProtocolError(f"not a graphql-transport-ws message: {message!r:.200}")
        return message
