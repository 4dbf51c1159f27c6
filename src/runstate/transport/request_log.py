"""One log line per HTTP request and per WebSocket connection, with its request id.

``RequestLog`` gives each request an id (the client's ``X-Request-ID`` when it is
a plain token of at most 64 characters, else a new one), answers it in the
``X-Request-ID`` header, and logs one line when the request ends: method, path,
status, milliseconds, user and the id. Never the query string, a header or a
body, so no token and no payload reaches the log. Every other line logged while
the request runs carries the same id (``observe.logs``). uvicorn's access log,
which prints query strings, is off (``cli.py``). A request whose client left
before its answer is logged with status 499, nginx's "client closed request",
not as a failure.

``RUNSTATE_REQUEST_LOG`` (``Settings.request_log``) says how many of those lines
are written: ``on`` (the default) every one, ``sample:N`` one in N requests and
connections (the first, the N+1st, ... a process serves, counted as each begins;
the line then says ``one_in: N``), ``off`` none. Every request keeps its id, its
``X-Request-ID`` answer and its id on every other line either way: a busy server
(a graph's super-steps are a request each) keeps its log to what it can read.
"""

from __future__ import annotations

import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runstate.observe.logs import CURRENT, Request, log

_CLIENT_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


_ANSWERS = ("http.response.start", "websocket.accept", "websocket.http.response.start")
"""The messages that begin an answer: its status (101 for an accepted WebSocket,
an upgrade's refusal's own) and its X-Request-ID header."""

CLIENT_CLOSED_REQUEST = 499
"""The status logged for a request whose client left before it was answered."""


class RequestLog:
    """The request id and the one log line of every HTTP request, and of every
    WebSocket connection when it ends (method ``WS``; status 101 while accepted, or
    the close code the server sent)."""

    def __init__(self, app: ASGIApp, every: int = 1) -> None:
        """``every``: a line for one request in this many (1 for each, 0 for none)."""
        self.app = app
        self.every = every
        self.begun = 0

    def _logs_next(self) -> bool:
        """Count a request in; whether its line is written."""
        self.begun += 1
        return self.every > 0 and (self.begun - 1) % self.every == 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request = Request(given if _CLIENT_ID.fullmatch(given) else uuid.uuid4().hex)
        token = CURRENT.set(request)
        logged = self._logs_next()
        status = 500
        began = time.perf_counter()
        method = scope.get("method", "WS")

        answered = False

        async def receiving() -> Message:
            nonlocal status
            message = await receive()
            if message["type"] == "http.disconnect" and not answered:
                status = CLIENT_CLOSED_REQUEST
            return message

        async def sending(message: Message) -> None:
            nonlocal status, answered
            if message["type"] in _ANSWERS:
                answered = True
                status = message.get("status", 101)
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-request-id", request.id.encode()),
                ]
            elif message["type"] == "websocket.close":
                status = message.get("code", 1000)
            await send(message)

        try:
            await self.app(scope, receiving if scope["type"] == "http" else receive, sending)
        finally:
            if logged:
                self._line(request, method, scope["path"], status, began)
            CURRENT.reset(token)

    def _line(self, request: Request, method: str, path: str, status: int, began: float) -> None:
        """The request's one line."""
        ms = round((time.perf_counter() - began) * 1000, 2)
        fields: dict[str, object] = {
            "method": method,
            "path": path,
            "status": status,
            "ms": ms,
            "user": request.user,
        }
        if self.every > 1:
            fields["one_in"] = self.every
        log.info(
            "%s %s %d %.1f ms (%s)",
            method,
            path,
            status,
            ms,
            request.user or "anonymous",
            extra={"fields": fields},
        )
