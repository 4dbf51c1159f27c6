"""Every request of an app runs in the app's own database context.

Tortoise finds a model's connection through the current ``TortoiseContext`` (a
ContextVar). An app's lifespan runs in a task of its own, so what it opened is not
current in the tasks uvicorn serves requests in: ``InDatabase`` makes the app's
``Database`` current for each request and WebSocket, and every task they start
inherits it. Two apps in one process thus never use each other's connections.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from runstate.storage.database import Database


class InDatabase:
    """Runs each HTTP request and WebSocket in ``database``'s context."""

    def __init__(self, app: ASGIApp, database: Database) -> None:
        self.app = app
        self.database = database

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # the lifespan enters the context itself
            await self.app(scope, receive, send)
            return
        with self.database.current():
            await self.app(scope, receive, send)
