"""What the SDK raises for each failure gql reports, with gql's session played by a
stand-in (no server, no network): the SDK's own exceptions, and the retries of a
lost answer kept as they are."""

from __future__ import annotations

from typing import Any

import pytest
from gql import GraphQLRequest
from gql.transport.exceptions import (
    TransportClosed,
    TransportQueryError,
    TransportServerError,
)

from runstate.client import (
    RateLimited,
    Runstate,
    RunstateError,
    ServerError,
    ServerUnavailable,
    Unauthorized,
)
from runstate.client import calls as calls_module

URL = "http://runstate.test"
ADDED = {"addSessionItems": {"__typename": "SessionItemsAdded", "itemSeq": 4}}
"""The answer of ``add_session_items`` (its ``itemSeq`` is what the call returns)."""
HOLE = [
    {"message": "Unexpected error.", "locations": [{"line": 1, "column": 38}], "path": ["taskAt"]}
]
"""What ``taskAt`` answered on a seq missing from a task's log: a masked failure."""


class Session:
    """Stands in for gql's session: answers each request with the next of
    ``outcomes``, raising it if it is an exception, and keeps the variables sent."""

    def __init__(self, *outcomes: dict[str, Any] | BaseException) -> None:
        self.outcomes = list(outcomes)
        self.sent: list[dict[str, Any]] = []

    async def execute(self, request: GraphQLRequest) -> dict[str, Any]:
        self.sent.append(dict(request.variable_values or {}))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def query_error(*errors: dict[str, Any]) -> TransportQueryError:
    """gql's exception for an answer with these GraphQL ``errors``, as gql makes it."""
    return TransportQueryError(str(errors[0]), errors=list(errors))


@pytest.fixture
def rs(monkeypatch: pytest.MonkeyPatch) -> Runstate:
    """A client whose retries pause for no time, with no session of gql's yet."""
    monkeypatch.setattr(calls_module, "FIRST_BACKOFF", 0.0)
    return Runstate(URL, "rs_token", retries=3)


def answering(rs: Runstate, monkeypatch: pytest.MonkeyPatch, session: Session) -> Session:
    """``session`` as ``rs``'s own, as ``async with rs`` would have connected one."""
    monkeypatch.setattr(rs, "_session", session)
    return session


async def test_a_masked_failure_raises_server_error_with_its_path(
    rs: Runstate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the mapping of GraphQL ``errors`` naming no Problem (taskAt's answer on
    a hole in a task's log): ``ServerError`` with the server's message, its path and
    the entries as sent, asked once. Before, gql's TransportQueryError escaped."""
    session = answering(rs, monkeypatch, Session(query_error(*HOLE)))
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
    the first entry's ``extensions.code`` as its code."""
    too_large = {
        "message": "this operation could answer about 9000 bytes, more than 3000",
        "extensions": {"code": "RESPONSE_TOO_LARGE", "estimate": 9000, "maximum": 3000},
    }
    answering(rs, monkeypatch, Session(query_error(too_large, {"message": "and another"})))
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
    """Guards the mapping of gql's TransportServerError below 500 (a proxy's 404, say):
    ``ServerError`` with the status line, sent once. Before, gql's exception escaped."""
    line = f"Client error '404 Not Found' for url '{URL}/graphql'"
    status = TransportServerError(f"{line}\nFor more information check: https://x.test", 404)
    session = answering(rs, monkeypatch, Session(status))
    with pytest.raises(ServerError) as raised:
        await rs.add_session_items("chat-1", ["hello"])
    assert type(raised.value) is ServerError
    assert str(raised.value) == f"addSessionItems: {line}"
    assert len(session.sent) == 1


@pytest.mark.parametrize(
    "lost",
    [TimeoutError(), TransportServerError("Server error '502 Bad Gateway'", 502)],
    ids=["timeout", "502"],
)
async def test_a_lost_answer_is_asked_again_with_the_same_key(
    rs: Runstate, monkeypatch: pytest.MonkeyPatch, lost: BaseException
) -> None:
    """Guards the retries: an answer lost to a timeout (gql's own, a TimeoutError that
    escaped before) or a 5xx is asked again under the same idempotency key, and the
    second answer is the call's; lost every time, ``ServerUnavailable`` once the
    retries are spent."""
    session = answering(rs, monkeypatch, Session(lost, ADDED))
    assert await rs.add_session_items("chat-1", ["hello"]) == 4
    first, second = session.sent
    assert first == second
    assert first["input"]["idempotencyKey"]

    session = answering(rs, monkeypatch, Session(lost, lost, lost))
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
    answering(rs, monkeypatch, Session(query_error(unauthenticated)))
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
    answering(rs, monkeypatch, Session(query_error(limited), ADDED))
    assert await rs.add_session_items("chat-1", ["hello"]) == 4
    assert waits == [0.25]

    answering(rs, monkeypatch, Session(*[query_error(limited)] * 3))
    with pytest.raises(RateLimited) as raised:
        await rs.add_session_items("chat-1", ["hello"])
    assert (str(raised.value), raised.value.retry_after) == (limited["message"], 0.25)
    assert waits == [0.25, 0.25, 0.25], "waited twice, the whole wait, then raised"


async def test_a_call_after_the_client_closed_raises_the_sdks_error(
    rs: Runstate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards a retry that finds the client closed (gql's TransportClosed): the SDK's
    own ``RunstateError``, saying so."""
    answering(rs, monkeypatch, Session(TransportClosed("Transport is not connected")))
    with pytest.raises(RunstateError) as raised:
        await rs.task("trip-1")
    assert type(raised.value) is RunstateError
    assert str(raised.value) == "task was not sent: this Runstate was closed"
