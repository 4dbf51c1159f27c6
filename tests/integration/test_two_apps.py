"""Two apps in one process share nothing of runstate's: ``create_app(settings)``
wires each its own limits, group commit, broker and publisher, head checks of
live streams and rendered events, database connections (a Tortoise context of
its own) and metrics. Two apps on one database are as two server processes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from tortoise.backends.base.executor import EXECUTOR_CACHE

from runstate.app import create_app
from runstate.services.actions import tokens
from runstate.services.domain.validation import ContentLimits
from runstate.services.live import streams
from runstate.services.live.messages import session_channel
from runstate.services.read import lookups
from runstate.services.write.house import House
from runstate.settings import Settings

USER = "twin"
GOAL = "eleven char"  # past the strict app's limit of 10 characters


@pytest.fixture
async def apps(tmp_path: Path) -> AsyncIterator[tuple[Starlette, Starlette]]:
    """A default app and one whose goals may hold 10 characters, both started."""
    EXECUTOR_CACHE.clear()  # see tests/integration/test_history.py
    url = f"sqlite://{tmp_path / 'two.db'}"
    loose = create_app(Settings(database_url=url, rate_limit=False))
    strict = create_app(
        Settings(database_url=url, rate_limit=False, content=ContentLimits(goal_chars=10))
    )
    async with loose.router.lifespan_context(loose), strict.router.lifespan_context(strict):
        yield loose, strict


class Caller:
    """One app's GraphQL endpoint, called in process."""

    def __init__(self, app: Starlette, token: str) -> None:
        self.house: House = app.state.house
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://app",
            headers={"Authorization": f"Bearer {token}"},
        )

    async def __call__(self, query: str, **variables: Any) -> dict[str, Any]:
        answer = await self.http.post("/graphql", json={"query": query, "variables": variables})
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        assert "errors" not in body, body
        data: dict[str, Any] = body["data"]
        return data


CREATE = """mutation($input: CreateTaskInput!) { createTask(input: $input) {
  __typename ... on Task { id version } ... on InvalidInput { field } } }"""
START = """mutation($input: StepRefInput!) { startStep(input: $input) {
  __typename ... on Task { version } } }"""


async def heard(inbox: Any) -> bytes:
    """The next broker message of an inbox, within a deadline."""
    message = await inbox.next(10)
    assert isinstance(message, bytes), message
    return message


async def test_two_apps_in_one_process_share_nothing(apps: tuple[Starlette, Starlette]) -> None:
    """Guards ``create_app``'s wiring: each app's limits refuse only its own writes,
    its writes are published on its own broker only and commit through its own
    group, and its streams are checked by its own head checks. Seen failing with
    one ``House`` module-wide for every app (the second app's limits held for
    both, and both published on one broker), as the services' globals did
    before."""
    loose_app, strict_app = apps
    with loose_app.state.database.current():  # the test's own calls: the same database
        await both_apps(loose_app, strict_app)


async def both_apps(loose_app: Starlette, strict_app: Starlette) -> None:
    token = await tokens.create_token(USER)
    loose, strict = Caller(loose_app, token), Caller(strict_app, token)
    session = await loose(
        'mutation { startSession(input: { id: "s" }) { ... on AgentSession { id } } }'
    )
    assert session == {"startSession": {"id": "s"}}

    plan = {"sessionId": "s", "goal": GOAL, "steps": [{"action": "a"}]}
    made = (await loose(CREATE, input={**plan, "id": "kept"}))["createTask"]
    assert made == {"__typename": "Task", "id": "kept", "version": 1}
    refused = (await strict(CREATE, input={**plan, "id": "refused"}))["createTask"]
    assert refused == {"__typename": "InvalidInput", "field": "goal"}
    twin = (await strict(CREATE, input={**plan, "goal": "short", "id": "twin"}))["createTask"]
    assert twin["__typename"] == "Task"

    session_pk = (await lookups.get_task(USER, "kept")).session_pk
    async with (
        loose.house.broker.subscription([session_channel(session_pk)]) as loose_inbox,
        strict.house.broker.subscription([session_channel(session_pk)]) as strict_inbox,
    ):
        before = (loose.house.group.transactions, strict.house.group.transactions)
        step = {"stepIndex": 0, "expectedVersion": 1}
        assert (await loose(START, input={"taskId": "kept", **step}))["startStep"]["version"] == 2
        assert (loose.house.group.transactions, strict.house.group.transactions) == (
            before[0] + 1,
            before[1],
        )
        assert b'"task_id":"kept"' in await heard(loose_inbox)
        assert (await strict(START, input={"taskId": "twin", **step}))["startStep"]["version"] == 2
        assert (loose.house.group.transactions, strict.house.group.transactions) == (
            before[0] + 1,
            before[1] + 1,
        )
        assert b'"task_id":"twin"' in await heard(strict_inbox)
        assert await loose_inbox.next(0) is None  # the strict app's write never reached it
        assert await strict_inbox.next(0) is None  # nor the loose app's this one

    rounds = strict.house.heads.rounds
    watching = streams.task_progress(loose.house, USER, "kept", None, interval=0.05)
    assert (await anext(watching)).seq == 2
    pending = asyncio.ensure_future(anext(watching))
    async with asyncio.timeout(10):
        while loose.house.heads.rounds < 2:  # noqa: ASYNC110 - a poll, with a deadline, of a counter
            await asyncio.sleep(0.05)
    assert strict.house.heads.rounds == rounds == 0
    pending.cancel()
    await asyncio.gather(pending, return_exceptions=True)
    await watching.aclose()
    await loose.http.aclose()
    await strict.http.aclose()


@pytest.fixture
def two_databases(tmp_path: Path) -> tuple[Starlette, Starlette]:
    """Two apps on two databases, both created (neither started)."""
    EXECUTOR_CACHE.clear()  # see tests/integration/test_history.py
    first = create_app(Settings(database_url=f"sqlite://{tmp_path / 'a.db'}", rate_limit=False))
    second = create_app(Settings(database_url=f"sqlite://{tmp_path / 'b.db'}", rate_limit=False))
    return first, second


async def own_token(app: Starlette) -> str:
    """A token of USER's, in ``app``'s database."""
    with app.state.database.current():
        return await tokens.create_token(USER)


SESSION = """mutation($id: ID!) {
  startSession(input: { id: $id }) { ... on AgentSession { id } } }"""


async def test_stopping_one_app_leaves_the_other_serving(
    two_databases: tuple[Starlette, Starlette],
) -> None:
    """Guards each app's own database context (``storage.database.Database``, made
    current for its requests by ``transport.in_database``) and its own metrics: two
    apps on two databases each keep their writes in their own database, count
    their operations in their own registry, and once the first is stopped the
    second goes on serving. Seen failing with the requests run outside the app's
    context (``InDatabase`` passing them through): every request found no
    database; with Tortoise's connections shared by the process, stopping one app
    broke the other's next request with a ConfigurationError."""
    first_app, second_app = two_databases
    async with second_app.router.lifespan_context(second_app):
        async with first_app.router.lifespan_context(first_app):
            first = Caller(first_app, await own_token(first_app))
            second = Caller(second_app, await own_token(second_app))
            assert await first(SESSION, id="in-a") == {"startSession": {"id": "in-a"}}
            assert await second(SESSION, id="in-b") == {"startSession": {"id": "in-b"}}
            with first_app.state.database.current():
                assert [
                    s.id
                    for s in (
                        await lookups.list_sessions(USER, status=None, first=10, after=None)
                    ).items
                ] == ["in-a"]
            with second_app.state.database.current():
                assert [
                    s.id
                    for s in (
                        await lookups.list_sessions(USER, status=None, first=10, after=None)
                    ).items
                ] == ["in-b"]
            assert first.house.metrics is not second.house.metrics
            first_counted = first.house.metrics.registry.get_sample_value(
                "runstate_operations_total",
                {"type": "mutation", "field": "startSession", "outcome": "ok"},
            )
            assert first_counted == 1
            await first.http.aclose()
        # The first app has stopped: its connections are closed, the second's are not.
        assert await second(SESSION, id="after") == {"startSession": {"id": "after"}}
        second_counted = second.house.metrics.registry.get_sample_value(
            "runstate_operations_total",
            {"type": "mutation", "field": "startSession", "outcome": "ok"},
        )
        assert second_counted == 2
        await second.http.aclose()
