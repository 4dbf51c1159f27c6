"""The per-user WebSocket cap across server processes: with Redis, two servers count
one user's connections together (``sockets.SharedSockets``); without it, each
process counts its own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from runstate.transport.connections import TOO_MANY_CONNECTIONS, Connection, Connections
from runstate.transport.sockets import SharedSockets
from tests.integration.test_limits import socket, ws_url
from tests.support import GRAPHQL_WS, Server, create_token, require_service

CAP = 3
LEASE = 1.5
"""The claims' lease on the servers that are stalled (``RUNSTATE_SOCKET_LEASE_SECONDS``):
short, so that a stall past it takes seconds."""
REDIS_URL = "redis://127.0.0.1:6379/0"


def two_servers(tmp_path: Path, **env: str) -> Iterator[tuple[Server, Server]]:
    url = f"sqlite://{tmp_path / 'cap.db'}"
    limits = {"RUNSTATE_MAX_CONNECTIONS": str(CAP), "RUNSTATE_RATE_LIMIT": "false", **env}
    with (
        Server(url, tmp_path / "a.log", **limits) as one,
        Server(url, tmp_path / "b.log", **limits) as two,
    ):
        yield one, two


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    require_service("Redis", "127.0.0.1", 6379)
    yield from two_servers(tmp_path, RUNSTATE_REDIS_URL="redis://127.0.0.1:6379/0")


@pytest.fixture
def leasing(tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    """Two servers sharing Redis, their claims leased for ``LEASE`` seconds."""
    require_service("Redis", "127.0.0.1", 6379)
    yield from two_servers(
        tmp_path, RUNSTATE_REDIS_URL=REDIS_URL, RUNSTATE_SOCKET_LEASE_SECONDS=str(LEASE)
    )


@pytest.fixture
def separate(tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    yield from two_servers(tmp_path)


async def refused(server: Server, token: str) -> tuple[int | None, str | None]:
    """The close code and reason a connection past the cap is given (None: acked)."""
    async with connect(ws_url(server), subprotocols=GRAPHQL_WS) as ws:
        init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
        await ws.send(json.dumps(init))
        try:
            json.loads(await ws.recv())
        except ConnectionClosed:
            return ws.close_code, ws.close_reason
        return None, None


async def test_one_cap_counts_a_users_sockets_on_every_process(
    shared: tuple[Server, Server],
) -> None:
    """Guards the shared count: two connections on one server and one on the other
    fill the cap of three, so a fourth is refused (4029) on either; once one closes,
    the other server takes a new one. Another user is not counted with them."""
    one, two = shared
    token = create_token(one.database_url, "roamer")
    other = create_token(one.database_url, "bystander")
    reason = f"Too many connections: at most {CAP} per user"
    async with AsyncExitStack() as open_sockets:
        first = await open_sockets.enter_async_context(socket(one, token))
        await open_sockets.enter_async_context(socket(one, token))
        await open_sockets.enter_async_context(socket(two, token))
        assert await refused(one, token) == (4029, reason)
        assert await refused(two, token) == (4029, reason)
        async with socket(two, other):
            pass
        await first.close()
        # The place the closed one left, once its server has let it go (a poll with
        # a deadline: the release follows the close by a moment).
        deadline = asyncio.get_running_loop().time() + 10
        while (answer := await refused(two, token)) != (None, None):
            assert asyncio.get_running_loop().time() < deadline, answer
            await asyncio.sleep(0.05)


async def test_without_redis_each_process_counts_its_own(
    separate: tuple[Server, Server],
) -> None:
    """Control: without Redis the same user holds the cap on each server, six in all."""
    one, two = separate
    token = create_token(one.database_url, "roamer")
    async with AsyncExitStack() as open_sockets:
        for server in (one, one, one, two, two, two):
            await open_sockets.enter_async_context(socket(server, token))
        assert (await refused(two, token))[0] == 4029


async def test_claims_last_as_long_as_their_sockets_whatever_the_token_check() -> None:
    """Guards ``Connections.keep_claims`` (issue 38, item 7): a process's claims are
    refreshed on their own period, so a user at the cap of two stays there after
    the claims' lease has passed twice over (with ``RUNSTATE_AUTH_CHECK_SECONDS``
    at 60 they were refreshed with the token check, and lapsed: one user held 100
    sockets against a cap of 50). Control: once the refreshing stops, the claims
    lapse and another process's claim is granted."""
    require_service("Redis", "127.0.0.1", 6379)
    prefix = f"test-claims-{uuid.uuid4().hex}:"
    redis_url = "redis://127.0.0.1:6379/0"
    here = Connections(2)
    here.shared = SharedSockets(redis_url, prefix, 2, lease_seconds=1.0)
    elsewhere = SharedSockets(redis_url, prefix, 2, lease_seconds=1.0)

    async def close(code: int, reason: str) -> None:
        return None

    try:
        for _ in range(2):
            await here.add(Connection("holder", "digest", close))
        keeping = asyncio.create_task(here.keep_claims(0.2))
        await asyncio.sleep(2.5)  # the time that passes is what is tested: 2.5 leases
        assert not await elsewhere.claim("holder", elsewhere.member(1))
        keeping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeping
        deadline = time.monotonic() + 10
        while not await elsewhere.claim("holder", elsewhere.member(2)):
            assert time.monotonic() < deadline, "the claims never lapsed without refreshing"
            await asyncio.sleep(0.1)
    finally:
        await here.shared.close()
        await elsewhere.close()


async def test_a_stalled_server_gives_back_the_places_taken_meanwhile(
    leasing: tuple[Server, Server],
) -> None:
    """Guards the re-claim (``Connections.reclaim``): a server holding a user's
    three sockets (the cap) is stopped (SIGSTOP) past the lease; meanwhile the
    other server takes three more for the user, the claims of the stopped one
    having lapsed: six open against a cap of three (the control: this is where
    the refresh that only extended claims still in the set left the user, seen
    failing so with its sockets never closed). Once the stopped server resumes,
    its three sockets are closed (4029, as one refused), the other's three still
    answer, and a seventh socket is refused on either."""
    stalled, running = leasing
    token = create_token(stalled.database_url, "stalled")
    assert stalled.process is not None
    async with AsyncExitStack() as open_sockets:
        first = [await open_sockets.enter_async_context(socket(stalled, token)) for _ in range(CAP)]
        os.kill(stalled.process.pid, signal.SIGSTOP)
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while (await refused(running, token))[0] == TOO_MANY_CONNECTIONS:
                assert loop.time() < deadline, "the stopped server's claims never lapsed"
                await asyncio.sleep(0.1)
            # The probe's own place is given back as its close is read: until then,
            # the third socket may find the cap full.
            later: list[ClientConnection] = []
            while len(later) < CAP:
                try:
                    later.append(await open_sockets.enter_async_context(socket(running, token)))
                except ConnectionClosed:
                    assert loop.time() < deadline, "the running server never had room"
                    await asyncio.sleep(0.1)
        finally:
            os.kill(stalled.process.pid, signal.SIGCONT)
        for ws in first:
            await asyncio.wait_for(ws.wait_closed(), 30)
        reason = f"Too many connections: at most {CAP} per user"
        assert [(ws.close_code, ws.close_reason) for ws in first] == [
            (TOO_MANY_CONNECTIONS, reason)
        ] * CAP
        for ws in later:
            await asyncio.wait_for(await ws.ping(), 10)
        assert await refused(stalled, token) == (TOO_MANY_CONNECTIONS, reason)
        assert await refused(running, token) == (TOO_MANY_CONNECTIONS, reason)


async def test_a_lapsed_claim_is_claimed_again_while_there_is_room() -> None:
    """Guards the refresh's re-claim, oldest first: a process's two claims lapse
    (it did not refresh past the lease) and another process takes one of the two
    places; the next refresh claims the older connection's place again and closes
    the newer one (4029), so the user holds two, the cap. Control: before the
    refresh the user held three (the old refresh, extending only the claims still
    in the set, kept it so: seen failing with nothing closed)."""
    require_service("Redis", "127.0.0.1", 6379)
    prefix = f"test-reclaim-{uuid.uuid4().hex}:"
    here = Connections(2)
    here.shared = SharedSockets(REDIS_URL, prefix, 2, lease_seconds=1.0)
    elsewhere = SharedSockets(REDIS_URL, prefix, 2, lease_seconds=1.0)
    closed: list[tuple[str, int, str]] = []

    def closer(name: str) -> Callable[[int, str], Awaitable[None]]:
        async def close(code: int, reason: str) -> None:
            closed.append((name, code, reason))

        return close

    try:
        await here.add(Connection("holder", "digest", closer("older")))
        await here.add(Connection("holder", "digest", closer("newer")))
        deadline = time.monotonic() + 10
        while not await elsewhere.claim("holder", elsewhere.member(1)):
            assert time.monotonic() < deadline, "the claims never lapsed"
            await asyncio.sleep(0.1)
        assert len(here) + 1 == 3  # over the cap of two, until the refresh
        assert await here.reclaim() == 1
        assert closed == [
            ("newer", TOO_MANY_CONNECTIONS, "Too many connections: at most 2 per user")
        ]
        assert len(here) == 1
        assert not await elsewhere.claim("holder", elsewhere.member(2))
    finally:
        await here.shared.close()
        await elsewhere.close()
