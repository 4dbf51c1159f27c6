"""The operation time limit covers the whole answer, its encoding included."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from runstate.transport.deadline import CancelOnDisconnect

SCOPE: Scope = {"type": "http", "method": "POST", "path": "/graphql", "headers": []}


async def encodes_slowly(scope: Scope, receive: Receive, send: Send) -> None:
    """An app that reads its request, then takes 0.3 s without a pause (as encoding a
    large answer does: the loop cannot cancel it), then answers 200."""
    await receive()
    time.sleep(0.3)  # noqa: ASYNC251 -- the work itself, holding the loop
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def answer(app: Any, seconds: float) -> list[Message]:
    sent: list[Message] = []
    gone = asyncio.Event()

    async def receive() -> Message:
        if not sent and not gone.is_set():
            gone.set()
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    await CancelOnDisconnect(app, seconds)(SCOPE, receive, send)
    return sent


def test_an_answer_ready_past_the_limit_is_a_503() -> None:
    """Guards CancelOnDisconnect's deadline check on the response start: the timeout
    fires while the app holds the loop, and without the check the app's 200 went out
    before the cancellation could reach it."""
    sent = asyncio.run(answer(encodes_slowly, 0.1))
    assert sent[0]["status"] == 503
    assert json.loads(sent[1]["body"]) == {
        "errors": [{"message": "stopped after 0.1 s: ask for less"}]
    }


def test_an_answer_ready_in_time_goes_out() -> None:
    """The control: the same app within its limit answers its own 200."""
    sent = asyncio.run(answer(encodes_slowly, 5))
    assert [m.get("status") for m in sent] == [200, None]
