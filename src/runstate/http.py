"""The GraphQL view and the ASGI guards in front of the app: body size and bearer auth.

Auth is the default: ``BearerAuth`` wraps the whole app and lets through without a
token only the routes that carry no data (``PUBLIC_PATHS``, the static files) and a
plain GET of the GraphiQL page, decided on the decoded request.

The view answers as the GraphQL-over-HTTP draft says (``media``): the media type
negotiated on ``Accept`` (406 when neither is acceptable), no ``data`` entry on a
request error, every refusal as a JSON body, 405 with ``Allow``, 415 for a body
that is not JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from cross_web import HTTPException
from graphql import GraphQLError, OperationType, get_operation_ast
from starlette.datastructures import Headers, QueryParams
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.http import GraphQLRequestData
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
    Operation,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import ConnectionInitMessage
from strawberry.types import ExecutionResult

from runstate import logs, media
from runstate.auth import Principal, Tokens
from runstate.connections import Connection, Connections, TooManyConnectionsError
from runstate.ratelimit import PEEK, SPEND, SPENT, TAKE, Budgets, RateLimiter, Spending
from runstate.schema.context import Context
from runstate.schema.extensions import parse_document
from runstate.schema.fanout import SHARED
from runstate.services.errors import RateLimitedError
from runstate.services.validation import encoded, storable_text
from runstate.settings import Settings
from runstate.web.routes import GRAPHIQL

TOO_MANY_CONNECTIONS = 4029
"""runstate's own close code for a user past ``RUNSTATE_MAX_CONNECTIONS``. Not one
graphql-transport-ws defines (its 4429 means a second ``connection_init``, which
graphql-ws treats as fatal): graphql-ws retries this one with its backoff, 1.3 s
and more between attempts, five times, by which time a connection may be free."""


class TransportWS(BaseGraphQLTransportWSHandler[Context, None]):
    """graphql-transport-ws, authenticated in ``connection_init`` and counted per user.

    The caller comes from ``{"authorization": "Bearer <token>"}`` in the init payload
    (or GraphiQL's ``Authorization``); anything else closes the socket with 4403, and
    a user past ``max_connections`` on this process gets ``TOO_MANY_CONNECTIONS``.
    """

    view: GraphQLView
    connection: Connection | None = None

    async def handle_connection_init(self, message: ConnectionInitMessage) -> None:
        """Strawberry's handling of ``connection_init``, with runstate's checks in
        place of ``on_ws_connect`` (which can only answer 4403)."""
        if self.connection_timed_out:
            return
        if self.connection_init_timeout_task:
            self.connection_init_timeout_task.cancel()
        payload = message.get("payload") or {}
        if not isinstance(payload, dict):
            await self.websocket.close(4400, "Invalid connection init payload")
            return
        if self.connection_init_received:
            await self.websocket.close(4429, "Too many initialisation requests")
            return
        self.connection_init_received = True
        header = payload.get("authorization", payload.get("Authorization"))
        principal = await self.view.tokens.principal(header if isinstance(header, str) else None)
        if principal is None:
            await self.websocket.close(4403, "Forbidden: missing or invalid bearer token")
            return
        logs.name_user(principal.user_id)
        connection = Connection(principal.user_id, principal.token_digest, self.websocket.close)
        try:
            await self.view.connections.add(connection)
        except TooManyConnectionsError:
            limit = self.view.connections.per_user
            await self.websocket.close(
                TOO_MANY_CONNECTIONS, f"Too many connections: at most {limit} per user"
            )
            return
        self.connection = connection
        self.context.connection_params = payload
        self.context.principal = principal
        await self.send_message({"type": "connection_ack"})
        self.connection_acknowledged = True

    async def run_operation(self, operation: Operation[Context, None]) -> None:
        """Strawberry's, with a query or mutation stopped after ``operation_seconds``
        and answered with an error, as over HTTP; a subscription runs as long as its
        client wants it."""
        seconds = self.view.settings.operation_seconds
        if self._is_subscription(operation):
            await super().run_operation(operation)
            return
        try:
            async with asyncio.timeout(seconds):
                await super().run_operation(operation)
        except TimeoutError:
            await operation.send_initial_errors([GraphQLError(stopped_after(seconds))])

    def _is_subscription(self, operation: Operation[Context, None]) -> bool:
        """Whether the operation is a subscription (see ``_subscribes``). Parsed
        within the token limit and through the schema's parser cache, so Strawberry
        does not parse it again."""
        return _subscribes(operation.query, operation.operation_name, self.view.settings.max_tokens)

    async def shutdown(self) -> None:
        """End the connection's operations, then stop counting it."""
        try:
            await super().shutdown()
        finally:
            if self.connection is not None:
                await self.view.connections.remove(self.connection)


SUBSCRIPTIONS_OVER_HTTP = (
    "Subscriptions run over a WebSocket: connect to /graphql with graphql-transport-ws"
)


def _subscribes(query: str | None, operation_name: str | None, max_tokens: int) -> bool:
    """Whether the operation is a subscription (False if the document does not parse
    or has no such operation: Strawberry answers those)."""
    if query is None:
        return False
    try:
        document = parse_document(query, max_tokens)
    except GraphQLError:
        return False
    found = get_operation_ast(document, operation_name)
    return found is not None and found.operation is OperationType.SUBSCRIPTION


def stopped_after(seconds: float) -> str:
    """What an operation stopped by the time limit answers."""
    return f"stopped after {seconds:g} s: ask for less"


_MEDIA = "runstate.media"
"""Where the request's scope keeps the media type its answer takes."""
ALLOWED_METHODS = "GET, POST"


def refusal(
    status: int,
    message: str,
    media_type: str = media.JSON,
    *,
    extensions: Mapping[str, object] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """A request refused (or stopped: 503) outside GraphQL, as a GraphQL response with
    one error and no ``data``; a 405 names the methods that are allowed."""
    error: dict[str, object] = {"message": message}
    if extensions is not None:
        error["extensions"] = dict(extensions)
    headers = {**(headers or {}), **({"Allow": ALLOWED_METHODS} if status == 405 else {})}
    body = json.dumps({"errors": [error]}, separators=(",", ":"))
    return Response(body, status_code=status, media_type=media_type, headers=headers)


def _is_request_error(result: ExecutionResult) -> bool:
    """Whether the request failed before execution began: no data, and errors none of
    which names a field (a document that does not parse or validate, variables that
    do not coerce). An execution error that nulls the whole answer has a path."""
    errors = result.errors or []
    return result.data is None and bool(errors) and all(e.path is None for e in errors)


class GraphQLView(GraphQL[Context, None]):
    """Strawberry's ASGI view with the caller in the context, strict JSON parsing,
    answers as GraphQL over HTTP specifies them, and runstate's WebSocket handling
    (``TransportWS``)."""

    graphql_transport_ws_handler_class = TransportWS

    def __init__(
        self,
        schema: Any,
        settings: Settings,
        connections: Connections,
        tokens: Tokens,
        limiter: RateLimiter | None = None,
    ) -> None:
        super().__init__(
            schema,
            graphql_ide="graphiql" if settings.graphiql else None,
            allow_queries_via_get=settings.get_queries,
            subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
            connection_init_wait_timeout=timedelta(seconds=settings.connection_init_seconds),
            max_subscriptions_per_connection=settings.max_subscriptions,
            allowed_origins=settings.allowed_origins,
        )
        self.settings = settings
        self.connections = connections
        self.tokens = tokens
        self.limiter = limiter
        self.epoch = ""
        """The database's timeline, read when the app starts (``db.current_epoch``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An HTTP request answered in the media type it accepts, its refusals as JSON
        (Strawberry's own are plain text)."""
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        request = Request(scope=scope, receive=receive)
        chosen = media.negotiate(request.headers.get("accept"))
        response: Response
        if chosen is None and not self.should_render_graphql_ide(
            self.request_adapter_class(request)
        ):
            offered = " or ".join(media.OFFERED)
            response = refusal(406, f"Not Acceptable: the answer is {offered}")
        elif request.method == "POST" and not _json_body(request.headers):
            response = refusal(415, "Unsupported Media Type: send the request as application/json")
        else:
            scope[_MEDIA] = chosen or media.JSON
            try:
                response = await self.run(request)
            except HTTPException as e:
                response = refusal(e.status_code, e.reason, chosen or media.JSON)
        await response(scope, receive, send)

    async def get_sub_response(self, request: Request | WebSocket) -> Response:
        """Strawberry's, carrying the negotiated media type to ``create_response``."""
        sub_response = await super().get_sub_response(request)
        sub_response.media_type = request.scope.get(_MEDIA, media.JSON)
        return sub_response

    async def process_result(self, request: Request, result: ExecutionResult) -> Any:
        """Strawberry's, without ``data`` on a request error (the draft: it must not
        be present when execution never began)."""
        answer = await super().process_result(request, result)
        if _is_request_error(result):
            answer.pop("data", None)
        return answer

    def create_response(self, response_data: Any, sub_response: Response) -> Response:
        """The answer in the negotiated media type: with
        ``application/graphql-response+json`` a request error is a 400 (see ``media``);
        with ``application/json`` every answer that ran is a 200."""
        response = super().create_response(response_data, sub_response)
        chosen = sub_response.media_type or media.JSON
        response.headers["content-type"] = chosen
        failed = isinstance(response_data, dict) and "data" not in response_data
        if failed and chosen == media.GRAPHQL_RESPONSE and not sub_response.status_code:
            response.status_code = 400
        return response

    async def get_context(self, request: Request | WebSocket, response: Any) -> Context:
        # BearerAuth has refused every HTTP request without a caller, except the
        # GraphiQL page itself, which Strawberry renders after building a context.
        principal = request.scope.get("runstate.principal")
        return Context(
            principal=principal if isinstance(principal, Principal) else None,
            settings=self.settings,
            limiter=self.limiter,
            epoch=self.epoch,
            spent=request.scope.get(SPENT) or Spending(),
        )

    async def execute_single(
        self,
        request: Request,
        request_adapter: Any,
        sub_response: Any,
        context: Context,
        root_value: None,
        request_data: GraphQLRequestData,
    ) -> ExecutionResult:
        """An operation over HTTP; a subscription is refused with 400 naming the
        WebSocket, where subscriptions run (over HTTP Strawberry would answer an
        unexplained "Unexpected error")."""
        if _subscribes(request_data.query, request_data.operation_name, self.settings.max_tokens):
            raise HTTPException(400, SUBSCRIPTIONS_OVER_HTTP)
        return await super().execute_single(
            request, request_adapter, sub_response, context, root_value, request_data
        )

    async def render_graphql_ide(self, request: Request) -> Response:
        """runstate's GraphiQL page (``web/graphiql.html``), whose scripts the package
        serves itself: it works without internet, with the token from the link."""
        return HTMLResponse(GRAPHIQL)

    def encode_json(self, data: object) -> str | bytes:
        """A subscription's ``next`` message around the event's shared rendering
        (see ``schema.fanout``); anything else compact, its text as UTF-8
        (``validation.encoded``: what the stored bytes count)."""
        if isinstance(data, Mapping):
            shared = SHARED.next_message(data)
            if shared is not None:
                return shared
        return encoded(data)

    def parse_json(self, data: str | bytes) -> Any:
        """A request body: anything ``strict_json`` refuses is a 400, and so is JSON
        that is not an object (``null``, ``42``, ``"x"``): a GraphQL request is an
        object."""
        try:
            parsed = strict_json(data)
        except ValueError as e:
            raise HTTPException(400, str(e)) from e
        if not isinstance(parsed, dict | list):  # a list is a batch: Strawberry refuses it
            raise HTTPException(400, "The request body must be a JSON object")
        return parsed

    def decode_json(self, data: str | bytes) -> object:
        """A WebSocket message, held to the same rules as a request body; a refused
        one closes the socket (4400), as any message that is not JSON does."""
        try:
            return strict_json(data)
        except ValueError as e:
            raise json.JSONDecodeError(str(e), "", 0) from e


def _json_body(headers: Headers) -> bool:
    """Whether a POST says its body is JSON (``application/json``, any parameters)."""
    kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return kind == media.JSON


_SUSPECT = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")
"""An escape that may decode to NUL or to half of a surrogate pair."""


def strict_json(data: str | bytes) -> Any:
    """JSON as a GraphQL request may carry it, or ValueError saying what is wrong.

    Refused: bad UTF-8 or JSON, nesting deeper than Python's recursion limit, NaN
    and Infinity (not JSON, and stored they make invalid JSON), and strings with
    NUL characters or unpaired surrogates (PostgreSQL cannot store either; SQLite
    would store what PostgreSQL refuses). Refusing them here treats both databases
    alike.
    """
    try:
        parsed = json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("The request body nests too deeply") from None
    except ValueError as e:
        if isinstance(e, _ConstantError):
            raise ValueError(str(e)) from None
        raise ValueError("Unable to parse request body as JSON") from None
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _SUSPECT.search(raw) and not _clean_strings(parsed):
        raise ValueError("Strings must not contain NUL characters or unpaired surrogates")
    return parsed


class _ConstantError(ValueError):
    """NaN, Infinity or -Infinity in a JSON text."""


def _no_constant(name: str) -> object:
    raise _ConstantError(f"{name} is not a JSON number")


def _clean_strings(value: object) -> bool:
    """Whether every string in a decoded JSON value can be stored as text."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not storable_text(item):
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


PUBLIC_PATHS = frozenset({"/", "/healthz", "/readyz"})
"""Routes that answer without a token: they hold no one's data."""


def _is_public(scope: Scope, graphiql: bool) -> bool:
    """A route any visitor may load: the web page, health checks, static files, and a
    plain GET of the GraphiQL page (no parameters at all, once decoded)."""
    path: str = scope["path"]
    if path in PUBLIC_PATHS or path.startswith("/static/"):
        return True
    if path != "/graphql" or not graphiql or scope["method"] != "GET":
        return False
    if QueryParams(scope.get("query_string", b"")):
        return False
    return "text/html" in Headers(scope=scope).get("accept", "")


class BearerAuth:
    """Resolves ``Authorization: Bearer`` to a Principal; 401 for an HTTP request
    without one, on every route but the public ones. WebSockets authenticate in
    ``connection_init`` (``GraphQLView.on_ws_connect``).

    No request is free (``Budgets``): one whose user's budget is empty is answered
    429 before its body is read (the wait, as the GraphQL error RATE_LIMITED), and
    one whose operations took no points pays one after; one without a live token
    takes a point from its client address's budget, 429 past it instead of 401.
    """

    def __init__(self, app: ASGIApp, *, graphiql: bool, tokens: Tokens, budgets: Budgets) -> None:
        self.app = app
        self.graphiql = graphiql
        self.tokens = tokens
        self.budgets = budgets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _is_public(scope, self.graphiql):
            await self.app(scope, receive, send)
            return
        header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        principal = await self.tokens.principal(header)
        if principal is None:
            address = (scope.get("client") or ("unknown",))[0]
            wait = await _take(self.budgets.addresses, f"address:{address}")
            response: Response = (
                _too_many(wait)
                if wait > 0
                else refusal(
                    401,
                    "missing or invalid bearer token",
                    # The code GraphQL clients (Apollo's among them) know.
                    extensions={"code": "UNAUTHENTICATED"},
                    headers={"WWW-Authenticate": "Bearer"},
                )
            )
            await response(scope, receive, send)
            return
        logs.name_user(principal.user_id)
        users = self.budgets.users
        wait = await _take(users, principal.user_id, PEEK)
        if wait > 0:
            await _too_many(wait)(scope, receive, send)
            return
        spent = Spending()
        try:
            await self.app({**scope, "runstate.principal": principal, SPENT: spent}, receive, send)
        finally:
            if users is not None and spent.points == 0 and not spent.refused:
                await users.take(principal.user_id, 1, SPEND)


async def _take(limiter: RateLimiter | None, key: str, mode: str = TAKE) -> float:
    """One point from ``key``'s budget: 0, or the seconds until it could pay."""
    return 0.0 if limiter is None else await limiter.take(key, 1, mode)


def _too_many(wait: float) -> Response:
    """429: the budget is spent; the wait, as RateLimited says it, and Retry-After."""
    refused = RateLimitedError(wait)
    headers = {"Retry-After": str(math.ceil(refused.retry_after))}
    return refusal(429, refused.message, extensions=refused.extensions, headers=headers)


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


class _PastDeadlineError(Exception):
    """An answer ready only after the operation's time limit."""


async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    await refusal(413, f"request body is larger than {limit} bytes")(scope, receive, send)


class CancelOnDisconnect:
    """Stops a request's work when its client goes away, or after ``seconds``.

    uvicorn does not cancel an HTTP request whose client disconnected: the work
    ran on, for minutes, answering no one. Once the body has been read, this
    listens for ``http.disconnect`` and cancels the request. A request still
    running after ``seconds`` is cancelled too and answered 503, saying so; so is
    one whose answer is ready only after it: encoding a large answer runs without
    a pause where the timeout could cancel it, and such answers once went out 200
    after 32 s of a 30 s limit.
    """

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body_read = asyncio.Event()
        started = False
        deadline = asyncio.get_running_loop().time() + self.seconds

        async def reading() -> Message:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body"):
                body_read.set()
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            if not started and asyncio.get_running_loop().time() >= deadline:
                raise _PastDeadlineError
            started = True
            await send(message)

        async def respond() -> None:
            await self.app(scope, reading, sending)

        work = asyncio.create_task(respond())

        async def until_gone() -> None:
            await body_read.wait()
            while (await receive())["type"] != "http.disconnect":
                pass
            work.cancel()

        watcher = asyncio.create_task(until_gone())
        try:
            async with asyncio.timeout_at(deadline):
                await asyncio.shield(work)
        except (TimeoutError, _PastDeadlineError):
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, _PastDeadlineError):
                await work
            if not started:
                await refusal(503, stopped_after(self.seconds))(scope, receive, send)
        except asyncio.CancelledError:
            work.cancel()
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the server is stopping this request
            # else the client left, and ``until_gone`` stopped the work: nobody to answer
        finally:
            watcher.cancel()
