"""The SDK's HTTP/1.1 client: POSTs over pools of keep-alive connections, on asyncio
and httptools' response parser (llhttp), and nothing more.

A query or mutation is one small POST and its answer: gql's session on httpx spent
about 0.5 ms of the client's CPU on each, against 0.05 ms here, which made the HTTP
client about half of a LangGraph super-step's CPU through ``RunstateSaver``.

``Connections`` keeps, per origin (scheme, host, port), the idle connections for
reuse, newest first, and opens a new one whenever all are busy: one request in
flight per connection. An answer is read by its Content-Length, chunked, or until
the server closes; a connection the server will close (``Connection: close``, an
HTTP/1.0 answer) is not kept. https uses ``ssl.create_default_context()``.

It connects directly: HTTP(S)_PROXY and NO_PROXY are not read (runstate usually
runs on the caller's network; httpx, before, honoured them).

Failures are the few exceptions below, all ``HTTPError``s, or ``TimeoutError``
when a request's time (``within``) passed (the connection it was on is closed). A
request that found a reused connection closed by the server while it lay idle
(uvicorn closes one after 5 s), before any byte of an answer came, is sent once
more on a new connection, unseen by the caller.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

import httptools

_NO_BODY = {204, 304}
"""Statuses whose answers have no body, whatever their headers say."""


class HTTPError(Exception):
    """A request that got no usable answer."""


class ConnectionFailedError(HTTPError):
    """No connection could be opened, or it ended before the answer was whole."""


class BrokenAnswerError(HTTPError):
    """Bytes that are not an HTTP answer, or an answer that is not the one awaited."""


class ClosedError(HTTPError):
    """The ``Connections`` were closed before the request was sent."""


class _UnansweredError(ConnectionFailedError):
    """The connection ended before any byte of an answer came."""


@dataclass(frozen=True, slots=True)
class Response:
    """An answer: its status, the reason phrase of its status line, its body."""

    status: int
    reason: str
    body: bytes


@cache
def _tls() -> ssl.SSLContext:
    """The context of every https connection: the system's trusted certificates."""
    return ssl.create_default_context()


class _Connection(asyncio.Protocol):
    """One keep-alive connection: a request written whole, its answer parsed as it
    comes and handed to ``answer`` once whole."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.answer: asyncio.Future[Response] | None = None
        self.reason = b""
        self.body: list[bytes] = []
        self.framed = False
        """The answer's headers gave its length (Content-Length or chunked): else it
        ends when the server closes."""
        self.headed = False
        self.heard = False
        """Some byte of the current answer came."""
        self.reusable = True
        self.gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        """Done once the socket is closed."""

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.heard = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(BrokenAnswerError(f"not an HTTP answer ({error})"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self.transport = None
        self.gone.set_result(None)
        if self.headed and not self.framed:
            self._finish()  # an answer without a length ends with its connection
        elif not self.heard:
            self._fail(_UnansweredError(f"the connection was closed before an answer ({exc})"))
        else:
            self._fail(ConnectionFailedError(f"the connection was closed mid-answer ({exc})"))

    # -- httptools' callbacks

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.headed = True
        if self.parser.get_status_code() in _NO_BODY:
            self.framed = True

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if not self.parser.should_keep_alive():  # Connection: close, or HTTP/1.0
            self.reusable = False
        self._finish()

    # -- requests

    async def exchange(self, message: bytes) -> Response:
        """Write ``message`` (a whole request) and await its answer."""
        transport = self.transport
        if transport is None or transport.is_closing():
            raise _UnansweredError("the connection was closed while idle")
        self.answer = asyncio.get_running_loop().create_future()
        transport.write(message)
        return await self.answer

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    def _finish(self) -> None:
        answer, self.answer = self.answer, None
        if answer is None or answer.done():
            self.close()  # an answer nobody asked for (a 408 while idle, say)
            return
        status = self.parser.get_status_code()
        answer.set_result(Response(status, self.reason.decode("latin-1"), b"".join(self.body)))
        self.reason, self.body = b"", []
        self.heard = self.headed = self.framed = False
        if not self.reusable:
            self.close()

    def _fail(self, error: HTTPError) -> None:
        self.close()
        answer, self.answer = self.answer, None
        if answer is not None and not answer.done():
            answer.set_exception(error)


class _Origin:
    """The connections to one scheme, host and port: idle ones, newest last."""

    def __init__(self, scheme: str, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.tls = _tls() if scheme == "https" else None
        self.idle: list[_Connection] = []
        self.open: set[_Connection] = set()
        """Every connection whose socket is not yet closed, idle, busy or closing."""
        self.closed = False

    async def post(self, message: bytes, within: float) -> Response:
        """``message``'s answer, on an idle connection if one is, else a new one; once
        more on a new one if the idle one had been closed by the server."""
        async with asyncio.timeout(within):
            while self.idle:
                connection = self.idle.pop()
                if connection.reusable:
                    try:
                        return await self._exchange(connection, message)
                    except _UnansweredError:
                        break
            return await self._exchange(await self._open(), message)

    async def _open(self) -> _Connection:
        if self.closed:
            raise ClosedError("these connections were closed")
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(
                _Connection, self.host, self.port, ssl=self.tls
            )
        except OSError as error:
            where = f"{self.host}:{self.port}"
            raise ConnectionFailedError(f"cannot connect to {where} ({error})") from error
        self.open.add(connection)
        connection.gone.add_done_callback(lambda _: self.open.discard(connection))
        return connection

    async def _exchange(self, connection: _Connection, message: bytes) -> Response:
        try:
            answer = await connection.exchange(message)
        except BaseException:  # a timeout or a cancel leaves the answer unread
            connection.close()
            raise
        if connection.reusable and not self.closed:
            self.idle.append(connection)
        else:  # closed by ``aclose`` while it opened, or the server's to close
            connection.close()
        return answer

    async def aclose(self) -> None:
        """Close every connection, and wait until their sockets are, those closed
        before too (a request cancelled mid-answer): the loop may close next, which
        would leave them open."""
        self.closed = True
        connections = list(self.open)
        self.idle.clear()
        for connection in connections:
            connection.close()
        await asyncio.gather(*(connection.gone for connection in connections))


class Endpoint:
    """One URL and the headers sent with each POST to it, on a ``Connections``."""

    def __init__(self, connections: Connections, url: str, headers: Mapping[str, str]) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url
        self.connections = connections
        self.origin_key = (parts.scheme, parts.hostname, parts.port or _PORTS[parts.scheme])
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [f"POST {target} HTTP/1.1", f"Host: {parts.netloc.rpartition('@')[2]}"]
        for name, value in {"Content-Type": "application/json", **headers}.items():
            if any(c in f"{name}{value}" for c in "\r\n\0"):
                raise ValueError(f"a header {name!r} that would break the request")
            lines.append(f"{name}: {value}")
        self.head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

    async def post(self, body: bytes, within: float) -> Response:
        """POST ``body`` (JSON) with the endpoint's headers; its answer, whatever its
        status. Raises an ``HTTPError``, or ``TimeoutError`` after ``within`` seconds."""
        origin = self.connections.origin(self.origin_key)
        message = b"%s%d\r\n\r\n%s" % (self.head, len(body), body)
        return await origin.post(message, within)


_PORTS = {"http": 80, "https": 443}


class Connections:
    """Pools of HTTP connections, one per origin, for any number of callers: each
    ``Endpoint`` sends its own headers. It belongs to the event loop that first
    sends through it; ``aclose`` closes every connection and refuses what follows."""

    def __init__(self) -> None:
        self._origins: dict[tuple[str, str, int], _Origin] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def endpoint(self, url: str, headers: Mapping[str, str]) -> Endpoint:
        """POSTs to ``url`` with ``headers`` on these connections."""
        return Endpoint(self, url, headers)

    def origin(self, key: tuple[str, str, int]) -> _Origin:
        """The pool of one origin, made on first use, on this pool's loop only."""
        if self._closed:
            raise ClosedError("these connections were closed")
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:
            raise RuntimeError("these connections belong to another event loop")
        origin = self._origins.get(key)
        if origin is None:
            origin = self._origins[key] = _Origin(*key)
        return origin

    async def aclose(self) -> None:
        """Close every connection; a request after this raises ``ClosedError``."""
        self._closed = True
        origins = list(self._origins.values())
        self._origins.clear()
        for origin in origins:
            await origin.aclose()
