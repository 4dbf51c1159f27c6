"""Auth is the default: ``BearerAuth`` wraps the whole app and lets through
without a token only the routes that carry no data (``PUBLIC_PATHS``, the static
files) and a plain GET of the GraphiQL page, decided on the decoded request."""

from __future__ import annotations

import math

from starlette.datastructures import Headers, QueryParams
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

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
from runstate.transport.admission import VOUCH
from runstate.transport.callers import Tokens
from runstate.transport.http_only import HttpOnly
from runstate.transport.refusals import refusal

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


async def _take(limiter: RateLimiter | None, key: str, mode: str = TAKE) -> float:
    """One point from ``key``'s budget: 0, or the seconds until it could pay."""
    return 0.0 if limiter is None else await limiter.take(key, 1, mode)


def _too_many(wait: float) -> Response:
    """429: the budget is spent; the wait, as RateLimited says it, and Retry-After."""
    refused = RateLimitedError(wait)
    headers = {"Retry-After": str(math.ceil(refused.retry_after))}
    return refusal(429, refused.message, extensions=refused.extensions, headers=headers)
