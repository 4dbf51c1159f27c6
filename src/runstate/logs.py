"""The server's log: one line per HTTP request and per WebSocket connection, with its
request id, as JSON or text.

``RequestLog`` gives each request an id (the client's ``X-Request-ID`` when it is
a plain token of at most 64 characters, else a new one), answers it in the
``X-Request-ID`` header, and logs one line when the request ends: method, path,
status, milliseconds, user and the id. Never the query string, a header or a
body, so no token and no payload reaches the log. Every other line logged while
the request runs carries the same id. uvicorn's access log, which prints query
strings, is off (``cli.py``), and its WebSocket lines ("[accepted]") lose theirs
(``_WithoutQueryStrings``). A request whose client left before its answer is
logged with status 499, nginx's "client closed request", not as a failure.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import uuid
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

FORMATS = ("text", "json")

log = logging.getLogger("runstate.request")


@dataclass
class Request:
    """What the log line of the request running in this context will say."""

    id: str
    user: str | None = None


CURRENT: ContextVar[Request | None] = ContextVar("runstate_request", default=None)
"""The request being served; a mutable record, so that the auth middleware, which
runs in a task of its own, can fill in the user."""


def name_user(user_id: str) -> None:
    """Record who the request being served is from, for its log line."""
    request = CURRENT.get()
    if request is not None:
        request.user = user_id


_CLIENT_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class _WithRequestId(logging.Filter):
    """Adds the current request's id to every record (None outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = CURRENT.get()
        record.request_id = None if request is None else request.id
        return True


class _WithoutQueryStrings(logging.Filter):
    """Cuts the query string off every path uvicorn logs: its WebSocket lines print
    the whole path, and ``ws://.../graphql?token=rs_...`` put a token in the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("uvicorn") and isinstance(record.args, tuple):
            record.args = tuple(
                a.split("?", 1)[0] if isinstance(a, str) and a.startswith("/") else a
                for a in record.args
            )
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request id, the
    record's ``fields`` and, for an exception, its traceback."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            line["request_id"] = request_id
        line.update(getattr(record, "fields", {}))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(fmt: str, level: int = logging.INFO) -> None:
    """Send every logger's records to stderr, as ``fmt`` (text or json)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_WithRequestId())
    handler.addFilter(_WithoutQueryStrings())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


CLIENT_CLOSED_REQUEST = 499
"""The status logged for a request whose client left before it was answered."""


class RequestLog:
    """The request id and the one log line of every HTTP request, and of every
    WebSocket connection when it ends (method ``WS``; status 101 while accepted, or
    the close code the server sent)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request = Request(given if _CLIENT_ID.fullmatch(given) else uuid.uuid4().hex)
        token = CURRENT.set(request)
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
            if message["type"] in ("http.response.start", "websocket.accept"):
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
            fields = {
                "method": method,
                "path": scope["path"],
                "status": status,
                "ms": round((time.perf_counter() - began) * 1000, 2),
                "user": request.user,
            }
            log.info(
                "%s %s %d %.1f ms (%s)",
                method,
                scope["path"],
                status,
                fields["ms"],
                request.user or "anonymous",
                extra={"fields": fields},
            )
            CURRENT.reset(token)
