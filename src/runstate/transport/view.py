"""The GraphQL view: answers as the GraphQL-over-HTTP draft says (``media``): the
media type negotiated on ``Accept`` (406 when neither is acceptable), no ``data``
entry on a request error, every refusal as a JSON body, 405 with ``Allow``, 415 for
a body that is not JSON; the request's context built after authentication."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from cross_web import HTTPException
from graphql import OperationType
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.http import GraphQLRequestData
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.types import ExecutionResult

from runstate.resolvers.lean import Lean
from runstate.schema.context import Context
from runstate.schema.fanout import SharedEvents
from runstate.schema.turns import Turns
from runstate.services.actions.tokens import Principal
from runstate.services.domain.ratelimit import SPENT, Budgets, RateLimiter, Spending
from runstate.services.domain.validation import encoded
from runstate.services.write.house import House
from runstate.settings import Settings
from runstate.transport import media
from runstate.transport.auth import refuse_upgrade, upgrade_wait
from runstate.transport.body_limit import LARGE
from runstate.transport.callers import Tokens
from runstate.transport.connections import Connections
from runstate.transport.deadline import WRITING, Writing
from runstate.transport.operations import operation_type, uploads_only
from runstate.transport.refusals import refusal
from runstate.transport.strict_json import strict_json
from runstate.transport.trusted import NAMED, Trusted
from runstate.transport.websocket import TransportWS
from runstate.transport.wsmessages import Socket
from runstate.web.routes import GRAPHIQL

SUBSCRIPTIONS_OVER_HTTP = (
    "Subscriptions run over a WebSocket: connect to /graphql with graphql-transport-ws"
)


_MEDIA = "runstate.media"
"""Where the request's scope keeps the media type its answer takes."""


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
    websocket_adapter_class = Socket

    def __init__(
        self,
        schema: Any,
        settings: Settings,
        house: House,
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
        self.house = house
        self.shared = SharedEvents()
        """The subscription events rendered for this app's subscribers."""
        self.replays = Turns()
        """Each user's turn at reading a replay's page (``Context.replaying``)."""
        self.connections = connections
        self.tokens = tokens
        self.limiter = limiter
        self.budgets = Budgets()
        """The app's rate budgets (``create_app`` hands it the app's own): a WebSocket
        upgrade pays for itself from them (``auth.upgrade_wait``)."""
        self.epoch = ""
        """The database's timeline, read when the app starts (``database.current_epoch``)."""
        self.trusted = Trusted.packaged()
        """The documents a request may name by ``documentId`` (``transport.trusted``)."""
        self.lean = Lean(schema, self.trusted.bodies.values() if settings.lean else ())
        """The trusted writes compiled for the lean path (``resolvers.lean``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An HTTP request answered in the media type it accepts, its refusals as JSON
        (Strawberry's own are plain text); a WebSocket upgrade refused (429) once its
        address's, or its token's user's, budget cannot pay for it, as a request
        without a token is (``BearerAuth`` sees no WebSocket)."""
        if scope["type"] == "websocket":
            wait = await upgrade_wait(scope, self.tokens, self.budgets)
            if wait > 0:
                await refuse_upgrade(scope, receive, send, wait)
                return
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
            except ClientDisconnect:
                # The client left before its body was all sent (or it was cut off,
                # ``transport.admission``): nobody to answer, nothing to log but the
                # request's line (499). Raised on, it logged a traceback a request.
                return
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
            house=self.house,
            shared=self.shared,
            limiter=self.limiter,
            epoch=self.epoch,
            spent=request.scope.get(SPENT) or Spending(),
            replays=self.replays,
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
        kind = operation_type(
            request_data.query, request_data.operation_name, self.settings.max_tokens
        )
        if kind is OperationType.SUBSCRIPTION:
            raise HTTPException(400, SUBSCRIPTIONS_OVER_HTTP)
        writing = request.scope.get(WRITING)
        if kind is OperationType.MUTATION and isinstance(writing, Writing):
            writing.write = True  # finished or rolled back, never stopped half-way
        if request.scope.get(LARGE) and not uploads_only(
            request_data.query, request_data.operation_name, self.settings.max_tokens
        ):
            raise HTTPException(
                413,
                f"request body is larger than {self.settings.max_body_bytes} bytes:"
                " only putGraphCheckpoint and putGraphWrites may send more",
            )
        named = (request_data.extensions or {}).get(NAMED)
        lean = self.lean.get(request_data.query, request_data.operation_name) if named else None
        if lean is not None and request.method == "POST":
            return await self.lean.execute(lean, context, request_data.variables)
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
            shared = self.shared.next_message(data)
            if shared is not None:
                return shared
        return encoded(data)

    def parse_json(self, data: str | bytes) -> Any:
        """A request body: anything ``strict_json`` refuses is a 400, and so is JSON
        that is not an object (``null``, ``42``, ``"x"``): a GraphQL request is an
        object. A trusted document named by ``documentId`` is read as if sent as
        ``query`` (``transport.trusted``)."""
        try:
            parsed = strict_json(data)
        except ValueError as e:
            raise HTTPException(400, str(e)) from e
        if not isinstance(parsed, dict | list):  # a list is a batch: Strawberry refuses it
            raise HTTPException(400, "The request body must be a JSON object")
        return self.trusted.request(parsed) if isinstance(parsed, dict) else parsed

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
