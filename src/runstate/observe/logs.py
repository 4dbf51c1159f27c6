"""The server's log: every line as JSON or text, each carrying the id of the
request it was logged in (``transport.request_log`` opens a request and writes its
one line), at the level ``RUNSTATE_LOG_LEVEL`` names and above. uvicorn's WebSocket
lines ("[accepted]") lose their query strings (``_WithoutQueryStrings``), so no
token reaches the log, and are written only while the request log writes every
line (``_WithoutConnectionLines``).
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

FORMATS = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

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


_HANDSHAKES = frozenset({"connection open", "connection rejected (%d %s)"})
"""websockets' line for each handshake it answers, on uvicorn's logger: it names
neither the client nor the path, and uvicorn's own line for the upgrade says as
much ("[accepted]", or the refusal's status)."""

_UPGRADE_LINES = frozenset(
    {'%s - "WebSocket %s" [accepted]', '%s - "WebSocket %s" 403', '%s - "WebSocket %s" %d'}
)
"""uvicorn's line for each WebSocket upgrade it accepts or refuses."""


class _WithoutConnectionLines(logging.Filter):
    """Drops websockets' line per handshake, always, and uvicorn's line per upgrade
    unless ``upgrades`` (the request log writes every line): opening and closing
    sockets wrote two or three lines each (368 bytes of JSON with the request log
    off), whatever ``RUNSTATE_REQUEST_LOG`` said. The request log's own line for
    each connection says what they did."""

    def __init__(self, upgrades: bool) -> None:
        super().__init__()
        self.upgrades = upgrades

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("uvicorn"):
            return True
        if record.msg in _HANDSHAKES:
            return False
        return self.upgrades or record.msg not in _UPGRADE_LINES


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


def configure(fmt: str, level: str = "INFO", *, upgrades: bool = True) -> None:
    """Send every logger's records of ``level`` (one of ``LEVELS``) and above to
    stderr, as ``fmt`` (text or json); uvicorn's line per WebSocket upgrade only
    when ``upgrades``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_WithoutConnectionLines(upgrades))
    handler.addFilter(_WithRequestId())
    handler.addFilter(_WithoutQueryStrings())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
