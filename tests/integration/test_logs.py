"""The server's log as JSON: one line per request, with its request id, and never a
token or a payload (``runstate.observe.logs``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.support import GRAPHQL_WS, Server, create_token, sqlite_server, wait_until

MARKER = "secret-payload-7f3a"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with sqlite_server(tmp_path_factory, "logs", RUNSTATE_LOG_FORMAT="json") as srv:
        yield srv


def lines(server: Server) -> list[dict[str, Any]]:
    """Every line of the server's log, each of which must be a JSON object."""
    return [json.loads(line) for line in server.log().splitlines() if line.strip()]


def requests_logged(server: Server, request_id: str) -> list[dict[str, Any]]:
    return [
        line
        for line in lines(server)
        if line.get("logger") == "runstate.request" and line.get("request_id") == request_id
    ]


def test_one_json_line_per_request_with_its_id_and_no_secrets(server: Server) -> None:
    """Guards RequestLog and the JSON format: a request's line carries the client's
    X-Request-ID (answered back), method, path, status and user; a request without
    one gets a fresh id, answered and logged alike; every line of the log is JSON;
    neither the token nor the payload (in the body and in a GET query string)
    appears anywhere in the log."""
    token = create_token(server.database_url, "lou")
    headers = {"Authorization": f"Bearer {token}", "X-Request-ID": "req-42"}
    body = {
        "query": "mutation($m: JSON) { startSession(input: {metadata: $m}) { __typename } }",
        "variables": {"m": {"note": MARKER}},
    }
    answer = httpx.post(f"{server.url}/graphql", json=body, headers=headers)
    assert answer.status_code == 200
    assert answer.headers["x-request-id"] == "req-42"
    fresh = httpx.get(
        f"{server.url}/graphql",
        params={"query": f'{{ session(id: "{MARKER}") {{ __typename }} }}'},
        headers={"Authorization": f"Bearer {token}"},
    )
    fresh_id = fresh.headers["x-request-id"]
    assert len(fresh_id) == 32

    wait_until(lambda: requests_logged(server, fresh_id), 5, "the GET's log line")
    (line,) = requests_logged(server, "req-42")
    assert {k: line[k] for k in ("method", "path", "status", "user")} == {
        "method": "POST",
        "path": "/graphql",
        "status": 200,
        "user": "lou",
    }
    assert line["level"] == "INFO"
    assert requests_logged(server, fresh_id)[0]["path"] == "/graphql"
    text = server.log()
    assert token not in text
    assert MARKER not in text


async def test_a_websocket_connection_is_one_line_when_it_ends(server: Server) -> None:
    """Guards RequestLog for WebSockets: a connection is logged once, when it ends,
    with its X-Request-ID, method WS, the user its connection_init named, and the
    token nowhere in the log."""
    token = create_token(server.database_url, "lou")
    url = server.url.replace("http://", "ws://") + "/graphql"
    async with connect(
        url, subprotocols=GRAPHQL_WS, additional_headers={"X-Request-ID": "ws-7"}
    ) as ws:
        init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
        await ws.send(json.dumps(init))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
    wait_until(lambda: requests_logged(server, "ws-7"), 5, "the WebSocket's log line")
    (line,) = requests_logged(server, "ws-7")
    assert {k: line[k] for k in ("method", "path", "user")} == {
        "method": "WS",
        "path": "/graphql",
        "user": "lou",
    }
    assert token not in server.log()


async def test_a_token_in_a_websocket_query_string_stays_out_of_the_log(server: Server) -> None:
    """Guards ``logs._WithoutQueryStrings``: uvicorn's "WebSocket /graphql?token=..."
    "[accepted]" line wrote a token given in the query string into the log."""
    token = create_token(server.database_url, "lou")
    url = server.url.replace("http://", "ws://") + f"/graphql?token={token}&m={MARKER}"
    async with connect(url, subprotocols=GRAPHQL_WS) as ws:
        init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
        await ws.send(json.dumps(init))
        assert json.loads(await ws.recv())["type"] == "connection_ack"

    def accepted() -> list[str]:
        return [line["message"] for line in lines(server) if "[accepted]" in line["message"]]

    wait_until(accepted, 5, "uvicorn's line for the WebSocket")
    assert all(message.endswith('"WebSocket /graphql" [accepted]') for message in accepted())
    text = server.log()
    assert token not in text
    assert MARKER not in text
