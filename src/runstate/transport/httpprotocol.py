"""uvicorn's HTTP protocol (httptools), with the connection's admission, the
deadlines of its requests' headers and bodies, and the hook by which a request's
live token vouches for its connection (``transport.admission``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from runstate.transport.admission import ADMISSION, BODY_MIN_RATE, VOUCH, Admission

TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 26\r\nconnection: close\r\n\r\nrequest sent too slowly.\r\n"
)


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's, refusing connections its app's ``Admission`` does not take,
    closing one whose request's headers or body come too slowly, giving each
    request the ``VOUCH`` extension (``BearerAuth`` calls it on a live token), and
    telling the app when the server stops.

    Without an admission in the lifespan state (an app that has none), it is
    uvicorn's own.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.admission: Admission | None = self.app_state.get(ADMISSION)
        self.deadline: asyncio.TimerHandle | None = None
        self.reading: str | None = None
        """What the deadline waits for: "headers", "body", or None."""
        self.began = False
        """Whether a request's first bytes came since the last answer."""
        self.body_from = 0.0
        self.body_bytes = 0
        self.vouch: Callable[[], None] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.admission is None:
            return
        if not self.admission.admit(transport, self.client[0] if self.client else None):
            transport.abort()
            return
        self.vouch = partial(self.admission.vouch, transport)
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.admission is not None:
            self.admission.leave(self.transport)
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """uvicorn stops the server: first tell the app (``Admission.stop``), so that
        its event streams end while the grace period runs, then uvicorn's own."""
        if self.admission is not None:
            self.admission.stop()
        super().shutdown()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.vouch is not None:
            extensions: dict[str, Any] = {VOUCH: self.vouch}  # a callable, not ASGI's dict
            self.scope["extensions"] = extensions
        self.began = True
        if self.admission is not None and self.reading is None:
            self._await_headers()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()
        if self.admission is None or (self.parser.should_upgrade() and self._should_upgrade()):
            return  # an upgrade: the WebSocket's own timeouts apply from here
        self.reading = "body"
        self.body_from = self.loop.time()
        self.body_bytes = 0
        self.deadline = self.loop.call_later(self.admission.body_seconds, self._expired)

    def on_body(self, body: bytes) -> None:
        self.body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        self.began = False
        super().on_message_complete()

    def _await_headers(self) -> None:
        assert self.admission is not None
        self._disarm()
        self.reading = "headers"
        self.deadline = self.loop.call_later(self.admission.header_seconds, self._expired)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        self.reading = None

    def _expired(self) -> None:
        """The deadline passed: a body that kept up its rate gets the time it
        earned; else the connection is answered 408 (when a request had begun) and
        closed."""
        assert self.admission is not None
        self.deadline = None
        if self.reading == "body":
            earned = self.body_from + self.admission.body_seconds + self.body_bytes / BODY_MIN_RATE
            if earned > self.loop.time():
                self.deadline = self.loop.call_at(earned, self._expired)
                return
        what, self.reading = self.reading, None
        if self.transport.is_closing():
            return
        if what == "headers" and not self.began:
            self.admission.unused()  # not a byte since it opened: a browser's spare
        else:
            self.admission.refused(f"{what} too slow")
        answering = what == "body" and self.cycle is not None and self.cycle.response_started
        if self.began and not answering:
            self.transport.write(TIMED_OUT)
        self.transport.close()
