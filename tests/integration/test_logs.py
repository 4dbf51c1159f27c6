"""The server's log as JSON: one line per request, with its request id, and never a
token or a payload (``runstate.observe.logs``)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tortoise.backends.base.executor import EXECUTOR_CACHE
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from runstate.app import create_app
from runstate.observe.logs import CURRENT, log
from runstate.settings import Settings
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


class RequestLines(logging.Handler):
    """The request log's lines, each with the id of the request it was written in."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def emit(self, record: logging.LogRecord) -> None:
        request = CURRENT.get()
        assert request is not None
        self.lines.append((request.id, record.__dict__["fields"]))


async def lines_of_seven_requests(
    request_log: int, database: Path
) -> list[tuple[str, dict[str, Any]]]:
    """Seven GETs of /healthz, one after another, from an app in this process whose
    ``request_log`` is given, each with its own X-Request-ID (r1 to r7) and each
    answered with it: the request log's lines. In process, the middleware has
    written its line (or not) before the client has the answer."""
    EXECUTOR_CACHE.clear()  # see tests/integration/test_history.py
    url = f"sqlite://{database}"
    app = create_app(Settings(database_url=url, request_log=request_log))
    handler = RequestLines()
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
                for n in range(1, 8):
                    answer = await http.get("/healthz", headers={"X-Request-ID": f"r{n}"})
                    assert (answer.status_code, answer.headers["x-request-id"]) == (200, f"r{n}")
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    return handler.lines


async def test_the_request_log_writes_each_line_one_in_n_or_none(tmp_path: Path) -> None:
    """Guards ``RUNSTATE_REQUEST_LOG`` (``Settings.request_log``, issue 54 item 6e)
    and its wiring in ``create_app``: on (the default), each of seven requests is a
    line; ``sample:3`` writes the lines of the 1st, 4th and 7th, each saying
    ``one_in: 3``; off writes none; every request is answered its X-Request-ID
    either way. Seen failing with ``create_app`` not passing the setting (seven
    lines, none saying ``one_in``, where three were due), and with ``_logs_next`` counting from 1
    (r3 and r6 logged, not r1, r4, r7)."""
    database = tmp_path / "log.db"
    default = await lines_of_seven_requests(Settings().request_log, database)
    assert [request_id for request_id, _ in default] == [f"r{n}" for n in range(1, 8)]
    assert {k: default[0][1][k] for k in ("method", "path", "status")} == {
        "method": "GET",
        "path": "/healthz",
        "status": 200,
    }
    assert "one_in" not in default[0][1]
    sampled = await lines_of_seven_requests(3, database)
    assert [(request_id, line["one_in"]) for request_id, line in sampled] == [
        ("r1", 3),
        ("r4", 3),
        ("r7", 3),
    ]
    assert await lines_of_seven_requests(0, database) == []


async def test_an_upgrade_is_uvicorns_line_without_websockets_connection_open(
    server: Server,
) -> None:
    """Guards ``logs._WithoutConnectionLines`` with the request log on: an upgrade
    keeps uvicorn's "[accepted]" line (it names the client's address), and
    websockets' "connection open", which named nothing and came with every
    connection, is gone. Seen failing before: a "connection open" line per socket."""
    url = server.url.replace("http://", "ws://") + "/graphql"

    def upgrades() -> list[str]:
        """uvicorn's messages that name an upgrade, and websockets' "connection open"."""
        return [
            line["message"]
            for line in lines(server)
            if line["message"] == "connection open" or '"WebSocket /graphql"' in line["message"]
        ]

    before = upgrades()
    async with connect(url, subprotocols=GRAPHQL_WS, local_addr=("127.0.0.21", 0)):
        pass
    new = [re.sub(r":\d+ - ", " - ", message) for message in upgrades()[len(before) :]]
    assert new == ['127.0.0.21 - "WebSocket /graphql" [accepted]']  # the client's port cut


def test_the_log_level_warning_drops_info_lines(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Guards ``RUNSTATE_LOG_LEVEL``, passed to the handler and to uvicorn, which sets
    its loggers' own levels: at WARNING, a server that starts, answers a request and
    refuses a WebSocket upgrade past its address's budget writes no INFO line
    (neither uvicorn's startup lines nor the request log's), and does write the
    refusal's WARNING. Seen failing before: the variable was not read, and uvicorn's
    startup and the request lines were written at INFO."""
    with sqlite_server(
        tmp_path_factory,
        "log-level",
        RUNSTATE_LOG_FORMAT="json",
        RUNSTATE_LOG_LEVEL="WARNING",
        RUNSTATE_ANON_RATE_BURST="1",
        RUNSTATE_ANON_RATE_PER_SECOND="0.01",
    ) as quiet:
        assert httpx.get(f"{quiet.url}/healthz").status_code == 200
        url = quiet.url.replace("http://", "ws://") + "/graphql"

        async def twice() -> int:
            async with connect(url, subprotocols=GRAPHQL_WS):
                pass
            try:
                async with connect(url, subprotocols=GRAPHQL_WS):
                    return 101
            except InvalidStatus as refused:
                return refused.response.status_code

        assert asyncio.run(twice()) == 429
        wait_until(lambda: "refused connections" in quiet.log(), 10, "the refusal's line")
        logged = lines(quiet)
    assert {line["level"] for line in logged} == {"WARNING"}
    assert [line["message"].split(" (")[0] for line in logged] == [
        "refused connections: 1 WebSocket upgrades over their rate budget"
    ]
