"""A fuzz run: a few thousand random bodies, documents and variables get no 5xx, no
stack trace and no server path in any answer, a few hundred random WebSocket
messages are answered or closed with the protocol's codes, the server keeps
serving, and its log holds no traceback: nothing a client can send is an
unexpected failure."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.frames import Close
from websockets.sync.client import connect as ws_connect

from runstate.resolvers.build import build_schema
from tests.support import GRAPHQL_WS, Api, Server, create_token, sqlite_server

schema = build_schema()

NAMES = sorted(
    {name for type_ in schema._schema.type_map.values() for name in getattr(type_, "fields", {})}
    | set(schema._schema.type_map)
)
PUNCTUATION = ["{", "}", "(", ")", ":", "$", "!", "...", "on", "@", "[", "]", "=", ","]
LEAKS = ("Traceback", 'File "', "/site-packages/", "/runstate/", "tortoise", "sqlite3")

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
documents = st.lists(
    st.sampled_from(NAMES)
    | st.sampled_from(PUNCTUATION)
    | st.text(max_size=6)
    | st.integers().map(str)
    | st.just('"x"'),
    max_size=40,
).map(" ".join)
well_formed = st.builds(
    lambda op, name, inner: f"{op} {{ {name} {{ {inner} }} }}",
    st.sampled_from(["", "query", "mutation", "subscription"]),
    st.sampled_from(NAMES),
    st.sampled_from(NAMES),
)
requests = st.fixed_dictionaries(
    {"query": documents | well_formed},
    optional={
        "variables": st.dictionaries(st.sampled_from(["id", "input", "seq", "x"]), json_values),
        "operationName": st.text(max_size=8) | st.none(),
    },
)
bodies = (
    requests.map(lambda r: json.dumps(r).encode())
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=200)
)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with sqlite_server(tmp_path_factory, "fuzz", RUNSTATE_RATE_LIMIT="false") as server:
        yield server


@pytest.fixture(scope="module")
def fuzzed(fuzz_server: Server) -> Iterator[Api]:
    with Api(fuzz_server.url, create_token(fuzz_server.database_url, "fuzzer")) as api:
        yield api


MALFORMED = [
    ("{ ...o }", "Unknown fragment 'o'."),
    ("{ sessions { ...x edges { cursor } } }", "Unknown fragment 'x'."),
    ("fragment a on Query { ...b } { ...a }", "Unknown fragment 'b'."),
    ("query { ...o } fragment o on Query { ...o }", "Cannot spread fragment 'o' within itself."),
    ("{ }", "A selection set must select at least one field"),
    ('{ task(id: "x") { } }', "A selection set must select at least one field"),
]


@pytest.mark.parametrize(("document", "message"), MALFORMED)
def test_a_malformed_document_is_a_validation_error(
    fuzzed: Api, document: str, message: str
) -> None:
    """Guards the depth rule's guards (``limits._depth_rule``): an unknown fragment
    once reached the client as the raw text "'o'", a KeyError with a traceback; an
    empty selection set (parsed by graphql-core 3.3) a 500, ``max()`` of nothing."""
    answer = fuzzed.post({"query": document}).json()
    assert [e["message"] for e in answer["errors"]] == [message]


@settings(
    max_examples=3000,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=bodies)
def test_random_requests_get_clean_answers(fuzzed: Api, body: bytes) -> None:
    response = fuzzed.http.post(
        "/graphql", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code in (200, 400, 413), (body, response.text)
    for leak in LEAKS:
        assert leak not in response.text, (body, response.text)
    if response.status_code == 200:
        answer: Any = response.json()
        assert set(answer) <= {"data", "errors", "extensions"}, answer


KNOWN_TYPES = ["connection_init", "ping", "pong", "subscribe", "complete", "next", "error"]
ws_payloads = st.fixed_dictionaries(
    {"query": documents | well_formed | json_values},
    optional={
        "variables": json_values,
        "operationName": json_values,
        "extensions": json_values,
    },
)
ws_messages = (
    json_values
    | st.fixed_dictionaries(
        {"type": st.sampled_from(KNOWN_TYPES) | st.text(max_size=300) | json_values},
        optional={"id": st.text(max_size=8) | json_values, "payload": ws_payloads | json_values},
    )
).map(json.dumps)
CLOSES = {4400, 4401, 4403, 4409, 4429}
"""What a client's messages may be closed with: graphql-transport-ws's codes for a
malformed message, a subscribe before init, a refused token, a duplicate id and a
second init."""


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(init=st.booleans(), messages=st.lists(ws_messages, min_size=1, max_size=3))
def test_random_websocket_messages_get_clean_answers(
    fuzz_server: Server, fuzzed: Api, init: bool, messages: list[str]
) -> None:
    """Guards ``wsmessages``: whatever a client sends, before or after its
    ``connection_init`` (JSON that is no object, a ``type`` of any JSON or of 300
    characters, ids, payloads, queries and variables of any JSON), the socket is
    answered and stays open for a ``ping``, or is closed with one of the protocol's
    codes and a reason a close frame holds: never cut off (1006, 1011). The log is
    checked for tracebacks below."""
    closed = answered(fuzz_server, fuzzed.token if init else None, messages)
    if closed is not None:
        assert closed.code in CLOSES, (messages, closed)
        assert len(closed.reason.encode()) <= 123


def answered(server: Server, token: str | None, messages: list[str]) -> Close | None:
    """The close frame the server answers ``messages`` with, sent after an
    acknowledged ``connection_init`` with ``token`` (first, without one), or None
    when it answers a ``ping`` sent after them; an AssertionError when the socket
    is cut off without a close frame."""
    with ws_connect(
        server.url.replace("http://", "ws://") + "/graphql", subprotocols=GRAPHQL_WS
    ) as ws:
        try:
            if token is not None:
                init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
                ws.send(json.dumps(init))
                assert json.loads(ws.recv(10))["type"] == "connection_ack"
            for message in [*messages, json.dumps({"type": "ping"})]:
                ws.send(message)
            while json.loads(ws.recv(10)).get("type") != "pong":
                pass
        except ConnectionClosed as error:
            received = error.rcvd
        else:
            return None
    assert received is not None, (messages, "cut off without a close frame")
    return received


def test_the_server_still_serves_after_the_fuzz(fuzzed: Api) -> None:
    assert fuzzed("{ __typename }") == {"__typename": "Query"}


def test_the_fuzzed_servers_log_holds_no_traceback(fuzz_server: Server, fuzzed: Api) -> None:
    """Runs after the fuzz and the malformed documents above (pytest keeps the file's
    order): whatever they sent, the server logged no unexpected failure."""
    assert fuzzed("{ __typename }") == {"__typename": "Query"}  # the log is written
    log = fuzz_server.log_path.read_text()
    assert "Traceback" not in log
