"""The SDK against a real server that answers GraphQL ``errors`` instead of data: each
raises the SDK's own ``ServerError`` (naming the operation, with the server's
words), over HTTP and over a WebSocket, never gql's exception."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterator

import pytest

from runstate.client import Event, InvalidInput, NotFound, Runstate, ServerError
from tests.support import Server, create_token, sqlite_server

BODY_LIMIT = 4096
TOO_BIG = 2**31
"""A seq GraphQL's Int cannot hold: refused as the request's variables are read."""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """A server refusing request bodies over ``BODY_LIMIT`` bytes, and a token."""
    env = {"RUNSTATE_MAX_BODY_BYTES": str(BODY_LIMIT)}
    with sqlite_server(tmp_path_factory, "sdk-errors", **env) as server:
        yield server, create_token(server.database_url, "erring-agent")


@pytest.fixture
async def rs(served: tuple[Server, str]) -> AsyncIterator[Runstate]:
    server, token = served
    async with Runstate(server.url, token) as client:
        yield client


async def speak(rs: Runstate, task_id: str, output: str) -> None:
    """Run the task's one step to its end with ``output``."""
    async with rs.run(task_id, holder="speaker") as run:
        await run.begin(0)
        await run.succeed(0, output)


async def follow(watch: AsyncIterable[Event]) -> None:
    """Follow a watch until it raises."""
    async for _ in watch:
        pass


async def test_a_write_over_the_body_limit_raises_server_error(rs: Runstate) -> None:
    """Guards the mapping of a 413 (a GraphQL body with one error and no data): the
    runner's ``succeed`` raises ``ServerError`` naming completeStep and the server's
    words, and nothing is written. Before, gql's TransportQueryError escaped."""
    session = await rs.start_session()
    task = await rs.create_task(session.id, "say too much", ["speak"])
    with pytest.raises(ServerError) as raised:
        await speak(rs, task.id, "x" * BODY_LIMIT)
    refused = raised.value
    assert type(refused) is ServerError
    assert str(refused) == f"completeStep: request body is larger than {BODY_LIMIT} bytes"
    assert refused.errors == [{"message": f"request body is larger than {BODY_LIMIT} bytes"}]
    assert (refused.operation, refused.code, refused.path) == ("completeStep", None, None)
    after = await rs.task(task.id)
    assert [s.status for s in after.steps or ()] == ["RUNNING"]
    assert after.lock is None, "the runner left as ever, its lease given up"


async def test_a_variable_the_server_refuses_raises_server_error_over_http_and_websocket(
    rs: Runstate,
) -> None:
    """Guards the mapping of GraphQL ``errors`` that name no Problem: a seq past
    GraphQL's Int raises ``ServerError`` from ``task_at`` (gql's TransportQueryError
    before) and from ``watch`` (NotFound before, as for an unknown task). Control:
    errors that name a Problem keep its exception: an unknown task's watch raises
    NotFound, a seq past the task's head InvalidInput."""
    session = await rs.start_session()
    task = await rs.create_task(session.id, "look back", ["a"])
    refusal = "Int cannot represent non 32-bit signed integer value: 2147483648"

    with pytest.raises(ServerError) as raised:
        await rs.task_at(task.id, TOO_BIG)
    assert type(raised.value) is ServerError
    assert str(raised.value) == f"taskAt: Variable '$seq' has invalid value: {refusal}"
    assert raised.value.messages == [f"Variable '$seq' has invalid value: {refusal}"]
    assert (raised.value.code, raised.value.path) == (None, None)

    with pytest.raises(ServerError) as raised:
        await follow(rs.watch(task.id, after_seq=TOO_BIG))
    assert type(raised.value) is ServerError
    assert str(raised.value) == f"taskProgress: Variable '$afterSeq' has invalid value: {refusal}"

    with pytest.raises(NotFound, match=r"^task 'no-such-task' not found$"):
        await follow(rs.watch("no-such-task"))
    with pytest.raises(InvalidInput, match=r"^seq: must be between 1 and 1$"):
        await rs.task_at(task.id, 2)
