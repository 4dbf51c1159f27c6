"""Routes of the web page: the start page, liveness, readiness and metrics."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from importlib.resources import files

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from tortoise import Tortoise

from runstate.observe.metrics import Metrics
from runstate.services.write.house import House

_INDEX = files("runstate.web").joinpath("index.html").read_text(encoding="utf-8")
_WITHOUT_GRAPHIQL = _INDEX.replace('<body data-graphiql="on">', '<body data-graphiql="off">')
GRAPHIQL = files("runstate.web").joinpath("graphiql.html").read_text(encoding="utf-8")
"""GraphiQL at ``GET /graphql`` (``transport.view.GraphQLView``), on files in ``static/vendor``."""


def index(graphiql: bool) -> Callable[[Request], Awaitable[Response]]:
    """The dashboard: the caller's tasks, one followed live (HTML, CSS and JS in
    ``runstate/web``, no build step). Without GraphiQL (``RUNSTATE_GRAPHIQL``) the
    page says so, and shows no link to it."""
    page = _INDEX if graphiql else _WITHOUT_GRAPHIQL

    async def dashboard(_: Request) -> Response:
        return HTMLResponse(page)

    return dashboard


async def health(_: Request) -> Response:
    """Liveness for scripts and tests: answers once the database is open."""
    return PlainTextResponse("ok")


def metrics(token: str | None, app: Metrics) -> Callable[[Request], Awaitable[Response]]:
    """The app's metrics (``app``) in Prometheus's text format (``observe.metrics``),
    for ``RUNSTATE_METRICS_TOKEN`` alone: they are the whole server's figures, and
    any user's token once answered them. Without that setting /metrics is off (404,
    saying how to turn it on)."""
    expected = None if token is None else f"Bearer {token}".encode()

    async def answer(request: Request) -> Response:
        if expected is None:
            return PlainTextResponse("metrics are off: set RUNSTATE_METRICS_TOKEN", 404)
        given = request.headers.get("authorization", "").encode("latin-1")
        if not hmac.compare_digest(given, expected):
            return PlainTextResponse(
                "/metrics needs RUNSTATE_METRICS_TOKEN as its bearer token",
                401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return Response(generate_latest(app.registry), media_type=CONTENT_TYPE_LATEST)

    return answer


def ready(house: House) -> Callable[[Request], Awaitable[Response]]:
    """Readiness for load balancers: 200 when the database and the house's broker
    both answer now, 503 naming what does not."""

    async def answer(_: Request) -> Response:
        checks = {"database": await _database_answers(), "broker": await _broker_answers(house)}
        status = 200 if all(checks.values()) else 503
        return JSONResponse({k: "ok" if v else "unavailable" for k, v in checks.items()}, status)

    return answer


async def _database_answers() -> bool:
    try:
        await Tortoise.get_connection("default").execute_query("SELECT 1")
    except Exception:  # any failure means not ready; the reason is in the database's log
        return False
    return True


async def _broker_answers(house: House) -> bool:
    return house.hub is not None and await house.hub.broker.ready()
