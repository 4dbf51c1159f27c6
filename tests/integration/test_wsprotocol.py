"""runstate's WebSocket protocol (``transport.wsprotocol``) under a real uvicorn:
keepalive pings only for peers it has not heard from."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import uvicorn
from websockets.asyncio.client import connect

from runstate.app import create_app, server_options
from runstate.settings import Settings
from runstate.transport.wsprotocol import WebSocketProtocol
from tests.support import GRAPHQL_WS, settled

PING_SECONDS = 3.0


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    """The app under uvicorn in this test's loop, pinging every PING_SECONDS."""
    # The clients here never send connection_init: the socket must outlive its timer.
    settings = Settings(
        database_url=f"sqlite://{tmp_path / 'ping.db'}", connection_init_seconds=600
    )
    options = {**server_options(settings), "ws_ping_interval": PING_SECONDS}
    # Port 0: the kernel picks a free one as uvicorn binds it, never one another
    # test's server took after it was picked.
    config = uvicorn.Config(create_app(settings), port=0, log_level="warning", **options)
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    await settled(lambda: server.started or serving.done(), "uvicorn started")
    if serving.done():
        serving.result()  # raises what stopped it
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"ws://127.0.0.1:{port}/graphql"
    finally:
        server.should_exit = True
        await serving


def connections() -> list[WebSocketProtocol]:
    """The open connections of this process's server."""
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, WebSocketProtocol)]


async def test_a_peer_heard_from_is_not_pinged_and_a_silent_one_is(url: str) -> None:
    """Guards ``WebSocketProtocol.send_keepalive_ping``: over two ping intervals,
    a client that pings the server every 0.1 s is never pinged (it is heard from
    all the time); the control, a client that says nothing, is pinged as uvicorn
    does, and answers, so its socket stays open."""
    before = set(connections())  # other tests' servers may have left some
    async with connect(url, subprotocols=GRAPHQL_WS, ping_interval=0.1) as chatty:
        # One look only: each look collects garbage, which in a long suite holds the
        # loop (and the client's pings) for longer than a ping interval.
        (heard,) = set(connections()) - before  # accepted before connect returned
        await asyncio.sleep(2 * PING_SECONDS)  # the span measured, not a wait for an event
        assert heard.ping_sent_at == 0.0
        await chatty.ping()
    async with connect(url, subprotocols=GRAPHQL_WS, ping_interval=None) as silent:
        before.add(heard)
        await settled(lambda: len(set(connections()) - before) == 1, "the silent one open")
        (quiet,) = set(connections()) - before
        await settled(lambda: quiet.ping_sent_at > 0, "the silent client pinged")
        await silent.ping()
