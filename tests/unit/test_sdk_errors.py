"""What the SDK raises for each answer and failure of its HTTP client, with the
client's endpoint played by a stand-in (no server, no network): the SDK's own
exceptions, and the retries of a lost answer kept as they are."""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeAlias

import pytest

from runstate.client import (
    RateLimited,
    Runstate,
    RunstateError,
    ServerError,
    ServerUnavailable,
    Unauthorized,
)
from runstate.client import calls as calls_module
from runstate.client.http import ClosedError, ConnectionFailedError, Response

URL = "http://runstate.test"
ADDED = {"addSessionItems": {"__typename": "SessionItemsAdded", "itemSeq": 4}}
"""The answer of ``add_session_items`` (its ``itemSeq`` is what the call returns)."""
HOLE = [
    {"message": "Unexpected error.", "locations": [{"line": 1, "column": 38}], "path": ["taskAt"]}
]
"""What ``taskAt`` answered on a seq missing from a task's log: a masked failure."""


Outcome: TypeAlias = dict[str, Any] | Response | BaseException
"""A GraphQL answer (sent as a 200), an answer as it came, or what the client raised."""


class Endpoint:
    """Stands in for the client's endpoint: answers each POST with the next of
    ``outcomes``, raising it if it is an exception, and keeps the variables sent."""

    url = f"{URL}/graphql"

    def __init__(self, *outcomes: Outcome) -> None:
        self.outcomes = list(outcomes)
        self.sent: list[dict[str, Any]] = []

    async def post(self, body: bytes, within: float) -> Response:
        self.sent.append(json.loads(body)["variables"])
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome, Response):
            return outcome
        return Response(200, "OK", json.dumps({"data": outcome}).encode())


def query_error(*errors: dict[str, Any], status: int = 200) -> Response:
    """An answer with these GraphQL ``errors``, as the server sends them."""
    return Response(status, "", json.dumps({"data": None, "errors": list(errors)}).encode())


@pytest.fixture
def rs(monkeypatch: pytest.MonkeyPatch) -> Runstate:
    """A client whose retries pause for no time, with no endpoint yet."""
    monkeypatch.setattr(calls_module, "FIRST_BACKOFF", 0.0)
    return Runstate(URL, "rs_token", retries=3)


def answering(rs: Runstate, monkeypatch: pytest.MonkeyPatch, endpoint: Endpoint) -> Endpoint:
    """``endpoint`` as ``rs``'s own, as ``async with rs`` would have made one."""
    monkeypatch.setattr(rs, "_endpoint", endpoint)
    return endpoint


async def test_a_masked_failure_raises_server_error_with_its_path(
    rs: Runstate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the mapping of GraphQL ``errors`` naming no Problem (taskAt's answer on
    a hole in a task's log): ``ServerError`` with the server's message, its path and
    the entries as sent, asked once. Before, gql's TransportQueryError escaped."""
    session = answering(rs, monkeypatch, Endpoint(query_error(*HOLE)))
    with pytest.raises(ServerError) as raised:
        await rs.task_at("trip-1", 3)
    assert type(raised.value) is ServerError
    assert str(raised.value) == "taskAt: Unexpected error."
    assert (raised.value.operation, raised.value.path, raised.value.code) == (
        "taskAt",
        ["taskAt"],
        None,
    )
    assert raised.value.errors == HOLE
    assert session.sent == [{"id": "trip-1", "seq": 3}]


async def test_every_error_and_the_first_code_are_kept(
    rs: Runstate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards ``ServerError``'s reading of several entries: each message in its text,
    the first entry's ``extensions.code`` as its code; a GraphQL body answered with
    a 4xx is read as one with a 200 (not as the status line)."""
    too_large = {
        "message": "this operation could answer about 9000 bytes, more than 3000",
        "extensions": {"code": "RESPONSE_TOO_LARGE", "estimate": 9000, "maximum": 3000},
    }
    answering(
        rs, monkeypatch, Endpoint(query_error(too_large, {"message": "and another"}, status=400))
    )
    with pytest.raises(ServerError) as raised:
        await rs.task("trip-1")
    assert str(raised.value) == (
        "task: this operation could answer about 9000 bytes, more than 3000; and another"
    )
    assert raised.value.messages == [too_large["message"], "and another"]
    assert raised.value.code == "RESPONSE_TOO_LARGE"
    assert raised.value.errors == [too_large, {"message": "and another"}]


async def test_a_4xx_without_a_graphql_body_raises_server_error_unretried(
    rs: Runstate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the mapping of a 4xx whose body is no GraphQL answer (a proxy's 404,
    say): ``ServerError`` with the status line, sent once."""
    line = f"Client error '404 Not Found' for url '{URL}/graphql'"
    status = Response(404, "Not Found", b"<html>not here</html>")
    session = answering(rs, monkeypatch, Endpoint(status))
    with pytest.raises(ServerError) as raised:
        await rs.add_session_items("chat-1", ["hello"])
    assert type(raised.value) is ServerError
    assert str(raised.value) == f"addSessionItems: {line}"
    assert len(session.sent) == 1


@pytest.mark.parametrize(
    "lost",
    [
        TimeoutError(),
        ConnectionFailedError("the connection was closed mid-answer"),
        Response(502, "Bad Gateway", b"<html>upstream gone</html>"),
        Response(200, "OK", b"{truncated"),
    ],
    ids=["timeout", "dropped", "502", "broken"],
)
async def test_a_lost_answer_is_asked_again_with_the_same_key(
    rs: Runstate, monkeypatch: pytest.MonkeyPatch, lost: BaseException
) -> None:
    """Guards the retries: an answer lost to a timeout, a dropped connection, a 5xx
    without a GraphQL body or a body that is no JSON is asked again under the same
    idempotency key, and the second answer is the call's; lost every time,
    ``ServerUnavailable`` once the retries are spent."""
    session = answering(rs, monkeypatch, Endpoint(lost, ADDED))
    assert await rs.add_session_items("chat-1", ["hello"]) == 4
    first, second = session.sent
    assert first == second
    assert first["input"]["idempotencyKey"]

    session = answering(rs, monkeypatch, Endpoint(lost, lost, lost))
    with pytest.raises(ServerUnavailable, match=r"did not answer addSessionItems .*, 3 tries$"):
        await rs.add_session_items("chat-1", ["hello"])
    assert len(session.sent) == 3


async def test_a_refused_token_and_a_rate_limit_keep_their_exceptions(
    rs: Runstate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the codes read before ``ServerError``: UNAUTHENTICATED raises
    Unauthorized; a 429's RATE_LIMITED is waited out and the request sent again, and
    raised as RateLimited once the wait is spent."""
    unauthenticated = {"message": "no token", "extensions": {"code": "UNAUTHENTICATED"}}
    answering(rs, monkeypatch, Endpoint(query_error(unauthenticated)))
    with pytest.raises(Unauthorized, match="refused the token"):
        await rs.task("trip-1")

    waits: list[float] = []

    async def paused(name: str, wait: float) -> float:
        waits.append(wait)
        return calls_module.RATE_LIMIT_WAIT / 2

    monkeypatch.setattr(calls_module, "_pause", paused)
    limited = {
        "message": "rate limited: try again in 0.25 s",
        "extensions": {"code": "RATE_LIMITED", "retryAfterSeconds": 0.25},
    }
    answering(rs, monkeypatch, Endpoint(query_error(limited, status=429), ADDED))
    assert await rs.add_session_items("chat-1", ["hello"]) == 4
    assert waits == [0.25]

    answering(rs, monkeypatch, Endpoint(*[query_error(limited)] * 3))
    with pytest.raises(RateLimited) as raised:
        await rs.add_session_items("chat-1", ["hello"])
    assert (str(raised.value), raised.value.retry_after) == (limited["message"], 0.25)
    assert waits == [0.25, 0.25, 0.25], "waited twice, the whole wait, then raised"


async def test_a_call_after_the_client_closed_raises_the_sdks_error(
    rs: Runstate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards a request that finds the shared connections closed (``ClosedError``):
    the SDK's own ``RunstateError``, saying so."""
    answering(rs, monkeypatch, Endpoint(ClosedError("these connections were closed")))
    with pytest.raises(RunstateError) as raised:
        await rs.task("trip-1")
    assert type(raised.value) is RunstateError
    assert str(raised.value) == "task was not sent: this Runstate was closed"


async def test_a_call_outside_async_with_or_after_it_raises_the_sdks_error(
    rs: Runstate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the client's state: before ``async with`` a call says how to use it;
    a retry whose pause outlasted the client (closed meanwhile) says it was not sent."""
    with pytest.raises(RunstateError, match=r"use Runstate as `async with"):
        await rs.task("trip-1")

    async def closing(seconds: float) -> None:
        monkeypatch.setattr(rs, "_endpoint", None)

    monkeypatch.setattr(asyncio, "sleep", closing)
    answering(rs, monkeypatch, Endpoint(TimeoutError()))
    with pytest.raises(RunstateError) as raised:
        await rs.task("trip-1")
    assert str(raised.value) == "task was not sent: this Runstate was closed"
