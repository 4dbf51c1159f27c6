"""The SDK's HTTP client (``runstate.client.http``) against a local server of canned
answers: keep-alive reuse, the framings of an answer, a server's close, a timeout,
and the SDK's retry of a 502."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from runstate.client import Runstate
from runstate.client import calls as calls_module
from runstate.client.http import ConnectionFailedError, Connections

Reply = Callable[[asyncio.StreamWriter, int], Awaitable[bool]]
"""Answers the n-th request of a connection; False closes the connection."""
Start = Callable[[Reply], Awaitable[tuple[str, "Canned"]]]
"""Starts a canned server answering with a ``Reply``: its URL and itself."""


def answer(body: bytes, *head: str, status: str = "200 OK") -> bytes:
    """An answer with a Content-Length and ``head``'s extra header lines."""
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *head]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Canned:
    """A server whose ``reply`` answers each request; counts connections and the
    requests each connection carried."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests: list[int] = []
        self.bodies: list[bytes] = []
        self.ended = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.requests.append(0)
        mine = len(self.requests) - 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.bodies.append(await reader.readexactly(length))
                self.requests[mine] += 1
                if not await self.reply(writer, self.requests[mine]):
                    break
                await writer.drain()
        except asyncio.IncompleteReadError:
            self.ended.set()  # the client closed it
        writer.close()


@pytest.fixture
async def serving() -> AsyncIterator[Start]:
    """Starts canned servers; closes them after the test."""
    servers: list[asyncio.Server] = []

    async def start(reply: Reply) -> tuple[str, Canned]:
        canned = Canned(reply)
        server = await asyncio.start_server(canned.serve, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/graphql", canned

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


@pytest.fixture
async def pool() -> AsyncIterator[Connections]:
    connections = Connections()
    yield connections
    await connections.aclose()


async def test_answers_by_length_reuse_one_connection(serving: Start, pool: Connections) -> None:
    """Guards keep-alive: sequential requests share one connection, and the request
    carries its Host, headers and body."""

    async def reply(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(answer(b'{"n": %d}' % n))
        return True

    url, canned = await serving(reply)
    endpoint = pool.endpoint(url, {"Authorization": "Bearer t"})
    for n in (1, 2, 3):
        got = await endpoint.post(b'{"q": 1}', 5)
        assert (got.status, got.reason, json.loads(got.body)) == (200, "OK", {"n": n})
    assert canned.requests == [3]
    assert canned.bodies == [b'{"q": 1}'] * 3


async def test_a_chunked_answer_is_read_whole(serving: Start, pool: Connections) -> None:
    """Guards chunked answers: the chunks joined, the connection kept; one cut off
    mid-chunk by the server's close is an error, not a shorter answer."""

    async def reply(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        if n == 3:
            writer.write(b'5\r\n{"a":')
            return False
        writer.write(b'5\r\n{"a":\r\n3\r\n 1}\r\n0\r\n\r\n')
        return True

    url, canned = await serving(reply)
    endpoint = pool.endpoint(url, {})
    assert (await endpoint.post(b"{}", 5)).body == b'{"a": 1}'
    assert (await endpoint.post(b"{}", 5)).body == b'{"a": 1}'
    assert canned.requests == [2]
    with pytest.raises(ConnectionFailedError, match="mid-answer"):
        await endpoint.post(b"{}", 5)


async def test_connection_close_and_an_answer_until_close(
    serving: Start, pool: Connections
) -> None:
    """Guards the server's close: an answer saying ``Connection: close`` is not
    reused (the next request opens a connection, even though this server left the
    first open), and one without a length ends with its connection."""

    async def reply(writer: asyncio.StreamWriter, n: int) -> bool:
        if len(canned.requests) == 1:
            writer.write(answer(b"closing", "Connection: close"))
            return True
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end")
        return False

    url, canned = await serving(reply)
    endpoint = pool.endpoint(url, {})
    assert (await endpoint.post(b"{}", 5)).body == b"closing"
    assert (await endpoint.post(b"{}", 5)).body == b"to the end"
    assert canned.requests == [1, 1]


async def test_an_idle_connection_the_server_closed_is_replaced_unseen(
    serving: Start, pool: Connections
) -> None:
    """Guards the keep-alive race: the server closes a connection it kept (its
    keep-alive timeout) just as a request reuses it, answering nothing; the request
    is sent again on a new connection and its caller sees only the answer. A new
    connection closed unanswered is an error (the SDK's retries take it)."""

    async def reply(writer: asyncio.StreamWriter, n: int) -> bool:
        if len(canned.requests) == 1 and n == 2:
            return False  # closed as the second request came, unanswered
        if len(canned.requests) == 3:
            return False
        writer.write(answer(b"ok"))
        return True

    url, canned = await serving(reply)
    endpoint = pool.endpoint(url, {})
    assert (await endpoint.post(b"{}", 5)).body == b"ok"
    assert (await endpoint.post(b"{}", 5)).body == b"ok"
    assert canned.requests == [2, 1]

    fresh = Connections()
    try:
        with pytest.raises(ConnectionFailedError):
            await fresh.endpoint(url, {}).post(b"{}", 5)
    finally:
        await fresh.aclose()
    assert canned.requests == [2, 1, 1]


async def test_a_timeout_closes_its_connection(serving: Start, pool: Connections) -> None:
    """Guards the timeout: ``TimeoutError`` after the time given, and the
    connection it hit is closed (its late answer would answer the next request)."""

    async def reply(writer: asyncio.StreamWriter, n: int) -> bool:
        if len(canned.requests) == 2:
            writer.write(answer(b"ok"))
        return True

    url, canned = await serving(reply)
    endpoint = pool.endpoint(url, {})
    with pytest.raises(TimeoutError):
        await endpoint.post(b"{}", 0.2)
    await asyncio.wait_for(canned.ended.wait(), 5)
    assert (await endpoint.post(b"{}", 5)).body == b"ok"
    assert canned.requests == [1, 1]


async def test_busy_connections_are_not_shared(serving: Start, pool: Connections) -> None:
    """Guards one request in flight per connection: concurrent requests each get a
    connection, and then reuse them."""
    release = asyncio.Event()

    async def reply(writer: asyncio.StreamWriter, n: int) -> bool:
        await release.wait()
        writer.write(answer(b"ok"))
        return True

    url, canned = await serving(reply)
    endpoint = pool.endpoint(url, {})
    sending = [asyncio.ensure_future(endpoint.post(b"{}", 5)) for _ in range(3)]
    await asyncio.sleep(0.1)
    release.set()
    assert [a.body for a in await asyncio.gather(*sending)] == [b"ok"] * 3
    await asyncio.gather(*(endpoint.post(b"{}", 5) for _ in range(3)))
    assert canned.requests == [2, 2, 2]


async def test_the_sdk_sends_a_502_again(serving: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    """Guards the SDK's retry of a 5xx without a GraphQL body: the same request sent
    again, the second answer the call's."""
    monkeypatch.setattr(calls_module, "FIRST_BACKOFF", 0.0)
    cleared = {"data": {"clearSessionItems": {"__typename": "SessionItems", "removed": 3}}}

    async def reply(writer: asyncio.StreamWriter, n: int) -> bool:
        if n == 1:
            writer.write(answer(b"<html>bad gateway</html>", status="502 Bad Gateway"))
        else:
            writer.write(answer(json.dumps(cleared).encode()))
        return True

    url, canned = await serving(reply)
    async with Runstate(url.removesuffix("/graphql"), "t") as rs:
        assert await rs.clear_session_items("chat-1") == 3
    first, second = canned.bodies
    assert first == second


def test_closing_waits_for_a_connection_a_cancel_closed() -> None:
    """Guards ``aclose``: a connection closed by a cancelled request (its answer left
    unread) is waited for too, so that closing the loop right after leaves no socket
    open (seen in test_sdk as ``ResourceWarning: unclosed transport``)."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    async def cancel_then_close() -> None:
        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/graphql"
        pool = Connections()
        sending = asyncio.ensure_future(pool.endpoint(url, {}).post(b"{}", 5))
        await asyncio.sleep(0.1)
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending
        await pool.aclose()
        server.close()

    loop = asyncio.new_event_loop()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop.run_until_complete(cancel_then_close())
        loop.close()
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
