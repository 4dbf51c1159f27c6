"""The end of an AG-UI stream (``transport.agui.endpoint``): however a run's answer
ends, its frames are closed and its connection let go, once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, MutableMapping
from typing import Any

import pytest
from ag_ui.core import RunStartedEvent

from runstate.transport.agui.endpoint import _Stream, _Streaming
from runstate.transport.agui.frames import Cursor, Frame


async def failing() -> AsyncGenerator[list[Frame] | None, None]:
    """A run whose reads fail after its first frame."""
    yield None
    yield [Frame.of(RunStartedEvent(thread_id="t", run_id="r"), Cursor("e", 1, 1, 0))]
    raise RuntimeError("the database went away")


async def quiet() -> AsyncGenerator[list[Frame] | None, None]:
    """A run that waits for an event that never comes."""
    yield None
    await asyncio.Event().wait()
    yield None


async def answered(
    frames: AsyncGenerator[list[Frame] | None, None],
) -> tuple[_Streaming, list[int], asyncio.Event]:
    """The answer of a run of ``frames``, what its release did, and when it did."""
    stream = _Stream(keepalive_seconds=15, stopping=asyncio.Event())
    stream.frames = frames
    await anext(frames)
    released: list[int] = []
    done = asyncio.Event()

    async def release() -> None:
        released.append(1)
        done.set()

    return _Streaming(stream, release), released, done


SCOPE: dict[str, Any] = {"type": "http", "asgi": {"spec_version": "2.4"}}


async def never_leaves() -> dict[str, Any]:
    await asyncio.Event().wait()
    return {}


async def test_a_run_that_fails_midway_lets_its_connection_go() -> None:
    """Guards the release on failure: the first frame is sent, the failure ends the
    answer (the connection is dropped, so the client resumes by cursor), and the
    connection is released once. It once stayed counted against its user until
    the server restarted."""
    response, released, _ = await answered(failing())
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    with pytest.raises(RuntimeError, match="went away"):
        await response(SCOPE, never_leaves, send)
    assert b"RUN_STARTED" in b"".join(m.get("body", b"") for m in sent)
    assert released == [1]


async def test_a_run_whose_request_is_cancelled_lets_its_connection_go() -> None:
    """Guards the release on cancellation (a client that left): the request's task
    is cancelled while the run waits for its next event; the connection is
    released all the same."""
    response, released, done = await answered(quiet())
    first = asyncio.Event()

    async def send(message: MutableMapping[str, Any]) -> None:
        first.set()

    serving = asyncio.create_task(response(SCOPE, never_leaves, send))
    await asyncio.wait_for(first.wait(), 5)
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await serving
    await asyncio.wait_for(done.wait(), 5)  # the shielded release runs in its own task
    assert released == [1]


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (4403, ("UNAUTHENTICATED", "the token was revoked")),
        (4029, ("TOO_MANY_CONNECTIONS", "Too many connections: at most 2 per user")),
    ],
)
async def test_a_stream_closed_by_the_server_says_why(code: int, expected: tuple[str, str]) -> None:
    """Guards the end a ``Connection.close`` brings: a revoked token (4403) ends the
    stream with ``RUN_ERROR UNAUTHENTICATED``; a place under the user's cap lost
    while its server stalled (4029, ``Connections.reclaim``) with ``RUN_ERROR
    TOO_MANY_CONNECTIONS`` and the reason, not as a revoked token (seen so)."""
    stream = _Stream(keepalive_seconds=15, stopping=asyncio.Event())
    stream.frames = quiet()
    await anext(stream.frames)
    await stream.revoke(code, "Too many connections: at most 2 per user")
    (frame,) = [frame async for frame in stream.body()]
    data = json.loads(frame.decode().partition("data: ")[2])
    assert (data["type"], data["code"], data["message"]) == ("RUN_ERROR", *expected)
    await stream.close()
