"""graphql-transport-ws messages the protocol does not allow: each closes the
socket 4400 with a reason that fits a close frame, and the server logs no
traceback (``transport.wsmessages``).

A client once put a 3.2 KB traceback in the log with each first message ``[]``
(Strawberry read ``message["type"]`` of a list), 5 KB with each ``type`` of 200
characters (its close reason was longer than a close frame holds), and a
``subscribe`` whose ``variables`` were a list ended in "Unexpected error.":
5,503 tracebacks, 20.6 MB of JSON log in 10 s from one client.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.integration.test_limits import ws_url
from tests.support import GRAPHQL_WS, Server, create_token, sqlite_server, wait_until

SUBSCRIBE_OK = {"query": "subscription($t: ID!) { taskProgress(taskId: $t) { seq } }"}
UNKNOWN = "Unknown message type: "
OBJECT_OR_NULL = "Invalid message: 'payload' must be an object or null"
OBJECT = "Invalid message: 'payload' must be an object"


def subscribe(**payload: Any) -> str:
    return json.dumps({"id": "1", "type": "subscribe", "payload": payload})


BEFORE_INIT: list[tuple[str, str]] = [
    ("[]", "Invalid message: not a JSON object"),
    ("null", "Invalid message: not a JSON object"),
    ("5", "Invalid message: not a JSON object"),
    ('"s"', "Invalid message: not a JSON object"),
    ("true", "Invalid message: not a JSON object"),
    ("{}", "Invalid message: 'type' must be a string"),
    ('{"type": 5}', "Invalid message: 'type' must be a string"),
    ('{"type": null}', "Invalid message: 'type' must be a string"),
    ('{"type": ["connection_init"]}', "Invalid message: 'type' must be a string"),
    (json.dumps({"type": "x" * 200}), UNKNOWN + "x" * 101),
    # 22 bytes and 50 two-byte characters: 122 bytes, the 51st would not fit whole.
    (json.dumps({"type": "é" * 100}), UNKNOWN + "é" * 50),
    ('{"type": "next", "id": "1"}', UNKNOWN + "next"),
    (
        '{"type": "connection_init", "payload": []}',
        "Invalid message: 'payload' must be an object or null",
    ),
    (
        '{"type": "connection_init", "payload": "s"}',
        "Invalid message: 'payload' must be an object or null",
    ),
    ('{"type": "ping", "payload": 5}', OBJECT_OR_NULL),
    ('{"type": "pong", "payload": [1]}', OBJECT_OR_NULL),
]
"""Messages sent first, and the reason of the 4400 each is closed with."""

AFTER_INIT: list[tuple[str, str]] = [
    ("[]", "Invalid message: not a JSON object"),
    ("null", "Invalid message: not a JSON object"),
    ('"subscribe"', "Invalid message: not a JSON object"),
    (json.dumps({"type": "y" * 500}), UNKNOWN + "y" * 101),
    ('{"type": "subscribe"}', "Invalid message: 'id' must be a non-empty string"),
    (
        json.dumps({"type": "subscribe", "id": 5, "payload": SUBSCRIBE_OK}),
        "Invalid message: 'id' must be a non-empty string",
    ),
    (
        json.dumps({"type": "subscribe", "id": ["a"], "payload": SUBSCRIBE_OK}),
        "Invalid message: 'id' must be a non-empty string",
    ),
    (
        json.dumps({"type": "subscribe", "id": "", "payload": SUBSCRIBE_OK}),
        "Invalid message: 'id' must be a non-empty string",
    ),
    ('{"type": "subscribe", "id": "1"}', OBJECT),
    (
        '{"type": "subscribe", "id": "1", "payload": []}',
        "Invalid message: 'payload' must be an object",
    ),
    (subscribe(), "Invalid message: 'payload.query' must be a string"),
    (subscribe(query=5), "Invalid message: 'payload.query' must be a string"),
    (
        subscribe(query=SUBSCRIBE_OK["query"], variables=["t"]),
        "Invalid message: 'payload.variables' must be an object or null",
    ),
    (
        subscribe(query=SUBSCRIBE_OK["query"], variables="t"),
        "Invalid message: 'payload.variables' must be an object or null",
    ),
    (
        subscribe(query=SUBSCRIBE_OK["query"], variables=5),
        "Invalid message: 'payload.variables' must be an object or null",
    ),
    (
        subscribe(query=SUBSCRIBE_OK["query"], operationName=5),
        "Invalid message: 'payload.operationName' must be a string or null",
    ),
    (
        subscribe(query=SUBSCRIBE_OK["query"], extensions=[]),
        "Invalid message: 'payload.extensions' must be an object or null",
    ),
    ('{"type": "complete"}', "Invalid message: 'id' must be a non-empty string"),
    ('{"type": "complete", "id": {}}', "Invalid message: 'id' must be a non-empty string"),
    ('{"type": "ping", "payload": []}', OBJECT_OR_NULL),
    # A document whose syntax error quotes a long name: the reason is cut to fit.
    (subscribe(query="z" * 300), "Syntax Error: Unexpected Name '" + "z" * 92),
]
"""Messages sent after ``connection_ack``, and the reason of the 4400 each is closed with."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with sqlite_server(tmp_path_factory, "ws-messages", RUNSTATE_LOG_FORMAT="json") as srv:
        yield srv


@pytest.fixture(scope="module")
def token(server: Server) -> str:
    return create_token(server.database_url, "framer")


def logged(server: Server, request_id: str) -> bool:
    """Whether the connection with this X-Request-ID has its request line."""
    for line in server.log().splitlines():
        entry = json.loads(line)
        if entry.get("logger") == "runstate.request" and entry.get("request_id") == request_id:
            return True
    return False


async def closed_by(server: Server, message: str, request_id: str, token: str | None) -> Any:
    """The close code and reason the server answers ``message`` with, sent first, or
    after ``connection_init`` with ``token`` was acknowledged; once the server has
    logged the connection's line."""
    async with connect(
        ws_url(server), subprotocols=GRAPHQL_WS, additional_headers={"X-Request-ID": request_id}
    ) as ws:
        if token is not None:
            init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
            await ws.send(json.dumps(init))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
        await ws.send(message)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    wait_until(lambda: logged(server, request_id), 10, "the connection's log line")
    received = closed.value.rcvd
    return None if received is None else (received.code, received.reason)


@pytest.mark.parametrize(("message", "reason"), BEFORE_INIT)
async def test_a_malformed_first_message_closes_4400(
    server: Server, message: str, reason: str
) -> None:
    """Guards ``wsmessages.problem`` and ``close_reason`` before ``connection_init``:
    the message is closed 4400 with this reason, at most 123 bytes of UTF-8 cut on a
    character boundary, and the log holds no traceback. Seen failing before: ``[]``,
    ``null``, ``5`` and ``"s"`` closed 1006 (Strawberry's TypeError, a traceback), a
    200-character type 1006 (its reason too long for a close frame, a traceback)."""
    request_id = f"before-{BEFORE_INIT.index((message, reason))}"
    assert await closed_by(server, message, request_id, None) == (4400, reason)
    assert len(reason.encode()) <= 123
    assert "Traceback" not in server.log()


@pytest.mark.parametrize(("message", "reason"), AFTER_INIT)
async def test_a_malformed_message_after_init_closes_4400(
    server: Server, token: str, message: str, reason: str
) -> None:
    """Guards the same after ``connection_ack``: wrong-typed ids, payloads, queries,
    variables (a list, a string, a number), operation names and extensions are
    each closed 4400 with this reason, and the log holds no traceback. Seen failing
    before: ``variables`` as a list answered an "Unexpected error." and logged a
    traceback, an ``id`` that is a list closed 1006 (unhashable, a traceback)."""
    request_id = f"after-{AFTER_INIT.index((message, reason))}"
    assert await closed_by(server, message, request_id, token) == (4400, reason)
    assert len(reason.encode()) <= 123
    assert "Traceback" not in server.log()


async def test_a_well_formed_subscribe_still_runs(server: Server, token: str) -> None:
    """Control: a ``subscribe`` with ``variables`` an object, ``operationName`` null
    and ``extensions`` an object gets its answer (an error for a task that does not
    exist), and the socket stays open for a ``ping``."""
    async with connect(ws_url(server), subprotocols=GRAPHQL_WS) as ws:
        init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
        await ws.send(json.dumps(init))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        await ws.send(
            subscribe(
                query=SUBSCRIBE_OK["query"],
                variables={"t": "nobody"},
                operationName=None,
                extensions={},
            )
        )
        answer = json.loads(await ws.recv())
        assert (answer["id"], answer["type"]) == ("1", "next")
        await ws.send(json.dumps({"type": "ping", "payload": None}))
        while (message := json.loads(await ws.recv()))["type"] != "pong":
            assert message["id"] == "1"
