"""``CancelOnDisconnect``: a departed client's request stopped, and the time
limit of a request (503), its answer's encoding included."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runstate.transport.http_only import HttpOnly
from runstate.transport.refusals import refusal, stopped_after


class _PastDeadlineError(Exception):
    """An answer ready only after the operation's time limit."""


WRITING = "runstate.writing"
"""The scope's ``Writing`` of a request: the GraphQL view marks a mutation."""


@dataclass
class Writing:
    """Whether a request runs a write or answers with an event stream, which its
    time limit does not stop."""

    write: bool = False
    streams: bool = False
    """An event stream (``agui.endpoint``): it lasts as long as its client listens."""

    @property
    def unlimited(self) -> bool:
        """Whether the time limit leaves the request alone."""
        return self.write or self.streams


class CancelOnDisconnect(HttpOnly):
    """Stops a request's work when its client goes away, or after ``seconds``.

    uvicorn does not cancel an HTTP request whose client disconnected: the work
    ran on, for minutes, answering no one. Once the body has been read, this
    listens for ``http.disconnect`` and cancels the request. A request still
    running after ``seconds`` is cancelled too and answered 503, saying so; so is
    one whose answer is ready only after it: encoding a large answer runs without
    a pause where the timeout could cancel it, and such answers once went out 200
    after 32 s of a 30 s limit.

    A write (a mutation, marked ``Writing`` by the view) is the exception: it
    finishes or rolls back, and its client is told which, late if need be. Stopped
    at the limit, a write that had committed (on SQLite it runs in the group
    commit's task, which stopping the request does not stop) was answered 503
    "stopped": 8 forks of 8, and a client that believed it forked again. How long
    a write may take is bounded by the content limits instead (``settings``).
    An event stream (an AG-UI run) is exempt too, and stops when its client leaves.
    """

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        body_read = asyncio.Event()
        started = False
        deadline = asyncio.get_running_loop().time() + self.seconds
        writing = Writing()
        scope = {**scope, WRITING: writing}

        async def reading() -> Message:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body"):
                body_read.set()
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            late = asyncio.get_running_loop().time() >= deadline
            if not started and late and not writing.unlimited:
                raise _PastDeadlineError
            started = True
            await send(message)

        async def respond() -> None:
            await self.app(scope, reading, sending)

        work = asyncio.create_task(respond())

        async def until_gone() -> None:
            await body_read.wait()
            while (await receive())["type"] != "http.disconnect":
                pass
            work.cancel()

        watcher = asyncio.create_task(until_gone())
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    await asyncio.shield(work)
            except TimeoutError:
                if not writing.unlimited:
                    raise
                # A write finishes (or fails) and is answered; a stream goes on until
                # its client leaves (``until_gone``) or it ends.
                await asyncio.shield(work)
        except (TimeoutError, _PastDeadlineError):
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, _PastDeadlineError):
                await work
            if not started:
                await refusal(503, stopped_after(self.seconds))(scope, receive, send)
        except asyncio.CancelledError:
            work.cancel()
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the server is stopping this request
            # else the client left, and ``until_gone`` stopped the work: nobody to answer
        finally:
            watcher.cancel()
