"""Auth is the default: ``BearerAuth`` wraps the whole app and lets through
without a token only the routes that carry no data (``PUBLIC_PATHS``, the static
files) and a plain GET of the GraphiQL page, decided on the decoded request. A
WebSocket upgrade pays for itself as such a request does (``upgrade_wait``)."""

from __future__ import annotations

import math

from starlette.datastructures import Headers, QueryParams
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from runstate.observe import logs
from runstate.services.domain.errors import RateLimitedError
from runstate.services.domain.ratelimit import (
    PEEK,
    SPEND,
    SPENT,
    TAKE,
    WRITE_COST,
    Budgets,
    RateLimiter,
    Spending,
)
from runstate.transport.admission import ADMISSION, VOUCH, Admission
from runstate.transport.callers import Tokens
from runstate.transport.http_only import HttpOnly
from runstate.transport.refusals import refusal

UPGRADES_REFUSED = "WebSocket upgrades over their rate budget"
"""How the admission's summary names the upgrades ``refuse_upgrade`` answered."""

PUBLIC_PATHS = frozenset({"/", "/healthz", "/readyz", "/metrics"})
"""Routes that answer without a user's token: they hold no one's data, or (``/metrics``)
check a token of their own."""


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


class BearerAuth(HttpOnly):
    """Resolves ``Authorization: Bearer`` to a Principal; 401 for an HTTP request
    without one, on every route but the public ones. WebSockets authenticate in
    ``connection_init`` (``GraphQLView.on_ws_connect``).

    No request is free (``Budgets``): one whose user's budget is empty is answered
    429 before its body is read (the wait until a write could pay, as the GraphQL
    error RATE_LIMITED), and one whose operations took no points pays one after;
    one without a live token takes a point from its client address's budget, 429
    past it instead of 401. A live token vouches for its connection (``VOUCH``): it
    no longer counts against its client address (``transport.admission``).
    """

    def __init__(self, app: ASGIApp, *, graphiql: bool, tokens: Tokens, budgets: Budgets) -> None:
        self.app = app
        self.graphiql = graphiql
        self.tokens = tokens
        self.budgets = budgets

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if _is_public(scope, self.graphiql):
            await self.app(scope, receive, send)
            return
        principal = await self.tokens.principal(_authorization(scope))
        if principal is None:
            wait = await _take(self.budgets.addresses, _address(scope))
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
        vouch = (scope.get("extensions") or {}).get(VOUCH)
        if vouch is not None:
            vouch()
        users = self.budgets.users
        if users is not None and await users.take(principal.user_id, 1, PEEK) > 0:
            # The wait told is until a write could pay (it costs WRITE_COST): told the
            # wait for one point, a write retried after it was refused again.
            wait = await users.take(principal.user_id, WRITE_COST, PEEK)
            await _too_many(wait)(scope, receive, send)
            return
        spent = Spending()
        try:
            await self.app({**scope, "runstate.principal": principal, SPENT: spent}, receive, send)
        finally:
            if users is not None and spent.points == 0 and not spent.refused:
                await users.take(principal.user_id, 1, SPEND)


async def upgrade_wait(scope: Scope, tokens: Tokens, budgets: Budgets) -> float:
    """What a WebSocket upgrade pays before it is accepted, as an HTTP request pays:
    a point from its client address's budget, or, when its ``Authorization``
    header names a live token, from its user's. 0 when paid; else the seconds
    until it could be. Its ``connection_init`` (the token graphql-transport-ws
    clients send) comes after the upgrade, so that opening and closing sockets
    without one is paced as anonymous requests are: one client opened and
    closed 1,211 a second, each a few lines of log."""
    principal = await tokens.principal(_authorization(scope))
    if principal is None:
        return await _take(budgets.addresses, _address(scope))
    return await _take(budgets.users, principal.user_id)


async def refuse_upgrade(scope: Scope, receive: Receive, send: Send, wait: float) -> None:
    """Answer an upgrade the budget cannot pay for as an HTTP request is answered:
    429 with Retry-After and the RATE_LIMITED error, when the server can answer an
    upgrade with a response; else closed before it is accepted (an HTTP 403).
    Counted into the admission's summary of refusals (``Admission.refused``), a
    line every few seconds, not one per upgrade."""
    admission = scope.get("state", {}).get(ADMISSION)
    if isinstance(admission, Admission):
        admission.refused(UPGRADES_REFUSED)
    socket = WebSocket(scope, receive, send)
    if "websocket.http.response" in scope.get("extensions", {}):
        await socket.send_denial_response(_too_many(wait))
    else:
        await socket.close()


def _authorization(scope: Scope) -> str:
    header: bytes = dict(scope["headers"]).get(b"authorization", b"")
    return header.decode("latin-1")


def _address(scope: Scope) -> str:
    """The key of the budget of the request's client address."""
    return f"address:{(scope.get('client') or ('unknown',))[0]}"


async def _take(limiter: RateLimiter | None, key: str, mode: str = TAKE) -> float:
    """One point from ``key``'s budget: 0, or the seconds until it could pay."""
    return 0.0 if limiter is None else await limiter.take(key, 1, mode)


def _too_many(wait: float) -> Response:
    """429: the budget is spent; the wait, as RateLimited says it, and Retry-After."""
    refused = RateLimitedError(wait)
    headers = {"Retry-After": str(math.ceil(refused.retry_after))}
    return refusal(429, refused.message, extensions=refused.extensions, headers=headers)
