"""Concurrent writers: compare-and-swap loses no update; read-then-write does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runstate.models import Session, Task, ToolState
from runstate.services.actions import sessions
from runstate.services.write.house import House
from tests.integration.test_api import events, new_task, start_session
from tests.support import Api, Server, opened, server_on

WRITERS = 20
INCREMENTS = 10


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The shared server of conftest.py, without the per-user rate limit: one user
    races hundreds of writes here (each retried conflict costs again), and what is
    under test is compare-and-swap, not the budget (tests/integration/test_ratelimit.py)."""
    with server_on(
        request.param, tmp_path_factory, "concurrency", RUNSTATE_RATE_LIMIT="false"
    ) as srv:
        yield srv


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
async def house(tmp_path: Path) -> AsyncIterator[House]:
    async with opened(f"sqlite://{tmp_path / 'local.db'}") as house:
        yield house


async def _race(house: House, increment: Any) -> int:
    await sessions.start_session(house, "u", default_ttl=3600, session_id="race")
    await asyncio.gather(*(increment() for _ in range(WRITERS)))
    row = await Session.get(user_id="u", public_id="race")
    return row.message_count


async def test_control_read_then_write_loses_updates(house: House) -> None:
    """Control: the naive version of the same writers loses most increments."""

    async def naive() -> None:
        for _ in range(INCREMENTS):
            row = await Session.get(user_id="u", public_id="race")
            row.message_count += 1
            await row.save(update_fields=["message_count"])

    assert await _race(house, naive) < WRITERS * INCREMENTS


async def test_same_harness_with_cas_loses_nothing(house: House) -> None:
    """The harness of the control, with the service's compare-and-swap instead."""

    async def cas() -> None:
        from runstate.services.domain.errors import VersionConflictError

        version = 1
        for _ in range(INCREMENTS):
            while True:
                try:
                    view = await sessions.update_session(
                        house, "u", "race", expected_version=version, message_count_delta=1
                    )
                    version = view.version
                    break
                except VersionConflictError as conflict:
                    version = conflict.current_version

    assert await _race(house, cas) == WRITERS * INCREMENTS


# ---------------------------------------------------------------- leases and tool counters

ACQUIRERS = 50
REPORTERS = 20

ACQUIRE = """
mutation($input: AcquireTaskLockInput!) {
  acquireTaskLock(input: $input) { __typename ... on TaskLock { holderId fencingToken } }
}"""

FAILURE = """
mutation($input: RecordToolCallInput!) {
  recordToolCall(input: $input) { __typename ... on ToolState { retryCount } }
}"""


async def _race_requests(server: Server, alice: Api, query: str, inputs: list[Any]) -> list[Any]:
    headers = dict(alice.http.headers)
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as client:
        responses = await asyncio.gather(
            *(
                client.post("/graphql", json={"query": query, "variables": {"input": i}})
                for i in inputs
            )
        )
    return [next(iter(r.json()["data"].values())) for r in responses]


async def test_fifty_concurrent_acquirers_get_exactly_one_lease(server: Server, alice: Api) -> None:
    task = new_task(alice)
    inputs = [
        {"taskId": task["id"], "holderId": f"w{i}", "ttlSeconds": 60} for i in range(ACQUIRERS)
    ]
    results = await _race_requests(server, alice, ACQUIRE, inputs)
    granted = [r for r in results if r["__typename"] == "TaskLock"]
    assert len(granted) == 1
    assert granted[0]["fencingToken"] == 1
    assert sorted(r["__typename"] for r in results) == ["LockHeld"] * (ACQUIRERS - 1) + ["TaskLock"]
    assert [e["kind"] for e in events(alice, task["id"])] == ["TASK_CREATED", "LOCK_ACQUIRED"]


async def test_concurrent_failure_reports_lose_no_count(server: Server, alice: Api) -> None:
    task = new_task(alice)
    inputs = [
        {"taskId": task["id"], "toolName": "search", "outcome": "FAILURE", "error": f"e{i}"}
        for i in range(REPORTERS)
    ]
    results = await _race_requests(server, alice, FAILURE, inputs)
    assert {r["__typename"] for r in results} == {"ToolState"}
    final = alice(
        "query($id: ID!) { task(id: $id) { ... on Task {"
        " toolStates { retryCount version status } } } }",
        id=task["id"],
    )["task"]["toolStates"]
    assert final == [{"retryCount": REPORTERS, "version": REPORTERS, "status": "FAILED"}]


async def test_control_check_then_set_grants_many_leases(house: House) -> None:
    """Control: reading the lease and then writing it lets several acquirers win."""
    from runstate.services.actions import tasks

    await sessions.start_session(house, "u", default_ttl=3600, session_id="s")
    await tasks.create_task(house, "u", "s", goal="g", steps=[], task_id="t")
    winners: list[str] = []

    async def naive(holder: str) -> None:
        row = await Task.get(user_id="u", public_id="t")
        if row.lock_holder is None:
            row.lock_holder = holder
            row.lock_token += 1
            await row.save(update_fields=["lock_holder", "lock_token"])
            winners.append(holder)

    await asyncio.gather(*(naive(f"w{i}") for i in range(ACQUIRERS)))
    assert len(winners) > 1


async def test_control_read_then_write_loses_failure_counts(house: House) -> None:
    """Control: counting retries in Python after a read loses reports."""
    from runstate.basics.enums import ToolOutcome
    from runstate.services.actions import tasks, tools

    await sessions.start_session(house, "u", default_ttl=3600, session_id="s")
    await tasks.create_task(house, "u", "s", goal="g", steps=[], task_id="t")
    await tools.record_tool_call(house, "u", "t", "search", ToolOutcome.CALLING)

    async def naive() -> None:
        row = await ToolState.get(tool_name="search")
        row.retry_count += 1
        await row.save(update_fields=["retry_count"])

    await asyncio.gather(*(naive() for _ in range(REPORTERS)))
    assert (await ToolState.get(tool_name="search")).retry_count < REPORTERS
