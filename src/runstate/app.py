"""The composition root: ``create_app(settings)`` wires every layer together."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from runstate.observe import logs
from runstate.pubsub import Broker, Hub, MemoryBroker, Publisher
from runstate.pubsub.redis import RedisBroker, key_prefix
from runstate.resolvers.build import build_schema
from runstate.services.actions import schedules
from runstate.services.domain.ratelimit import (
    Budgets,
    MemoryRateLimiter,
    RateLimiter,
    RedisRateLimiter,
)
from runstate.services.lifecycle.sweep import sweep_forever
from runstate.services.write.house import House
from runstate.settings import Settings
from runstate.storage.clock import keep_time
from runstate.storage.database import Database, current_epoch
from runstate.transport.admission import ADMISSION, Admission, Trusted
from runstate.transport.agui.endpoint import AguiRuns
from runstate.transport.auth import BearerAuth
from runstate.transport.body_limit import BodyLimit, upload_limit
from runstate.transport.callers import Tokens, forget_revoked
from runstate.transport.connections import Connections
from runstate.transport.deadline import CancelOnDisconnect
from runstate.transport.httpprotocol import HttpProtocol
from runstate.transport.in_database import InDatabase
from runstate.transport.request_log import RequestLog
from runstate.transport.sockets import SharedSockets
from runstate.transport.view import GraphQLView
from runstate.transport.wsprotocol import WebSocketProtocol, uncork_all
from runstate.web import routes as web_routes


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for serving the app, the same under ``serve`` and ``demo``."""
    return {
        # uvicorn closes an idle connection after 5 s, as long as httpx keeps one for
        # reuse: a request sent just then was lost to a reset (settings.py).
        "timeout_keep_alive": settings.keep_alive_seconds,
        "ws_max_size": settings.max_ws_message_bytes,  # uvicorn default: 16 MiB a message
        # Events are small deltas: compressing each one for each watcher cost 6% of
        # a server's time with 100 watchers (py-spy), and memory per socket.
        "ws_per_message_deflate": False,
        # uvicorn's protocol, keeping less of each open WebSocket (transport.wsprotocol).
        "ws": WebSocketProtocol,
        # On SIGTERM, requests still running after this many seconds are cancelled,
        # so the server stops within a few seconds whatever it is doing.
        "timeout_graceful_shutdown": 3,
        # uvicorn's httptools protocol with the app's admission: a cap per address,
        # deadlines for headers and bodies (transport.admission).
        "http": HttpProtocol,
        # uvicorn believes X-Forwarded-For from 127.0.0.1 by default: anyone on the
        # machine could pose as any address (4,877 bad-token requests answered where
        # the anonymous budget allows 48). Only the proxies named are believed.
        "proxy_headers": bool(settings.trusted_proxies),
        "forwarded_allow_ips": list(settings.trusted_proxies),
    }


def from_environment() -> Starlette:
    """The app of one of ``runstate serve --workers N``'s processes: its settings
    from the environment, where the command line's overrides were put."""
    settings = Settings.from_env()
    configure_logging(settings)
    return create_app(settings)


def configure_logging(settings: Settings) -> None:
    """The process's log as the settings say: its format and level, and uvicorn's
    line per WebSocket upgrade only while the request log writes every line."""
    logs.configure(settings.log_format, settings.log_level, upgrades=settings.request_log == 1)


def _limiter(settings: Settings, prefix: str, anonymous: bool) -> RateLimiter:
    """A rate limiter with the users' rates, or the anonymous addresses' ones; in
    Redis, shared by every process, when it is set."""
    rate, burst = (
        (settings.anon_rate_per_second, settings.anon_rate_burst)
        if anonymous
        else (settings.rate_per_second, settings.rate_burst)
    )
    if settings.redis_url:
        return RedisRateLimiter(settings.redis_url, prefix, rate, burst)
    return MemoryRateLimiter(rate, burst)


@dataclass(frozen=True)
class _Parts:
    """What one app is made of, built before it serves (``_parts``); its lifespan
    opens and closes what needs the running loop, its routes and middlewares are
    built on the same parts."""

    settings: Settings
    database: Database
    house: House
    connections: Connections
    tokens: Tokens
    graphql: GraphQLView
    budgets: Budgets
    admission: Admission


def _parts(settings: Settings) -> _Parts:
    """The app's own database, house (its limits, group commit, live streams' head
    checks, metrics), open connections, token check, GraphQL view on a schema of
    its own, rate budgets and admission: nothing shared with another app."""
    database = Database(settings.database_url)
    house = House(limits=settings.content, currency=settings.currency)
    house.relay.flush = uncork_all  # the frames of a relay's pass go out together
    connections = Connections(settings.max_connections)
    house.metrics.websockets.set_function(lambda: len(connections))
    tokens = Tokens(settings.auth_check_seconds)
    graphql = GraphQLView(
        build_schema(settings, metrics=house.metrics), settings, house, connections, tokens
    )
    budgets = Budgets()
    graphql.budgets = budgets  # a WebSocket upgrade pays from them (``auth.upgrade_wait``)
    admission = Admission(
        per_address=settings.max_connections_per_address,
        header_seconds=settings.header_seconds,
        body_seconds=settings.body_seconds,
        trusted=Trusted(settings.trusted_proxies),
    )
    return _Parts(settings, database, house, connections, tokens, graphql, budgets, admission)


def _broker(settings: Settings, installation: str) -> Broker:
    """Redis when ``redis_url`` is set (its channels under the installation's
    prefix), else in-process; inboxes bounded as the settings say."""
    if settings.redis_url:
        return RedisBroker(
            settings.redis_url,
            key_prefix(installation),
            settings.subscriber_queue,
            settings.subscriber_queue_bytes,
        )
    return MemoryBroker(settings.subscriber_queue, settings.subscriber_queue_bytes)


def _share_limits(parts: _Parts, installation: str) -> None:
    """The rate limiters of users and anonymous addresses (when rate limits are
    on), handed to the view too, and with Redis the per-user WebSocket cap claimed
    across processes: each under the installation's prefix."""
    settings = parts.settings
    if settings.rate_limit:
        parts.budgets.users = _limiter(settings, key_prefix(installation), False)
        parts.budgets.addresses = _limiter(settings, key_prefix(installation) + "anon:", True)
    parts.graphql.limiter = parts.budgets.users
    if settings.redis_url:
        parts.connections.shared = SharedSockets(
            settings.redis_url,
            key_prefix(installation),
            settings.max_connections,
            settings.socket_lease_seconds,
        )


def _background(parts: _Parts, broker: Broker) -> list[asyncio.Task[None]]:
    """The app's tasks while it serves: the expiry sweep, the token check of open
    connections, the clock, the schedules' fires, revocations heard through the
    broker, and with a shared socket cap the renewal of its claims."""
    settings, connections = parts.settings, parts.connections
    background = [
        asyncio.create_task(
            sweep_forever(settings.retention, settings.sweep_seconds, parts.house.metrics),
            name="runstate-sweeper",
        ),
        asyncio.create_task(
            connections.watch(settings.auth_check_seconds), name="runstate-token-check"
        ),
        asyncio.create_task(keep_time(), name="runstate-clock"),
        asyncio.create_task(
            schedules.fire_forever(parts.house, settings.schedule_grace_seconds),
            name="runstate-schedules",
        ),
        asyncio.create_task(
            forget_revoked(broker, parts.tokens, connections), name="runstate-revocations"
        ),
    ]
    if connections.shared is not None:
        background.append(
            asyncio.create_task(connections.keep_claims(), name="runstate-socket-claims")
        )
    return background


async def _stopped(background: list[asyncio.Task[None]]) -> None:
    """Each background task cancelled and awaited, in turn."""
    for task in background:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _closed(parts: _Parts, publisher: Publisher, broker: Broker) -> None:
    """What the lifespan opened, closed: the publisher before its broker, the rate
    limiters, the shared socket cap, the database last."""
    await publisher.close()
    await broker.close()
    await parts.budgets.close()
    if parts.connections.shared is not None:
        await parts.connections.shared.close()
    await parts.database.close()


@asynccontextmanager
async def _serving(parts: _Parts) -> AsyncIterator[dict[str, Any]]:
    """The app while it serves: the database migrated and opened, the broker and
    its publisher started and handed to the house, the limits shared, the
    background tasks running; all of it undone in turn at the end. Yields the
    lifespan's state, where uvicorn's protocols find the admission."""
    loop = asyncio.get_running_loop()
    handler = loop.get_exception_handler()
    loop.set_exception_handler(parts.admission.handle_exception)
    installation = await parts.database.open()
    parts.graphql.epoch = await current_epoch()
    broker = _broker(parts.settings, installation)
    publisher = Publisher(broker)
    _share_limits(parts, installation)
    await broker.start()
    await publisher.start()
    parts.house.hub = Hub(broker, publisher)
    background = _background(parts, broker)
    try:
        yield {ADMISSION: parts.admission}  # uvicorn's protocols find it in the app's state
    finally:
        loop.set_exception_handler(handler)
        parts.admission.close()
        await _stopped(background)
        parts.house.hub = None
        await _closed(parts, publisher, broker)


def _lifespan(parts: _Parts) -> Callable[[Starlette], AbstractAsyncContextManager[Any]]:
    """The app's lifespan: ``_serving`` inside the app's database context, which
    the tasks it starts inherit."""

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[dict[str, Any]]:
        with parts.database.current():  # the app's connections; the tasks started here inherit it
            async with _serving(parts) as state:
                yield state

    return lifespan


def _middleware(parts: _Parts) -> list[Middleware]:
    """Outermost first: the app's database context, the request log, CORS when
    origins are allowed, then the time limit, the body limit and the bearer check."""
    settings = parts.settings
    middleware = [
        Middleware(CancelOnDisconnect, seconds=settings.operation_seconds),
        Middleware(
            BodyLimit,
            limit=settings.max_body_bytes,
            upload=upload_limit(settings.max_body_bytes, settings.content.checkpoint_bytes),
        ),
        Middleware(
            BearerAuth, graphiql=settings.graphiql, tokens=parts.tokens, budgets=parts.budgets
        ),
    ]
    if settings.allowed_origins:
        middleware.insert(
            0,
            Middleware(
                CORSMiddleware,
                allow_origins=settings.allowed_origins,
                allow_methods=["GET", "POST"],
                # Last-Event-ID and Accept: an AG-UI stream's reconnect (docs/agui.md).
                allow_headers=[
                    "Authorization",
                    "Content-Type",
                    "X-Request-ID",
                    "Last-Event-ID",
                    "Accept",
                ],
                max_age=600,
            ),
        )
    middleware.insert(0, Middleware(RequestLog, every=settings.request_log))  # sees every answer
    # Outermost: everything below runs in the app's own database context.
    middleware.insert(0, Middleware(InDatabase, database=parts.database))
    return middleware


def _routes(parts: _Parts) -> list[BaseRoute]:
    """The web page, health, readiness and metrics, the static files, GraphQL over
    HTTP and WebSocket, and AG-UI runs."""
    settings, house, graphql = parts.settings, parts.house, parts.graphql
    return [
        Route("/", web_routes.index(settings.graphiql)),
        Route("/healthz", web_routes.health),
        Route("/readyz", web_routes.ready(house)),
        Route("/metrics", web_routes.metrics(settings.metrics_token, house.metrics)),
        Mount("/static", StaticFiles(packages=[("runstate.web", "static")]), name="static"),
        Route("/graphql", graphql),
        Route(
            "/agui/tasks/{task_id}",
            AguiRuns(house, settings, parts.connections, graphql, parts.admission.stopping),
        ),
        WebSocketRoute("/graphql", graphql),
    ]


def create_app(settings: Settings) -> Starlette:
    """The ASGI app: GraphQL at /graphql (HTTP and WebSocket), AG-UI runs at
    /agui/tasks/{taskId}, the web page at /.

    It builds the app's ``House`` (its limits, group commit, live streams' head
    checks) and its schema; nothing of it is shared with another app in the same
    process (``_parts``). On start it migrates and opens the database, then the
    broker (Redis when ``redis_url`` is set, in-process otherwise) and the
    publisher in front of it, handed to the house, and starts the expiry sweep and
    the token check of open connections (``_serving``).
    """
    parts = _parts(settings)
    app = Starlette(
        routes=_routes(parts),
        middleware=_middleware(parts),
        lifespan=_lifespan(parts),
    )
    app.state.house = parts.house  # the app's services, for a test that calls them directly
    app.state.database = parts.database  # and the context they run in
    app.state.shared = parts.graphql.shared
    return app
