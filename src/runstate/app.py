"""The composition root: ``create_app(settings)`` wires every layer together."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute

from runstate.db import close_database, open_database
from runstate.http import BearerAuth, BodyLimit, GraphQLView
from runstate.schema.build import build_schema
from runstate.settings import Settings
from runstate.web import routes as web_routes


def create_app(settings: Settings) -> Starlette:
    """The ASGI app: GraphQL at /graphql, the web page at /, the database opened on start."""

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await open_database(settings.database_url)
        try:
            yield
        finally:
            await close_database()

    schema = build_schema(introspection=settings.graphiql)
    graphql = BodyLimit(BearerAuth(GraphQLView(schema, settings)), settings.max_body_bytes)
    return Starlette(
        routes=[
            Route("/", web_routes.index),
            Route("/healthz", web_routes.health),
            Route("/graphql", graphql),
            WebSocketRoute("/graphql", graphql),
        ],
        lifespan=lifespan,
    )
