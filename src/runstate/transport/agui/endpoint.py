"""``POST /agui/tasks/{taskId}``: a task served as an AG-UI run over SSE
(``docs/agui.md``).

Everything a request can get wrong is answered before the stream starts: 401 by
``BearerAuth``, 405 with ``Allow: POST``, 400 ``INVALID_INPUT`` for a body that is
not a ``RunAgentInput`` or a ``Last-Event-ID`` that is not a cursor, the same 404
for a missing task, someone else's and a ``threadId`` that is not the task's
session, 429 past the rate limit or the connection cap. Then the answer is a
``text/event-stream`` of the run's frames (``follow``), with a ``: keepalive``
comment in every ``RUNSTATE_STREAM_KEEPALIVE_SECONDS`` (15 s) of silence. A stream
is a connection with one subscription: it counts toward ``RUNSTATE_MAX_CONNECTIONS``
and costs what a subscription costs; it is exempt from the operation time limit
(``CancelOnDisconnect``) but stops when its client leaves, and a revoked token
ends it with ``RUN_ERROR UNAUTHENTICATED`` within ``RUNSTATE_AUTH_CHECK_SECONDS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from runstate.services.actions.tokens import Principal
from runstate.services.domain.errors import (
    NotFoundError,
    RateLimitedError,
    SessionExpiredError,
)
from runstate.services.domain.ratelimit import SPENT, SUBSCRIBE_COST, WRITE_COST, RateLimiter
from runstate.services.domain.views import TaskView
from runstate.services.read.lookups import get_task
from runstate.services.write.house import House
from runstate.settings import Settings
from runstate.transport.agui import decisions
from runstate.transport.agui.follow import ResyncRequiredError, RunEndedError, follow
from runstate.transport.agui.frames import Cursor, CursorError, Frame, Run, error, refused
from runstate.transport.connections import Connection, Connections, TooManyConnectionsError
from runstate.transport.deadline import WRITING
from runstate.transport.refusals import refusal

KEEPALIVE = b": keepalive\n\n"

STREAM_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


class Serving(Protocol):
    """What the endpoint needs of the GraphQL view it stands beside
    (``view.GraphQLView``): the database's epoch and the users' rate limiter, both
    set when the app starts."""

    epoch: str
    limiter: RateLimiter | None


class BadRequestError(Exception):
    """A request refused with 400 before any stream."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return Response(text, status, headers=headers, media_type="application/json")


def _not_found(task_id: str) -> Response:
    """The one 404 of a task that is missing, someone else's, or asked for under
    another thread: the same bytes in all three cases but the echoed id."""
    message = NotFoundError("task", task_id).message
    return _json(404, {"code": "NOT_FOUND", "message": message, "id": task_id})


def _run_input(body: bytes) -> dict[str, Any]:
    """The ``RunAgentInput`` fields the endpoint reads, checked; BadRequestError else.
    ``messages``, ``tools``, ``context``, ``state`` and ``forwardedProps`` are taken
    and ignored: the agent runs elsewhere."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadRequestError("body", "the body must be a JSON RunAgentInput") from None
    if not isinstance(data, dict):
        raise BadRequestError("body", "the body must be a JSON object (a RunAgentInput)")
    for name in ("threadId", "runId"):
        value = data.get(name)
        if not isinstance(value, str) or not value:
            raise BadRequestError(name, f"{name} must be a non-empty string")
    if not isinstance(data.get("messages"), list):
        raise BadRequestError("messages", "messages must be a list (it may be empty)")
    resume = data.get("resume")
    if resume is not None and not isinstance(resume, list):
        raise BadRequestError("resume", "resume must be a list of ResumeEntry")
    return data


def _cursor(request: Request) -> Cursor | None:
    header = request.headers.get("last-event-id")
    if header is None:
        return None
    try:
        return Cursor.parse(header)
    except CursorError as bad:
        raise BadRequestError("Last-Event-ID", str(bad)) from None


class AguiRuns:
    """The endpoint, an ASGI app mounted at ``/agui/tasks/{task_id}``."""

    def __init__(
        self, house: House, settings: Settings, connections: Connections, serving: Serving
    ) -> None:
        self.house = house
        self.settings = settings
        self.connections = connections
        self.serving = serving

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self.answer(request)
        await response(scope, receive, send)

    async def answer(self, request: Request) -> Response:
        """The whole answer: a refusal, a 204, or the run's stream."""
        if request.method != "POST":
            return _json(
                405,
                {"code": "METHOD_NOT_ALLOWED", "message": "runs are started with POST"},
                {"Allow": "POST"},
            )
        principal: Principal = request.scope["runstate.principal"]
        task_id: str = request.path_params["task_id"]
        try:
            cursor = _cursor(request)
            data = _run_input(await request.body())
        except BadRequestError as bad:
            return _json(400, {"code": "INVALID_INPUT", "message": bad.message, "field": bad.field})
        thread_id, run_id = data["threadId"], data["runId"]
        resume: list[Any] = [] if cursor is not None else data.get("resume") or []
        try:
            task = await get_task(principal.user_id, task_id)
        except NotFoundError:
            return _not_found(task_id)
        except SessionExpiredError as expired:
            if expired.session_id != thread_id:
                return _not_found(task_id)
            run = Run(task_id, thread_id, run_id, self.serving.epoch, 0)
            return self._frames(refused(run, expired.code, expired.message))
        if task.session_id != thread_id:
            return _not_found(task_id)
        try:
            await self._charge(request, SUBSCRIBE_COST + WRITE_COST * len(resume))
        except RateLimitedError as limited:  # answered as on every route (``BearerAuth``)
            retry = {"Retry-After": str(math.ceil(limited.retry_after))}
            return refusal(429, limited.message, extensions=limited.extensions, headers=retry)
        if resume:
            try:
                await decisions.decide(
                    self.house, principal.user_id, task, resume, self.settings.idempotency_ttl
                )
            except decisions.RefusedError as no:
                run = Run(task_id, thread_id, run_id, self.serving.epoch, task.event_seq)
                return self._frames(refused(run, no.code, no.message))
            task = await get_task(principal.user_id, task_id)
        base = task.event_seq if cursor is None else cursor.base
        run = Run(task_id, thread_id, run_id, self.serving.epoch, base)
        return await self._stream(principal, task, run, cursor)

    async def _charge(self, request: Request, points: float) -> None:
        """Pay for the stream (and the decisions it makes) from the caller's budget."""
        limiter = self.serving.limiter
        if limiter is None:
            return
        spent = request.scope.get(SPENT)
        try:
            await limiter.charge(request.scope["runstate.principal"].user_id, points)
        except RateLimitedError:
            if spent is not None:
                spent.refused = True
            raise
        if spent is not None:
            spent.points += points

    def _frames(self, frames: list[Frame]) -> Response:
        """A stream of frames known at once (a refused run, a cursor to resync)."""

        async def body() -> AsyncIterator[bytes]:
            for frame in frames:
                yield frame.encode()

        return StreamingResponse(body(), headers=STREAM_HEADERS)

    async def _stream(
        self, principal: Principal, task: TaskView, run: Run, cursor: Cursor | None
    ) -> Response:
        frames = follow(
            self.house,
            principal.user_id,
            task,
            run,
            cursor,
            interval=self.settings.catch_up_seconds,
            gap_fill=self.settings.gap_fill,
        )
        try:
            await anext(frames)  # the cursor is judged, the answer may begin
        except ResyncRequiredError:
            await frames.aclose()
            return self._frames([error("RESYNC_REQUIRED", ResyncRequiredError.message)])
        except RunEndedError:
            await frames.aclose()
            return Response(status_code=204)
        revoked = asyncio.Event()

        async def close(code: int, reason: str) -> None:
            revoked.set()

        connection = Connection(principal.user_id, principal.token_digest, close)
        try:
            await self.connections.add(connection)
        except TooManyConnectionsError:
            await frames.aclose()
            limit = self.connections.per_user
            message = f"too many connections: at most {limit} per user"
            return _json(429, {"code": "TOO_MANY_CONNECTIONS", "message": message})
        return _Streaming(self._body(frames, revoked, connection), headers=STREAM_HEADERS)

    async def _body(
        self,
        frames: AsyncGenerator[Frame | None, None],
        revoked: asyncio.Event,
        connection: Connection,
    ) -> AsyncIterator[bytes]:
        """The frames as they come, a keep-alive comment in each spell of silence, and
        ``RUN_ERROR UNAUTHENTICATED`` once the token is revoked."""
        stopped = asyncio.ensure_future(revoked.wait())
        upcoming: asyncio.Future[Frame | None] | None = None
        try:
            while True:
                upcoming = upcoming or asyncio.ensure_future(anext(frames, None))
                waiting: set[asyncio.Future[Any]] = {upcoming, stopped}
                done, _ = await asyncio.wait(
                    waiting,
                    timeout=self.settings.stream_keepalive_seconds,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if stopped in done:
                    yield error("UNAUTHENTICATED", "the token was revoked").encode()
                    return
                if upcoming not in done:
                    yield KEEPALIVE
                    continue
                frame, upcoming = upcoming.result(), None
                if frame is None:
                    return
                yield frame.encode()
                if frame.last:
                    return
        finally:
            stopped.cancel()
            if upcoming is not None:
                upcoming.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await upcoming
            await frames.aclose()
            await self.connections.remove(connection)


class _Streaming(StreamingResponse):
    """A stream exempt from the operation time limit: it lasts while its client
    listens (``CancelOnDisconnect`` still stops it when the client leaves)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        writing = scope.get(WRITING)
        if writing is not None:
            writing.streams = True
        await super().__call__(scope, receive, send)
