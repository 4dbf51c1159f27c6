"""Fixtures: servers on SQLite and PostgreSQL, and callers with their own tokens."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import Api, Server, create_token, server_on


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A running server on a fresh database of each backend."""
    with server_on(request.param, tmp_path_factory, "server") as srv:
        yield srv


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, str]]:
    """A server on a fresh database of each backend for LangGraph savers, with rate
    limits off (the conformance suite alone sends thousands of writes), and a token."""
    env = {"RUNSTATE_RATE_LIMIT": "false"}
    with server_on(request.param, tmp_path_factory, "langgraph", **env) as srv:
        yield srv, create_token(srv.database_url, "graph-builder")


@pytest.fixture(scope="module")
def alice(server: Server) -> Iterator[Api]:
    api = Api(server.url, create_token(server.database_url, "alice"))
    yield api
    api.close()


@pytest.fixture(scope="module")
def bob(server: Server) -> Iterator[Api]:
    api = Api(server.url, create_token(server.database_url, "bob"))
    yield api
    api.close()
