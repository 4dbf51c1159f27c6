"""Per-user rate limits: a typed refusal with retry-after, one budget shared by every
server process through Redis, and other users never affected."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_api import start_session
from tests.integration.test_progress import ACTIVITY
from tests.support import (
    Api,
    Server,
    Subscriber,
    SubscriptionError,
    create_token,
    query_value,
    require_service,
)

BURST = 10
LIMITS = {"RUNSTATE_RATE_BURST": str(BURST), "RUNSTATE_RATE_PER_SECOND": "0.1"}
"""Ten points, regained at one every ten seconds: nothing refills during a test."""

READ = 'query { task(id: "none") { __typename ... on RateLimited { code retryAfterSeconds } } }'


def servers(tmp_path: Path, **env: str) -> Iterator[tuple[Server, Server]]:
    url = f"sqlite://{tmp_path / 'limits.db'}"
    first = Server(url, tmp_path / "a.log", **LIMITS, **env).start()
    second = Server(url, tmp_path / "b.log", **LIMITS, **env).start()
    try:
        yield first, second
    finally:
        first.stop()
        second.stop()


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    require_service("Redis", "127.0.0.1", 6379)
    yield from servers(tmp_path, RUNSTATE_REDIS_URL="redis://127.0.0.1:6379/0")


@pytest.fixture
def separate(tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    yield from servers(tmp_path)


def reads_until_refused(apis: list[Api]) -> tuple[int, dict[str, Any]]:
    """Reads sent in turn to each of ``apis`` until one is refused: how many passed,
    and the refusal."""
    for passed, api in zip(itertools.count(), itertools.cycle(apis), strict=False):
        answer = api(READ)["task"]
        if answer["__typename"] == "RateLimited":
            return passed, answer
        assert answer == {"__typename": "NotFound"}
        assert passed < 10 * BURST, "never refused"
    raise AssertionError("unreachable")


def test_one_budget_is_shared_by_every_process(shared: tuple[Server, Server]) -> None:
    """Guards the Redis limiter: reads alternating between two processes draw from one
    budget of ten points, and the eleventh is refused with RateLimited and the
    seconds until a point is back; another user still reads on both."""
    first, second = shared
    token = create_token(first.database_url, "greedy")
    with Api(first.url, token) as one, Api(second.url, token) as two:
        passed, refusal = reads_until_refused([one, two])
    assert passed == BURST
    assert refusal["code"] == "RATE_LIMITED"
    assert 0 < refusal["retryAfterSeconds"] <= 10
    other = create_token(first.database_url, "patient")
    with Api(first.url, other) as one, Api(second.url, other) as two:
        assert [api(READ)["task"] for api in (one, two)] == [{"__typename": "NotFound"}] * 2


def test_without_redis_each_process_has_its_own_budget(separate: tuple[Server, Server]) -> None:
    """Control for the test above: without Redis the same reads pass twice as often,
    ten on each process, which is what sharing the budget prevents."""
    first, second = separate
    token = create_token(first.database_url, "greedy")
    with Api(first.url, token) as one, Api(second.url, token) as two:
        passed, _ = reads_until_refused([one, two])
    assert passed == 2 * BURST


async def test_writes_lists_and_subscriptions_are_refused_alike(
    shared: tuple[Server, Server],
) -> None:
    """A write over budget answers RateLimited and writes nothing; a list (no union
    to answer in) and a subscription answer a GraphQL error with code RATE_LIMITED
    and retryAfterSeconds in its extensions."""
    first, _ = shared
    with Api(first.url, create_token(first.database_url, "writer")) as api:
        session = start_session(api)  # 2 points
        for _ in range(BURST - 2):
            assert api(READ)["task"]["__typename"] == "NotFound"
        refused = api(
            "mutation { startSession(input: {}) { __typename"
            " ... on RateLimited { code message retryAfterSeconds } } }"
        )["startSession"]
        assert (refused["__typename"], refused["code"]) == ("RateLimited", "RATE_LIMITED")
        assert refused["message"].startswith("rate limited: try again in ")
        sessions = "SELECT COUNT(*) FROM sessions WHERE user_id = 'writer'"
        assert query_value(first.database_url, sessions) == 1
        listed = api.post({"query": "{ sessions { edges { cursor } } }"}).json()
        assert listed["data"] is None
        assert listed["errors"][0]["extensions"]["code"] == "RATE_LIMITED"
        assert listed["errors"][0]["extensions"]["retryAfterSeconds"] > 0
        async with Subscriber(first.url, api.token, ACTIVITY, {"id": session["id"]}) as watch:
            with pytest.raises(SubscriptionError, match="rate limited"):
                await asyncio.wait_for(watch.next(), 10)
