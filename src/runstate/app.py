"""The composition root: ``create_app(settings)`` wires every layer together."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from runstate.observe import logs
from runstate.pubsub import Broker, Hub, MemoryBroker, Publisher
from runstate.pubsub.redis import RedisBroker, key_prefix
from runstate.resolvers.build import build_schema
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
    logs.configure(settings.log_format)
    return create_app(settings)


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


def create_app(settings: Settings) -> Starlette:
    """The ASGI app: GraphQL at /graphql (HTTP and WebSocket), AG-UI runs at
    /agui/tasks/{taskId}, the web page at /.

    It builds the app's ``House`` (its limits, group commit, live streams' head
    checks) and its schema; nothing of it is shared with another app in the same
    process. On start it migrates and opens the database, then the broker (Redis
    when ``redis_url`` is set, in-process otherwise) and the publisher in front of
    it, handed to the house, and starts the expiry sweep and the token check of
    open connections.
    """
    database = Database(settings.database_url)
    house = House(limits=settings.content)
    house.relay.flush = uncork_all  # the frames of a relay's pass go out together
    connections = Connections(settings.max_connections)
    house.metrics.websockets.set_function(lambda: len(connections))
    tokens = Tokens(settings.auth_check_seconds)
    graphql = GraphQLView(
        build_schema(settings, metrics=house.metrics), settings, house, connections, tokens
    )
    budgets = Budgets()
    admission = Admission(
        per_address=settings.max_connections_per_address,
        header_seconds=settings.header_seconds,
        body_seconds=settings.body_seconds,
        trusted=Trusted(settings.trusted_proxies),
    )

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[dict[str, Any]]:
        with database.current():  # the app's connections; the tasks started here inherit it
            async with _serving() as state:
                yield state

    @asynccontextmanager
    async def _serving() -> AsyncIterator[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        handler = loop.get_exception_handler()
        loop.set_exception_handler(admission.handle_exception)
        installation = await database.open()
        graphql.epoch = await current_epoch()
        broker: Broker
        if settings.redis_url:
            broker = RedisBroker(
                settings.redis_url,
                key_prefix(installation),
                settings.subscriber_queue,
                settings.subscriber_queue_bytes,
            )
        else:
            broker = MemoryBroker(settings.subscriber_queue, settings.subscriber_queue_bytes)
        publisher = Publisher(broker)
        if settings.rate_limit:
            budgets.users = _limiter(settings, key_prefix(installation), False)
            budgets.addresses = _limiter(settings, key_prefix(installation) + "anon:", True)
        graphql.limiter = budgets.users
        if settings.redis_url:
            connections.shared = SharedSockets(
                settings.redis_url, key_prefix(installation), settings.max_connections
            )
        await broker.start()
        await publisher.start()
        house.hub = Hub(broker, publisher)
        background = [
            asyncio.create_task(
                sweep_forever(settings.retention, settings.sweep_seconds, house.metrics),
                name="runstate-sweeper",
            ),
            asyncio.create_task(
                connections.watch(settings.auth_check_seconds), name="runstate-token-check"
            ),
            asyncio.create_task(keep_time(), name="runstate-clock"),
            asyncio.create_task(
                forget_revoked(broker, tokens, connections), name="runstate-revocations"
            ),
        ]
        if connections.shared is not None:
            background.append(
                asyncio.create_task(connections.keep_claims(), name="runstate-socket-claims")
            )
        try:
            yield {ADMISSION: admission}  # uvicorn's protocols find it in the app's state
        finally:
            loop.set_exception_handler(handler)
            admission.close()
            for task in background:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            house.hub = None
            await publisher.close()
            await broker.close()
            await budgets.close()
            if connections.shared is not None:
                await connections.shared.close()
            await database.close()

    middleware = [
        Middleware(CancelOnDisconnect, seconds=settings.operation_seconds),
        Middleware(
            BodyLimit,
            limit=settings.max_body_bytes,
            upload=upload_limit(settings.max_body_bytes, settings.content.checkpoint_bytes),
        ),
        Middleware(BearerAuth, graphiql=settings.graphiql, tokens=tokens, budgets=budgets),
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
    middleware.insert(0, Middleware(InDatabase, database=database))
    app = Starlette(
        routes=[
            Route("/", web_routes.index(settings.graphiql)),
            Route("/healthz", web_routes.health),
            Route("/readyz", web_routes.ready(house)),
            Route("/metrics", web_routes.metrics(settings.metrics_token, house.metrics)),
            Mount("/static", StaticFiles(packages=[("runstate.web", "static")]), name="static"),
            Route("/graphql", graphql),
            Route(
                "/agui/tasks/{task_id}",
                AguiRuns(house, settings, connections, graphql, admission.stopping),
            ),
            WebSocketRoute("/graphql", graphql),
        ],
        middleware=middleware,
        lifespan=lifespan,
    )
    app.state.house = house  # the app's services, for a test that calls them directly
    app.state.database = database  # and the context they run in
    app.state.shared = graphql.shared
    return app
