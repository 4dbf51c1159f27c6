"""The GraphQL HTTP view and the ASGI guards in front of it: body size and bearer auth."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from cross_web import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.types.unset import UNSET, UnsetType

from runstate.auth import Principal, principal_from_header
from runstate.schema.context import Context
from runstate.schema.fanout import SHARED
from runstate.settings import Settings


class GraphQLView(GraphQL[Context, None]):
    """Strawberry's ASGI view with the caller in the context and strict JSON parsing."""

    def __init__(self, schema: Any, settings: Settings) -> None:
        super().__init__(schema, graphql_ide="graphiql" if settings.graphiql else None)
        self.settings = settings

    async def get_context(self, request: Request | WebSocket, response: Any) -> Context:
        # BearerAuth has refused every HTTP request without a caller, except the
        # GraphiQL page itself, which Strawberry renders after building a context.
        principal = request.scope.get("runstate.principal")
        return Context(
            principal=principal if isinstance(principal, Principal) else None,
            settings=self.settings,
        )

    async def on_ws_connect(self, context: Context) -> UnsetType | dict[str, object] | None:
        """Authenticate a WebSocket from ``{"authorization": "Bearer <token>"}`` in
        connection_init; anything else closes it with 4403."""
        params = context.connection_params or {}
        header = params.get("authorization", params.get("Authorization"))
        principal = await principal_from_header(header if isinstance(header, str) else None)
        if principal is None:
            raise ConnectionRejectionError()
        context.principal = principal
        return cast(UnsetType, UNSET)

    def encode_json(self, data: object) -> str | bytes:
        """A subscription's ``next`` message around the event's shared rendering
        (see ``schema.fanout``); anything else as Strawberry encodes it."""
        if isinstance(data, Mapping):
            shared = SHARED.next_message(data)
            if shared is not None:
                return shared
        return super().encode_json(data)

    def parse_json(self, data: str | bytes) -> Any:
        """Any undecodable body (bad UTF-8, bad JSON, absurd nesting) is a 400, and so
        is JSON that is not an object (``null``, ``42``, ``"x"``): a GraphQL request
        is an object."""
        try:
            parsed = json.loads(data)
        except (ValueError, RecursionError) as e:
            raise HTTPException(400, "Unable to parse request body as JSON") from e
        if not isinstance(parsed, dict | list):  # a list is a batch: Strawberry refuses it
            raise HTTPException(400, "The request body must be a JSON object")
        return parsed


def _is_ide_page(scope: Scope) -> bool:
    """A browser asking for GraphiQL itself (no query), which needs no token."""
    if scope["method"] != "GET" or b"query=" in scope.get("query_string", b""):
        return False
    headers = dict(scope["headers"])
    return b"text/html" in headers.get(b"accept", b"")


class BearerAuth:
    """Resolves ``Authorization: Bearer`` to a Principal; 401 for HTTP requests without one."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _is_ide_page(scope):
            await self.app(scope, receive, send)
            return
        header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        principal = await principal_from_header(header)
        if principal is None:
            response: Response = JSONResponse(
                {"errors": [{"message": "missing or invalid bearer token"}]},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        await self.app({**scope, "runstate.principal": principal}, receive, send)


class BodyLimit:
    """Answers 413 to a request body larger than ``limit`` bytes, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _too_large(scope, receive, send, self.limit)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise _TooLargeError
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLargeError:
            await _too_large(scope, receive, send, self.limit)


class _TooLargeError(Exception):
    """A streamed body went past the limit."""


async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    response = JSONResponse(
        {"errors": [{"message": f"request body is larger than {limit} bytes"}]}, status_code=413
    )
    await response(scope, receive, send)
