"""``POST /agui/tasks/{taskId}``: a task served as an AG-UI run over SSE
(``docs/agui.md``; its contract in ``docs/architecture.md``).

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
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from runstate.schema.turns import Turns
from runstate.services.actions.tokens import Principal
from runstate.services.domain.errors import (
    NotFoundError,
    RateLimitedError,
    SessionExpiredError,
)
from runstate.services.domain.ratelimit import (
    ANSWER_BYTES_PER_POINT,
    REPLAYED_EVENTS_PER_POINT,
    SPENT,
    SUBSCRIBE_COST,
    RateLimiter,
    Spending,
)
from runstate.services.live.streams import Pay
from runstate.services.read.lookups import get_task
from runstate.services.write import door
from runstate.services.write.house import House
from runstate.settings import Settings
from runstate.transport.agui import decisions
from runstate.transport.agui.follow import ResyncRequiredError, RunEndedError, follow, reopened
from runstate.transport.agui.frames import (
    Cursor,
    CursorError,
    Frame,
    Renderings,
    Run,
    error,
    refused,
)
from runstate.transport.agui.wire import Budget, Place, chunks
from runstate.transport.connections import (
    TOO_MANY_CONNECTIONS,
    Connection,
    Connections,
    TooManyConnectionsError,
)
from runstate.transport.deadline import WRITING
from runstate.transport.refusals import refusal
from runstate.transport.strict_json import strict_json

KEEPALIVE = b": keepalive\n\n"
SERVER_STOPPING = b": server stopping\n\n"
"""What a stream ends with when its server stops before the run's end."""
PAGED = b": page full: resume from the last frame\n\n"
"""What a replay ends with once it has sent ``RUNSTATE_MAX_RESPONSE_BYTES``: not the
run's end, its client resumes from the last frame it holds."""

STREAM_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


class Serving(Protocol):
    """What the endpoint needs of the GraphQL view it stands beside
    (``view.GraphQLView``): the database's epoch and the users' rate limiter, both
    set when the app starts, and the turns in which a user's replays read."""

    epoch: str
    limiter: RateLimiter | None
    replays: Turns


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
    The body is read by the parser every body is read by (``strict_json``): what it
    refuses (NUL, unpaired surrogates, NaN, nesting past the recursion limit) is
    refused here in the same words.
    ``messages``, ``tools``, ``context``, ``state`` and ``forwardedProps`` are taken
    and ignored: the agent runs elsewhere."""
    try:
        data = strict_json(body)
    except ValueError as bad:  # the words /graphql answers the same body with
        raise BadRequestError("body", str(bad)) from None
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
        self,
        house: House,
        settings: Settings,
        connections: Connections,
        serving: Serving,
        stopping: asyncio.Event,
    ) -> None:
        self.house = house
        self.settings = settings
        self.connections = connections
        self.serving = serving
        self.stopping = stopping
        """Set when the server begins to stop (``Admission.stopping``)."""
        self.renderings = Renderings()
        """Each event's frames rendered once for all the process's runs of its task."""
        self.budget = Budget(settings.agui_buffer_bytes)
        """The bytes the process's streams hold for their clients (``wire``)."""

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
            if cursor is not None:  # the run goes on, and ends here: no new RUN_STARTED
                return _frames([error(expired.code, expired.message)])
            run = Run(task_id, thread_id, run_id, self.serving.epoch, 0)
            return _frames(refused(run, expired.code, expired.message))
        if task.session_id != thread_id:
            return _not_found(task_id)
        try:
            await self._charge(request, SUBSCRIBE_COST + door.price(len(resume)))
        except RateLimitedError as limited:  # answered as on every route (``BearerAuth``)
            retry = {"Retry-After": str(math.ceil(limited.retry_after))}
            return refusal(429, limited.message, extensions=limited.extensions, headers=retry)
        stream = _Stream(self.settings.stream_keepalive_seconds, self.stopping, self.budget)
        connection = Connection(principal.user_id, principal.token_digest, stream.revoke)
        try:
            await self.connections.add(connection)
        except TooManyConnectionsError:
            limit = self.connections.per_user
            message = f"too many connections: at most {limit} per user"
            return _json(429, {"code": "TOO_MANY_CONNECTIONS", "message": message})
        owned = False  # by the answer once it streams the run, which lets it go when done
        try:
            run = Run(task_id, thread_id, run_id, self.serving.epoch, task.event_seq)
            if resume:
                writing = request.scope.get(WRITING)
                if writing is not None:  # decisions are writes: never stopped half-way
                    writing.write = True
                try:
                    paid = door.Prepaid(door.price(len(resume)))
                    ttl = self.settings.idempotency_ttl
                    caller = door.Caller(self.house, principal.user_id, paid, ttl)
                    await decisions.decide(caller, task, resume)
                except decisions.RefusedError as no:
                    return _frames(refused(run, no.code, no.message))
                try:
                    task = await get_task(principal.user_id, task_id)
                except (NotFoundError, SessionExpiredError) as gone:
                    return _frames(refused(run, gone.code, gone.message))
            base = task.event_seq if cursor is None else cursor.base
            run = Run(task_id, thread_id, run_id, self.serving.epoch, base)
            pay = self._paying(principal.user_id)
            interval, gap_fill = self.settings.catch_up_seconds, self.settings.gap_fill
            stream.frames = follow(
                self.house,
                principal.user_id,
                task,
                run,
                cursor,
                interval=interval,
                gap_fill=gap_fill,
                pay=pay,
                renderings=self.renderings,
            )

            def reopen(after: Cursor | None) -> AsyncGenerator[list[Frame] | None, None]:
                return reopened(
                    self.house,
                    principal.user_id,
                    task_id,
                    run,
                    after,
                    interval=interval,
                    gap_fill=gap_fill,
                    renderings=self.renderings,
                )

            stream.reopen = reopen
            stream.meter = self._meter(request, task.event_seq if cursor else base)
            try:
                await anext(stream.frames)  # the cursor is judged: the answer may begin
                if cursor is None:  # the opening, paid for before the answer begins
                    stream.ready = await anext(stream.frames)
                    assert stream.ready is not None, "a run opens with its opening"
                    stream.meter.new(stream.ready)
                    await stream.meter.pay(sum(frame.size for frame in stream.ready))
            except ResyncRequiredError:
                return _frames([error("RESYNC_REQUIRED", ResyncRequiredError.message)])
            except RunEndedError:
                return Response(status_code=204)
            except RateLimitedError as limited:
                retry = {"Retry-After": str(math.ceil(limited.retry_after))}
                return refusal(429, limited.message, extensions=limited.extensions, headers=retry)
            owned = True
            return _Streaming(stream, lambda: self.connections.remove(connection))
        finally:
            if not owned:
                await stream.close()
                await self.connections.remove(connection)

    async def _charge(self, request: Request, points: float) -> None:
        """Pay for the stream (and the decisions it makes) from the caller's budget,
        counted in the request's spending as a GraphQL operation's is."""
        limiter = self.serving.limiter
        if limiter is not None:
            spent = request.scope.get(SPENT) or Spending()
            await spent.charge(limiter, request.scope["runstate.principal"].user_id, points)

    def _meter(self, request: Request, head: int) -> Meter:
        """What the run's opening and replayed frames cost, paid as the request's
        other points are (its ``Spending``), and the page its replay may fill."""
        limiter = self.serving.limiter
        page = self.settings.max_response_bytes
        if limiter is None:
            return Meter(None, 0, page, head)
        spent = request.scope.get(SPENT) or Spending()
        user_id = request.scope["runstate.principal"].user_id

        async def charge(points: float) -> None:
            await spent.charge(limiter, user_id, points)

        return Meter(charge, limiter.burst, page, head)

    def _paying(self, user_id: str) -> Pay | None:
        """What the stored events a run reads cost: a point per event, as a
        ``taskProgress`` replay's, paid page by page in the caller's turn."""
        limiter = self.serving.limiter
        replays = self.serving.replays

        @contextlib.asynccontextmanager
        async def pay(events: int) -> AsyncIterator[None]:
            if limiter is not None:
                await limiter.pace(user_id, events / REPLAYED_EVENTS_PER_POINT)
            async with replays.turn(user_id):
                yield

        return pay


def _frames(frames: list[Frame]) -> Response:
    """A stream of frames known at once (a refused run, a cursor to resync)."""

    async def body() -> AsyncIterator[bytes]:
        for frame in frames:
            yield frame.encode()

    return StreamingResponse(body(), headers=STREAM_HEADERS)


Reopen = Callable[[Cursor | None], AsyncGenerator[list[Frame] | None, None]]
"""The run's frames after a cursor (all of them after None), read again from the
database, for a paused stream to go on with (``follow.reopened``)."""

Charge = Callable[[float], Awaitable[None]]
"""Pays points from the caller's budget; RateLimitedError when it cannot."""


class Meter:
    """What a run's opening and replayed frames cost (a point per
    ``ANSWER_BYTES_PER_POINT`` bytes, as a GraphQL read of as many bytes pays: the
    first ones free, whole points paid before the bytes go), and how many replayed
    bytes a page may hold (``RUNSTATE_MAX_RESPONSE_BYTES``)."""

    def __init__(self, charge: Charge | None, burst: float, page_bytes: int, head: int) -> None:
        self.charge = charge
        self.burst = math.floor(burst)
        self.page_bytes = page_bytes
        self.head = head
        """The task's seq when the request came: frames of events up to it are replayed."""
        self.through: tuple[int, int] | None = None
        """The (seq, k) of the last frame counted: a paused stream's frames sent again
        are not counted twice."""
        self.bytes = 0
        self.points = 0
        self.paged = 0
        """Replayed bytes sent in this answer (the opening of a run without a cursor
        is paid, not paged: it is the task now, as ``task(id)`` answers it)."""

    def new(self, frames: list[Frame]) -> bool:
        """Whether ``frames`` are not yet counted (and now are)."""
        first, last = frames[0].cursor, frames[-1].cursor
        if first is None or last is None:
            return False  # an error frame: nothing resumes it, nothing to pay
        if self.through is not None and (first.seq, first.k) <= self.through:
            return False
        self.through = (last.seq, last.k)
        return first.seq <= self.head

    async def pay(self, size: int) -> None:
        """Pay for ``size`` more bytes before they are sent (RateLimitedError else)."""
        self.bytes += size
        due = min(self.bytes // ANSWER_BYTES_PER_POINT - self.points, self.burst)
        if due > 0 and self.charge is not None:
            await self.charge(due)
        self.points += max(0, due)

    def pages(self, size: int) -> bool:
        """Whether ``size`` more replayed bytes would pass the page's limit (a page
        holds at least one group, however large)."""
        if self.paged and self.paged + size > self.page_bytes:
            return True
        self.paged += size
        return False


class _Stream:
    """A run's stream: its frames as they come, the next one awaited in a task of its
    own so that each spell of silence gets a keep-alive comment, and the end the
    server brings (a revoked token, a place lost under the user's cap). Its frames
    go out in chunks (``wire``), held from the process's budget until written;
    paused (``pause``), the stream goes on from the database once its client takes
    the chunk on its way."""

    def __init__(
        self,
        keepalive_seconds: float,
        stopping: asyncio.Event,
        budget: Budget | None = None,
        meter: Meter | None = None,
        reopen: Reopen | None = None,
    ) -> None:
        self.keepalive_seconds = keepalive_seconds
        self.stopping = stopping
        self.budget = budget or Budget(1 << 62)
        self.meter = meter or Meter(None, 0, 1 << 62, 0)
        self.reopen = reopen
        self.frames: AsyncGenerator[list[Frame] | None, None] | None = None
        self.ready: list[Frame] | None = None
        """The opening, read (and paid for) before the answer began."""
        self.revoked = asyncio.Event()
        self.why = ("UNAUTHENTICATED", "the token was revoked")
        """The ``RUN_ERROR`` code and message the end the server brought is told with."""
        self.upcoming: asyncio.Future[list[Frame] | None] | None = None
        self.sending: Iterator[tuple[bytes, Place]] | None = None
        self.ends = False
        """Whether the frames being sent end the run."""
        self.place = Place(None)
        self.stuck_since: float | None = None
        self.paused = False
        self.pending = 0
        """The bytes of the chunk on its way."""
        self.closing: set[asyncio.Task[None]] = set()

    async def revoke(self, code: int, reason: str) -> None:
        """``Connection.close``: the token was revoked (4403), or the stream's place
        under its user's cap was lost while its server stalled (4029,
        ``Connections.reclaim``); the run ends at once."""
        if code == TOO_MANY_CONNECTIONS:
            self.why = ("TOO_MANY_CONNECTIONS", reason)
        self.revoked.set()

    def pause(self) -> int:
        """Let go of the frames, the run's document and subscription (closed in a task
        of their own), keeping the chunk on its way; the bytes let go of."""
        self.paused = True
        self.sending = None
        frames, self.frames = self.frames, None
        if frames is not None:
            closing = asyncio.ensure_future(frames.aclose())
            self.closing.add(closing)
            closing.add_done_callback(self.closing.discard)
        return self.budget.held(self) - self.pending

    async def body(self) -> AsyncIterator[bytes]:
        """The frames, an event's together, keep-alive comments, ``RUN_ERROR
        UNAUTHENTICATED`` once the token is revoked (``TOO_MANY_CONNECTIONS`` once
        the place is lost), and a clean end (no terminal frame: the client resumes
        by cursor) once the server begins to stop or a replay has sent a page's
        worth (``RUNSTATE_MAX_RESPONSE_BYTES``)."""
        stopped = asyncio.ensure_future(self.revoked.wait())
        ending = asyncio.ensure_future(self.stopping.wait())
        skip = 0
        try:
            while True:
                if self.paused:
                    self.paused = False
                    assert self.reopen is not None, "only a stream that can reopen is paused"
                    self.frames = self.reopen(self.place.cursor)
                    skip = self.place.offset
                if self.sending is None:
                    if self.ready is not None:
                        self.sending, self.ready = self._sent(self.ready, 0), None
                        continue
                    assert self.frames is not None
                    if self.upcoming is None:
                        self.upcoming = asyncio.ensure_future(anext(self.frames, None))
                    waiting: set[asyncio.Future[Any]] = {self.upcoming, stopped, ending}
                    done, _ = await asyncio.wait(
                        waiting, timeout=self.keepalive_seconds, return_when=asyncio.FIRST_COMPLETED
                    )
                    if stopped in done:
                        yield error(*self.why).encode()
                        return
                    if ending in done:
                        # Not the run's end: its client reconnects with Last-Event-ID (to
                        # another process) and goes on from the last frame it holds.
                        yield SERVER_STOPPING
                        return
                    if self.upcoming not in done:
                        yield KEEPALIVE
                        continue
                    came, self.upcoming = self.upcoming, None
                    group = came.result()
                    del came
                    if group is None:
                        return
                    ended = await self._admitted(group)
                    if ended is not None:
                        yield ended
                        return
                    self.sending, skip = self._sent(group, skip), 0
                    del group
                step = next(self.sending, None)
                if step is None:
                    self.sending = None
                    if self.ends:
                        return
                    continue
                chunk, place = step
                del step
                self.pending = len(chunk)
                self.stuck_since = time.monotonic()
                yield chunk
                self.stuck_since = None
                self.budget.release(self, self.pending)
                self.pending = 0
                self.place = place
        finally:
            stopped.cancel()
            ending.cancel()
            self.budget.leave(self)

    def _sent(self, group: list[Frame], skip: int) -> Iterator[tuple[bytes, Place]]:
        """The group's chunks, its bytes held from the budget."""
        self.ends = group[-1].last
        self.budget.hold(self, sum(frame.size for frame in group) - skip)
        return chunks(group, self.place, skip)

    async def _admitted(self, group: list[Frame]) -> bytes | None:
        """None when the group may go: paid for if it is replayed; else what the
        answer ends with instead: the end of a page, or ``RUN_ERROR RATE_LIMITED``."""
        if not self.meter.new(group):
            return None
        size = sum(frame.size for frame in group)
        if self.meter.pages(size):
            return PAGED
        try:
            await self.meter.pay(size)
        except RateLimitedError as limited:
            message = f"{limited.message}: resume from the last frame once the budget allows"
            return error("RATE_LIMITED", message).encode()
        return None

    async def close(self) -> None:
        """Stop waiting for the next frame and close the frames (idempotent)."""
        upcoming, self.upcoming = self.upcoming, None
        if upcoming is not None:
            upcoming.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await upcoming  # whatever it ended with, the stream is over
        frames, self.frames = self.frames, None
        if frames is not None:
            await frames.aclose()
        for closing in tuple(self.closing):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await closing


class _Streaming(StreamingResponse):
    """The answer of a run: exempt from the operation time limit, since it lasts
    while its client listens (``CancelOnDisconnect`` still stops it when the client
    leaves); once it ends, however it ends, the stream is closed and its
    connection let go."""

    def __init__(self, stream: _Stream, release: Callable[[], Awaitable[None]]) -> None:
        super().__init__(stream.body(), headers=STREAM_HEADERS)
        self.stream = stream
        self.release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        writing = scope.get(WRITING)
        if writing is not None:
            writing.streams = True
        try:
            await super().__call__(scope, receive, send)
        finally:
            # Shielded: a cancelled request (its client left) still lets go of its
            # connection, which would otherwise count against the user until restart.
            await _unstoppable(self._end())

    async def _end(self) -> None:
        try:
            await self.stream.close()
        finally:
            await self.release()


async def _unstoppable(work: Awaitable[None]) -> None:
    """Run ``work`` to its end even if the caller is cancelled meanwhile."""
    task = asyncio.ensure_future(work)
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.shield(task)
