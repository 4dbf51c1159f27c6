"""The SDK's graphql-transport-ws client (``runstate.client.watching``) against a
scripted server on loopback: the protocol's corners runstate's own server seldom
shows (pings, a late message of an ended subscription, errors in a result, a
message the protocol does not allow). The watch over runstate's server, its
reconnects and refusals, is tested in test_sdk.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from runstate.client.watching import PROTOCOL, BrokenProtocolError, QueryError, Subscriptions

Script = Callable[[ServerConnection], Awaitable[None]]


async def received(socket: ServerConnection) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(await socket.recv())
    return message


async def send(socket: ServerConnection, **message: Any) -> None:
    await socket.send(json.dumps(message))


@asynccontextmanager
async def scripted(script: Script) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A server that acknowledges the client's init and then runs ``script``; its
    URL, and what the script saw go wrong (empty when all went as scripted)."""
    wrong: list[dict[str, Any]] = []

    async def handler(socket: ServerConnection) -> None:
        init = await received(socket)
        if init != {"type": "connection_init", "payload": {"authorization": "Bearer t"}}:
            wrong.append(init)
        await script(socket)

    async with serve(handler, "127.0.0.1", 0, subprotocols=[PROTOCOL]) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/graphql", wrong


async def test_pings_are_answered_before_the_ack_and_between_results() -> None:
    """Guards ``Subscriptions._answered``'s pong: the protocol lets a server ping
    at any time and close a client that never answers; a client that took a ping
    for a broken message would drop every watch of such a server."""
    pongs: list[dict[str, Any]] = []

    async def script(socket: ServerConnection) -> None:
        await send(socket, type="ping")
        pongs.append(await received(socket))
        await send(socket, type="connection_ack")
        subscribe = await received(socket)
        await send(socket, id=subscribe["id"], type="next", payload={"data": {"n": 1}})
        await send(socket, type="ping")
        pongs.append(await received(socket))
        await send(socket, id=subscribe["id"], type="next", payload={"data": {"n": 2}})
        await send(socket, id=subscribe["id"], type="complete")

    async with scripted(script) as (url, wrong), Subscriptions(url, "t") as socket:
        found = [data async for data in socket.subscribe("subscription { n }", {})]
    assert found == [{"n": 1}, {"n": 2}]
    assert pongs == [{"type": "pong"}, {"type": "pong"}]
    assert wrong == []


async def test_a_late_message_of_an_ended_subscription_is_left_aside() -> None:
    """Guards that a message naming another subscription's id (the ``complete`` of
    one the server refused, arriving after the next one started: a rate-limited
    watch subscribes again on the same socket) is not taken for the running one's
    and breaks nothing."""

    async def script(socket: ServerConnection) -> None:
        await send(socket, type="connection_ack")
        first = await received(socket)
        await send(socket, id=first["id"], type="error", payload=[{"message": "wait"}])
        second = await received(socket)
        await send(socket, id=first["id"], type="complete")
        await send(socket, id=second["id"], type="next", payload={"data": {"n": 3}})
        await send(socket, id=second["id"], type="complete")

    async with scripted(script) as (url, _), Subscriptions(url, "t") as socket:
        with pytest.raises(QueryError) as refused:
            async for _ in socket.subscribe("subscription { n }", {}):
                pass
        assert refused.value.errors == [{"message": "wait"}]
        found = [data async for data in socket.subscribe("subscription { n }", {})]
    assert found == [{"n": 3}]


async def test_errors_in_a_result_raise_query_error_with_them() -> None:
    """Guards that a ``next`` carrying ``errors`` (an error raised while the
    subscription ran: a session that expired) raises them, not yields ``data``."""
    errors = [{"message": "expired", "extensions": {"code": "SESSION_EXPIRED"}}]

    async def script(socket: ServerConnection) -> None:
        await send(socket, type="connection_ack")
        subscribe = await received(socket)
        await send(
            socket, id=subscribe["id"], type="next", payload={"data": None, "errors": errors}
        )

    async with scripted(script) as (url, _), Subscriptions(url, "t") as socket:
        with pytest.raises(QueryError) as refused:
            async for _ in socket.subscribe("subscription { n }", {}):
                pass
    assert refused.value.errors == errors


async def test_a_message_the_protocol_does_not_allow_breaks_the_connection() -> None:
    """Guards ``BrokenProtocolError``: a message of no subscription that is neither
    a ping nor a pong (or no graphql-transport-ws message at all) is not skipped:
    the watch drops the socket and subscribes again after its last seq."""

    async def script(socket: ServerConnection) -> None:
        await send(socket, type="connection_ack")
        await received(socket)
        await send(socket, type="next", payload={"data": {"n": 4}})

    async with scripted(script) as (url, _), Subscriptions(url, "t") as socket:
        with pytest.raises(BrokenProtocolError, match="unexpected message: next"):
            async for _ in socket.subscribe("subscription { n }", {}):
                pass
