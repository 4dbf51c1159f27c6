"""The base of runstate's ASGI middlewares that act on HTTP requests alone."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable

from starlette.types import ASGIApp, Receive, Scope, Send


class HttpOnly(ABC):
    """An ASGI middleware for HTTP requests: any other scope (a WebSocket, the
    lifespan) goes straight on to the app, holding no frame of the middleware for
    its whole life. With thousands of idle WebSockets, a frame each of three such
    middlewares was memory and objects for the collector to scan, for nothing."""

    app: ASGIApp

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] != "http":
            return self.app(scope, receive, send)
        return self.http(scope, receive, send)

    @abstractmethod
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The middleware's work on an HTTP request."""
