"""Concurrent writers: compare-and-swap loses no update; read-then-write does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runstate.db import close_database, open_database
from runstate.models import Session
from runstate.services import sessions
from tests.integration.test_api import start_session
from tests.support import Api, Server

WRITERS = 20
INCREMENTS = 10

UPDATE = """
mutation($input: UpdateSessionInput!) {
  updateSession(input: $input) {
    __typename
    ... on AgentSession { version }
    ... on VersionConflict { currentVersion }
  }
}"""


async def cas_increments(client: httpx.AsyncClient, session_id: str, times: int) -> int:
    """Add 1 to messageCount ``times`` times, retrying each on VersionConflict."""
    version = 1
    conflicts = 0
    for _ in range(times):
        while True:
            input = {"id": session_id, "expectedVersion": version, "messageCountDelta": 1}
            response = await client.post(
                "/graphql", json={"query": UPDATE, "variables": {"input": input}}
            )
            assert response.status_code == 200, response.text
            result: dict[str, Any] = response.json()["data"]["updateSession"]
            if result["__typename"] == "AgentSession":
                version = result["version"]
                break
            assert result["__typename"] == "VersionConflict", result
            version = result["currentVersion"]
            conflicts += 1
    return conflicts


async def test_concurrent_cas_increments_lose_nothing(server: Server, alice: Api) -> None:
    session = start_session(alice)
    headers = dict(alice.http.headers)
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as client:
        conflicts = await asyncio.gather(
            *(cas_increments(client, session["id"], INCREMENTS) for _ in range(WRITERS))
        )
    final = alice(
        "query($id: ID!) { session(id: $id) { ... on AgentSession { version messageCount } } }",
        id=session["id"],
    )["session"]
    assert final == {"version": WRITERS * INCREMENTS + 1, "messageCount": WRITERS * INCREMENTS}
    assert sum(conflicts) > 0, "the writers never raced, so the test proved nothing"


@pytest.fixture
async def local_db(tmp_path: Path) -> AsyncIterator[None]:
    await open_database(f"sqlite://{tmp_path / 'local.db'}")
    yield
    await close_database()


async def _race(increment: Any) -> int:
    await sessions.start_session("u", default_ttl=3600, session_id="race")
    await asyncio.gather(*(increment() for _ in range(WRITERS)))
    row = await Session.get(user_id="u", public_id="race")
    return row.message_count


async def test_control_read_then_write_loses_updates(local_db: None) -> None:
    """Control: the naive version of the same writers loses most increments."""

    async def naive() -> None:
        for _ in range(INCREMENTS):
            row = await Session.get(user_id="u", public_id="race")
            row.message_count += 1
            await row.save(update_fields=["message_count"])

    assert await _race(naive) < WRITERS * INCREMENTS


async def test_same_harness_with_cas_loses_nothing(local_db: None) -> None:
    """The harness of the control, with the service's compare-and-swap instead."""

    async def cas() -> None:
        from runstate.services.errors import VersionConflictError

        version = 1
        for _ in range(INCREMENTS):
            while True:
                try:
                    view = await sessions.update_session(
                        "u", "race", expected_version=version, message_count_delta=1
                    )
                    version = view.version
                    break
                except VersionConflictError as conflict:
                    version = conflict.current_version

    assert await _race(cas) == WRITERS * INCREMENTS
