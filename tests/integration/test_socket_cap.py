"""The per-user WebSocket cap across server processes: with Redis, two servers count
one user's connections together (``sockets.SharedSockets``); without it, each
process counts its own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from runstate.transport.connections import Connection, Connections
from runstate.transport.sockets import SharedSockets
from tests.integration.test_limits import socket, ws_url
from tests.support import GRAPHQL_WS, Server, create_token, require_service

CAP = 3


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
