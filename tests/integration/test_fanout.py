"""Fan-out inside one server process: each event decoded once and rendered once per
distinct selection, and a stalled subscriber bounded in bytes, then caught up."""

from __future__ import annotations

import asyncio
import gc
import json
import types
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from strawberry.dataloader import DataLoader
from tortoise.backends.base.executor import EXECUTOR_CACHE
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.asyncio.client import connect

from runstate.app import create_app, server_options
from runstate.pubsub import Hub, MemoryBroker, Publisher
from runstate.services.actions import sessions, tasks, tokens
from runstate.services.domain.validation import ContentLimits, StepPlan
from runstate.services.domain.views import TaskView
from runstate.services.live import streams
from runstate.services.live.messages import session_channel, task_channel
from runstate.services.write.house import House
from runstate.settings import Settings
from runstate.transport.wsprotocol import Inbox, WebSocketProtocol
from tests.support import GRAPHQL_WS, Subscriber, opened, settled

USER = "watcher"
BRIEF = "subscription($id: ID!) { taskProgress(taskId: $id) { seq kind status } }"
FULL = """subscription($id: ID!) { taskProgress(taskId: $id) {
  seq kind steps { index status output } } }"""


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[tuple[str, Starlette]]:
    """The real app under uvicorn, inside this test's process and event loop: its
    URL, and the app (whose house the test writes through)."""
    async with serve(tmp_path) as served:
        yield served


@asynccontextmanager
async def serve(
    tmp_path: Path, wrap: Callable[[Starlette], ASGIApp] | None = None, **options: Any
) -> AsyncIterator[tuple[str, Starlette]]:
    """``server`` with settings of the test's own (and ``wrap`` around the app)."""
    EXECUTOR_CACHE.clear()  # see tests/integration/test_history.py
    database_url = f"sqlite://{tmp_path / 'fanout.db'}"
    settings = Settings(database_url=database_url, catch_up_seconds=60, **options)
    app = create_app(settings)
    served = app if wrap is None else wrap(app)
    # Port 0: the kernel picks a free port as uvicorn binds it. A port picked before
    # (free_port) could be taken by another test's server in between (seen once).
    config = uvicorn.Config(served, port=0, log_level="warning", **server_options(settings))
    uv = uvicorn.Server(config)
    serving = asyncio.create_task(uv.serve())
    deadline = asyncio.get_running_loop().time() + 30
    while not uv.started:
        if serving.done():
            serving.result()  # raises what stopped it
        assert asyncio.get_running_loop().time() < deadline, "uvicorn did not start"
        await asyncio.sleep(0.02)
    port = uv.servers[0].sockets[0].getsockname()[1]
    try:
        with app.state.database.current():  # the test writes through the app's house
            yield f"http://127.0.0.1:{port}", app
    finally:
        uv.should_exit = True
        await serving


async def watched_task(house: House, goal: str, steps: int = 1) -> tuple[str, TaskView]:
    """A token of USER's, and a new task of ``steps`` steps in a session of its own."""
    token = await tokens.create_token(USER)
    session = await sessions.start_session(house, USER, default_ttl=3600)
    plan = [StepPlan(f"step-{i}") for i in range(steps)]
    return token, (await tasks.create_task(house, USER, session.id, goal=goal, steps=plan)).value


@asynccontextmanager
async def watching(
    url: str, token: str, task: TaskView, count: int
) -> AsyncIterator[list[Subscriber]]:
    """``count`` subscribers of ``task`` (BRIEF), each past its SNAPSHOT; closed after."""
    watchers = [Subscriber(url, token, BRIEF, {"id": task.id}) for _ in range(count)]
    for watcher in watchers:
        await watcher.__aenter__()
    try:
        for watcher in watchers:
            assert (await watcher.next())["taskProgress"]["kind"] == "SNAPSHOT"
        yield watchers
    finally:
        for watcher in watchers:
            await watcher.__aexit__()


async def drive(house: House, task_id: str, steps: int, output: str = "done") -> int:
    """Start and complete each step, publishing each write's events as a mutation
    does; the last seq written."""
    version = 1
    for index in range(steps):
        started = await tasks.start_step(house, USER, task_id, index, expected_version=version)
        house.publish(started.events)
        done = await tasks.complete_step(
            house, USER, task_id, index, expected_version=started.value.version, output=output
        )
        house.publish(done.events)
        version = done.value.version
    return done.value.event_seq


async def test_fifty_watchers_cost_one_decode_and_one_rendering_per_selection(
    server: tuple[str, Starlette],
) -> None:
    """Guards encode-once fan-out and the relay: 50 subscribers of one task, half
    selecting a brief and half a full event: each of 20 events is decoded once,
    executed and serialised twice (once per selection, by the relay), never once
    per subscriber, and each subscriber's frame is written by the relay, none by
    its own stream."""
    url, app = server
    house, shared = app.state.house, app.state.shared
    relay = house.relay
    token = await tokens.create_token(USER)
    session = await sessions.start_session(house, USER, default_ttl=3600)
    plan = [StepPlan(f"step-{i}") for i in range(10)]
    task = (await tasks.create_task(house, USER, session.id, goal="watched", steps=plan)).value
    watchers = [
        Subscriber(url, token, BRIEF if i % 2 else FULL, {"id": task.id}) for i in range(50)
    ]
    for watcher in watchers:
        await watcher.__aenter__()
    try:
        for watcher in watchers:
            assert (await watcher.next())["taskProgress"]["kind"] == "SNAPSHOT"
        await settled(lambda: relay.following(task.pk) == 50, "all 50 following the relay")
        decoded, executed, unshared = house.decoded.count, shared.executions, shared.unshared
        renders, sent = relay.renders, relay.sent
        last = await drive(house, task.id, 10)
        for watcher in watchers:
            await watcher.until(lambda e: e["taskProgress"]["seq"] == last)
        assert last == 21
        assert house.decoded.count - decoded == 20
        assert relay.renders - renders == 2 * 20
        assert relay.sent - sent == 50 * 20
        assert shared.executions - executed == 0
        assert shared.unshared - unshared == 0
        assert sum(relay.returned.values()) == 0
        brief = [w.events for w in watchers[1::2]]
        full = [w.events for w in watchers[0::2]]
        assert all(events == brief[0] for events in brief)
        assert all(events == full[0] for events in full)
        assert full[0][-1]["taskProgress"]["steps"] == [
            {"index": 9, "status": "SUCCESS", "output": "done"}
        ]
    finally:
        for watcher in watchers:
            await watcher.__aexit__()


SLOW = "subscription($id: ID!) { taskProgress(taskId: $id) { seq steps { output } } }"


async def test_a_socket_that_stops_reading_holds_up_no_other_and_misses_nothing(
    tmp_path: Path,
) -> None:
    """Guards the relay's slow-subscriber rule: a subscriber whose client stops
    reading (its WebSocket client's queue and the kernel's buffers full, so the
    server's transport pauses writing) is handed back to its own stream, whose
    bounded inbox is the policy; meanwhile another subscriber of the task receives
    every one of 300 events of about 60 KB, and once the first reads again it too
    gets seq 1 to 301, in order, each once. Without the rule (a send that waits
    on the slow socket before the next subscriber's), the reading subscriber would
    be held up with it."""
    from websockets.asyncio.client import connect

    content = ContentLimits(task_bytes=256 * 1_048_576, user_bytes=1_073_741_824)
    async with serve(tmp_path, content=content) as (url, app):
        house = app.state.house
        token = await tokens.create_token(USER)
        session = await sessions.start_session(house, USER, default_ttl=3600)
        plan = [StepPlan(f"step-{i}") for i in range(150)]
        task = (await tasks.create_task(house, USER, session.id, goal="slow", steps=plan)).value
        ws_url = url.replace("http://", "ws://") + "/graphql"
        stalled = await connect(ws_url, subprotocols=GRAPHQL_WS, max_size=None, max_queue=1)
        init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
        await stalled.send(json.dumps(init))
        await stalled.recv()
        subscribe = {"query": SLOW, "variables": {"id": task.id}}
        await stalled.send(json.dumps({"id": "1", "type": "subscribe", "payload": subscribe}))
        await stalled.recv()  # the SNAPSHOT; from here on it reads nothing
        async with Subscriber(url, token, SLOW, {"id": task.id}) as reading:
            await reading.next()
            await settled(lambda: house.relay.following(task.pk) == 2, "both following")
            last = await drive(house, task.id, 150, output="x" * 60_000)
            await reading.until(lambda e: e["taskProgress"]["seq"] == last)
            assert [e["taskProgress"]["seq"] for e in reading.events] == list(range(1, last + 1))
            assert house.relay.returned["slow"] >= 1
            seqs = [1]
            while seqs[-1] < last:
                message = json.loads(await asyncio.wait_for(stalled.recv(), 30))
                seqs.append(message["payload"]["data"]["taskProgress"]["seq"])
            assert seqs == list(range(1, last + 1))
        await stalled.close()


@pytest.fixture
async def house(tmp_path: Path) -> AsyncIterator[House]:
    """A database and a house whose in-process broker's inboxes hold at most 64 KB."""
    async with opened(f"sqlite://{tmp_path / 'stalled.db'}") as house:
        broker = MemoryBroker(inbox_size=1000, inbox_bytes=64 * 1024)
        house.hub = Hub(broker, Publisher(broker))
        await house.hub.publisher.start()
        try:
            yield house
        finally:
            await house.hub.publisher.close()


async def test_a_stalled_subscriber_stops_at_its_byte_limit_and_is_caught_up(
    house: House,
) -> None:
    """Guards the byte bound: 40 events of 10 KB outputs pile up behind a subscriber
    that reads nothing; its inbox stays under 64 KB (dropping the rest and flagging
    a resync), and when it reads again it gets every seq, in order, from the
    database."""
    session = await sessions.start_session(house, USER, default_ttl=3600)
    plan = [StepPlan(f"step-{i}") for i in range(20)]
    task = (await tasks.create_task(house, USER, session.id, goal="big", steps=plan)).value
    stream = streams.task_progress(house, USER, task.id, None, interval=60)
    snapshot = await anext(stream)
    assert snapshot.seq == 1
    stalled = await house.broker.subscribe([task_channel(task.pk)])
    last = await drive(house, task.id, 20, output="x" * 10_000)
    deadline = asyncio.get_running_loop().time() + 10
    while stalled.dropped == 0:
        assert asyncio.get_running_loop().time() < deadline, "nothing was ever dropped"
        await asyncio.sleep(0.01)
    assert house.hub is not None
    while house.hub.publisher.bytes:  # every message handed to the broker
        assert asyncio.get_running_loop().time() < deadline, "the publisher never drained"
        await asyncio.sleep(0.01)
    assert 0 < stalled.bytes <= 64 * 1024
    assert len(stalled) < last - 1, "the inbox stopped growing"
    seen = [snapshot.seq]
    while seen[-1] < last:
        seen.append((await asyncio.wait_for(anext(stream), 10)).seq)
    assert seen == list(range(1, last + 1))
    await stream.aclose()
    await house.broker.unsubscribe(stalled)


def init_timers() -> int:
    """Tasks of Strawberry's connection-init timer alive in this process."""
    gc.collect()
    return sum(
        isinstance(o, asyncio.Task)
        and getattr(o.get_coro(), "__qualname__", "").endswith("handle_connection_init_timeout")
        for o in gc.get_objects()
    )


async def test_an_acknowledged_socket_keeps_no_init_timer(server: tuple[str, Starlette]) -> None:
    """Guards ``TransportWS.handle_connection_init`` letting the cancelled init timer
    go: kept (as Strawberry keeps it), each of 20 subscribers' sockets held its
    task, CancelledError, traceback and frames for its whole life."""
    url, app = server
    house = app.state.house
    token = await tokens.create_token(USER)
    session = await sessions.start_session(house, USER, default_ttl=3600)
    plan = [StepPlan("step-0")]
    task = (await tasks.create_task(house, USER, session.id, goal="held", steps=plan)).value
    before = init_timers()
    watchers = [Subscriber(url, token, BRIEF, {"id": task.id}) for _ in range(20)]
    for watcher in watchers:
        await watcher.__aenter__()
    try:
        for watcher in watchers:
            assert (await watcher.next())["taskProgress"]["kind"] == "SNAPSHOT"
        assert init_timers() == before
    finally:
        for watcher in watchers:
            await watcher.__aexit__(None, None, None)


def operation_tasks() -> int:
    """Tasks running a WebSocket operation (``TransportWS``) in this process."""
    return sum(
        getattr(task.get_coro(), "__qualname__", "").startswith("TransportWS.")
        for task in asyncio.all_tasks()
    )


async def test_a_following_subscription_runs_no_task_and_leaves_with_its_client(
    server: tuple[str, Starlette],
) -> None:
    """Guards parking through the transport: 20 subscribers caught up on a task
    hold no task of their own (the relay keeps a record of each); one completed by
    its client leaves the relay at once, the others still get the next event, and
    once their sockets close the relay lets go of the task's subscription."""
    url, app = server
    house = app.state.house
    token, task = await watched_task(house, "parked")
    async with watching(url, token, task, 20) as watchers:
        await settled(lambda: house.relay.following(task.pk) == 20, "all 20 following")
        await settled(lambda: operation_tasks() == 0, "no operation's task left running")
        await watchers[0].complete()
        await settled(lambda: house.relay.following(task.pk) == 19, "the completed one gone")
        assert house.relay.returned == {"closed": 1}
        started = await tasks.start_step(house, USER, task.id, 0, expected_version=1)
        house.publish(started.events)
        for watcher in watchers[1:]:
            assert (await watcher.next())["taskProgress"]["seq"] == 2
    await settled(lambda: house.relay.following(task.pk) == 0, "every follower gone")
    channel = task_channel(task.pk)
    await settled(lambda: channel not in house.broker.channels, "the task's subscription closed")


SESSION_BRIEF = "subscription($id: ID!) { sessionActivity(sessionId: $id) { taskId seq } }"
SESSION_FULL = """subscription($id: ID!) { sessionActivity(sessionId: $id) {
  taskId seq kind steps { index status } } }"""


async def test_session_watchers_follow_the_relay_through_the_transport(
    server: tuple[str, Starlette],
) -> None:
    """Guards sessionActivity's lean path: 10 subscribers of one session, two
    selections, hold no task of their own once caught up; each event of the
    session's tasks (one created after they subscribed) reaches every one in order,
    rendered once per selection and written by the relay; one completed by its
    client leaves at once, and the session's subscription closes after the rest."""
    url, app = server
    house = app.state.house
    token = await tokens.create_token(USER)
    session = await sessions.start_session(house, USER, default_ttl=3600)
    plan = [StepPlan("step-0")]
    first = (await tasks.create_task(house, USER, session.id, goal="one", steps=plan)).value
    watchers = [
        Subscriber(url, token, SESSION_BRIEF if i % 2 else SESSION_FULL, {"id": session.id})
        for i in range(10)
    ]
    following = house.relay.following
    for watcher in watchers:
        await watcher.__aenter__()
    try:
        await settled(lambda: following(session_pk=session.pk) == 10, "all 10 following")
        await settled(lambda: operation_tasks() == 0, "no operation's task left running")
        renders, sent = house.relay.renders, house.relay.sent
        house.publish((await tasks.start_step(house, USER, first.id, 0, expected_version=1)).events)
        created = await tasks.create_task(house, USER, session.id, goal="two", steps=plan)
        house.publish(created.events)
        expected = [[first.id, 2], [created.value.id, 1]]
        for watcher in watchers:
            for task_id, seq in expected:
                got = (await watcher.next())["sessionActivity"]
                assert (got["taskId"], got["seq"]) == (task_id, seq)
        assert (house.relay.renders - renders, house.relay.sent - sent) == (2 * 2, 10 * 2)
        assert sum(house.relay.returned.values()) == 0
        await watchers[0].complete()
        await settled(lambda: following(session_pk=session.pk) == 9, "the completed one gone")
    finally:
        for watcher in watchers:
            await watcher.__aexit__()
    await settled(lambda: following(session_pk=session.pk) == 0, "every follower gone")
    channel = session_channel(session.pk)
    await settled(lambda: channel not in house.broker.channels, "the session's subscription closed")


def held(kind: type) -> int:
    """Objects of ``kind`` alive in this process."""
    gc.collect()
    return sum(isinstance(o, kind) for o in gc.get_objects())


def handshakes() -> int:
    """uvicorn WebSocket connections of this process that keep their handshake's
    request."""
    gc.collect()
    return sum(
        isinstance(o, WebSocketsSansIOProtocol) and hasattr(o, "request") for o in gc.get_objects()
    )


def middleware_frames() -> int:
    """Coroutines of runstate's HTTP middlewares alive in this process."""
    gc.collect()
    names = ("CancelOnDisconnect.", "BodyLimit.", "BearerAuth.")
    return sum(
        isinstance(o, types.CoroutineType) and o.cr_code.co_qualname.startswith(names)
        for o in gc.get_objects()
    )


async def test_an_open_socket_keeps_no_handshake_and_no_middleware_frame(
    server: tuple[str, Starlette],
) -> None:
    """Guards what an idle subscriber's socket costs (``transport.wsprotocol``, the
    HTTP-only middlewares): 20 open sockets keep neither their handshake's request
    (uvicorn's own protocol keeps it: 20 more) nor a coroutine of the deadline,
    body limit or auth middleware (each kept one for the socket's life) nor a
    batch loader (five each, made with its context), and their messages reach the
    app through the protocol's light inbox."""
    url, app = server
    token, task = await watched_task(app.state.house, "lean")
    frames, inboxes, loaders = middleware_frames(), held(Inbox), held(DataLoader)
    async with watching(url, token, task, 20):
        assert handshakes() == 0
        assert middleware_frames() == frames
        assert held(Inbox) == inboxes + 20
        assert held(DataLoader) == loaders  # made when a query first needs one


class Frames:
    """ASGI middleware counting the WebSocket frames the app sends through ASGI."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.sent = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def counted(message: Message) -> None:
            self.sent += message["type"] == "websocket.send"
            await send(message)

        await self.app(scope, receive, counted if scope["type"] == "websocket" else send)


async def test_relayed_frames_are_written_past_the_asgi_chain(tmp_path: Path) -> None:
    """Guards ``WebSocketProtocol.write_text``: 10 subscribers of a task get 10
    events each from the relay, and the only frames that went through the ASGI
    send chain are their connection_ack and SNAPSHOT (the ASGI way: 120)."""
    frames: list[Frames] = []

    def wrap(app: Starlette) -> ASGIApp:
        frames.append(Frames(app))
        return frames[0]

    async with serve(tmp_path, wrap) as (url, app):
        house = app.state.house
        token, task = await watched_task(house, "past", steps=5)
        async with watching(url, token, task, 10) as watchers:
            await settled(lambda: house.relay.following(task.pk) == 10, "all 10 following")
            last = await drive(house, task.id, 5)
            for watcher in watchers:
                await watcher.until(lambda e: e["taskProgress"]["seq"] == last)
            assert house.relay.sent == 10 * 10
            assert frames[0].sent == 2 * 10


async def test_frames_to_one_socket_in_one_turn_go_in_one_write(
    server: tuple[str, Starlette],
) -> None:
    """Guards the corked writes of ``WebSocketProtocol.write_text``: one socket with
    two subscriptions of a task gets both frames of each of 5 events in one write
    to its transport (one at a time: 10 writes), framed by runstate, not by
    websockets' ``send_text`` (which copied and framed each again)."""
    url, app = server
    house = app.state.house
    token, task = await watched_task(house, "corked", steps=3)
    ws_url = url.replace("http://", "ws://") + "/graphql"
    async with connect(ws_url, subprotocols=GRAPHQL_WS) as socket:
        init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
        await socket.send(json.dumps(init))
        assert json.loads(await socket.recv())["type"] == "connection_ack"
        for operation in ("1", "2"):
            payload = {"query": BRIEF, "variables": {"id": task.id}}
            await socket.send(
                json.dumps({"id": operation, "type": "subscribe", "payload": payload})
            )
            assert json.loads(await socket.recv())["id"] == operation  # its SNAPSHOT
        await settled(lambda: house.relay.following(task.pk) == 2, "both following")
        gc.collect()
        (protocol,) = [
            o
            for o in gc.get_objects()
            if isinstance(o, WebSocketProtocol) and not o.transport.is_closing()
        ]
        writes: list[bytes] = []
        write = protocol.transport.write

        def counted(data: bytes | bytearray | memoryview) -> None:
            writes.append(bytes(data))
            write(data)

        protocol.transport.write = counted  # type: ignore[method-assign]
        framed: list[bytes] = []
        send_text = protocol.conn.send_text

        def framing(data: bytes | bytearray | memoryview, fin: bool = True) -> None:
            framed.append(bytes(data))
            send_text(data, fin)

        protocol.conn.send_text = framing  # type: ignore[method-assign]
        version = 1
        for index in range(3):
            started = await tasks.start_step(house, USER, task.id, index, expected_version=version)
            version = started.value.version
            house.publish(started.events)
            frames = [json.loads(await socket.recv()) for _ in range(2)]
            assert sorted(f["id"] for f in frames) == ["1", "2"]
            if index < 2:
                done = await tasks.complete_step(
                    house, USER, task.id, index, expected_version=version, output=None
                )
                version = done.value.version
                house.publish(done.events)
                frames = [json.loads(await socket.recv()) for _ in range(2)]
                assert {f["payload"]["data"]["taskProgress"]["seq"] for f in frames} == {
                    done.value.event_seq
                }
        assert (len(writes), framed) == (5, [])
