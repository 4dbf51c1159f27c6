"""Bad input gets a typed answer (a Problem, 400 or 413), never a 500, and writes nothing."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from runstate.transport.view import SUBSCRIPTIONS_OVER_HTTP
from tests.integration.test_api import (
    create_task,
    events,
    new_task,
    start_session,
    step,
    update_session,
)
from tests.support import PROBLEM, SESSION, TASK, Api, Server, mutate


def stored(api: Api, task_id: str) -> dict[str, Any]:
    task: dict[str, Any] = api("query($id: ID!) { task(id: $id) { " + TASK + " } }", id=task_id)[
        "task"
    ]
    return task


@pytest.mark.parametrize(
    ("name", "input_type", "extra", "problem", "field"),
    [
        ("startStep", "StepRefInput", {"stepIndex": -1}, "InvalidInput", "stepIndex"),
        ("startStep", "StepRefInput", {"stepIndex": 3}, "InvalidInput", "stepIndex"),
        ("startStep", "StepRefInput", {"stepIndex": 2**31 - 1}, "InvalidInput", "stepIndex"),
        ("completeStep", "CompleteStepInput", {"stepIndex": -5}, "InvalidInput", "stepIndex"),
        (
            "failStep",
            "FailStepInput",
            {"stepIndex": 0, "error": "  "},
            "InvalidInput",
            "error",
        ),
        (
            "checkpointTask",
            "CheckpointTaskInput",
            {"steps": [{"index": 7, "status": "SUCCESS"}]},
            "InvalidInput",
            "steps[0].index",
        ),
        (
            "checkpointTask",
            "CheckpointTaskInput",
            {"steps": [{"index": 0, "status": "SUCCESS"}, {"index": 0, "status": "FAILED"}]},
            "InvalidInput",
            "steps[1].index",
        ),
        (
            "addSteps",
            "AddStepsInput",
            {"steps": [{"action": ""}]},
            "InvalidInput",
            "steps[0].action",
        ),
        ("addSteps", "AddStepsInput", {"steps": []}, "InvalidInput", "steps"),
    ],
)
def test_bad_step_input_is_typed_and_writes_nothing(
    alice: Api, name: str, input_type: str, extra: dict[str, Any], problem: str, field: str
) -> None:
    t = new_task(alice, steps=3)
    r = step(alice, name, input_type, taskId=t["id"], expectedVersion=1, **extra)
    assert (r["__typename"], r["code"], r["field"]) == (problem, "INVALID_INPUT", field)
    assert stored(alice, t["id"]) == t
    assert len(events(alice, t["id"])) == 1


@pytest.mark.parametrize(
    ("input", "field"),
    [
        ({"goal": ""}, "goal"),
        ({"goal": "   "}, "goal"),
        ({"goal": "x" * 10_001}, "goal"),
        ({"id": "has space"}, "id"),
        ({"id": "x" * 65}, "id"),
        ({"steps": [{"action": "ok"}, {"action": " "}]}, "steps[1].action"),
        ({"steps": [{"action": "a"}] * 1001}, "steps"),
    ],
)
def test_bad_create_task_input_is_typed_and_writes_nothing(
    alice: Api, input: dict[str, Any], field: str
) -> None:
    s = start_session(alice)
    r = create_task(alice, s["id"], **input)
    assert (r["__typename"], r["field"]) == ("InvalidInput", field)
    listed = alice("query($s: ID) { tasks(sessionId: $s) { edges { node { id } } } }", s=s["id"])
    assert listed["tasks"]["edges"] == []


@pytest.mark.parametrize(
    "input",
    [{"ttlSeconds": 0}, {"ttlSeconds": -1}, {"ttlSeconds": 10**9}, {"id": "bad/id"}],
)
def test_bad_start_session_input_is_typed(alice: Api, input: dict[str, Any]) -> None:
    r = start_session(alice, **input)
    assert r["__typename"] == "InvalidInput"


def test_unknown_ids_answer_not_found(alice: Api) -> None:
    r = step(alice, "startStep", "StepRefInput", taskId="nope", stepIndex=0, expectedVersion=1)
    assert (r["__typename"], r["code"], r["id"]) == ("NotFound", "NOT_FOUND", "nope")
    c = create_task(alice, "no-session")
    assert (c["__typename"], c["id"]) == ("NotFound", "no-session")
    u = mutate(
        alice, "updateSession", "UpdateSessionInput", "__typename", id="x", expectedVersion=1
    )
    assert u["__typename"] == "NotFound"


def test_bad_cursor_and_page_size_are_request_errors_not_500(alice: Api) -> None:
    for query in (
        '{ sessions(after: "garbage") { edges { cursor } } }',
        "{ tasks(first: -1) { edges { cursor } } }",
        "{ tasks(first: 100000) { edges { cursor } } }",
    ):
        response = alice.post({"query": query})
        assert response.status_code == 200
        body = response.json()
        assert body["data"] is None
        assert body["errors"][0]["message"].startswith(("after:", "first:"))


@pytest.mark.parametrize(
    ("content", "status"),
    [
        (b"{not json", 400),
        (b"\xff\xfe\x00garbage", 400),
        (b"[" * 200_000 + b"]" * 200_000, 400),
        (b"null", 400),
        (b"42", 400),
        (b'"x"', 400),
        (b"true", 400),
        (b'{"query": "{ sessions { edges { cursor } } "}', 200),
    ],
)
def test_malformed_bodies_answer_400(
    server: Server, alice: Api, content: bytes, status: int
) -> None:
    response = alice.http.post(
        "/graphql", content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == status


def test_oversized_body_answers_413(alice: Api) -> None:
    big = {"query": "{ sessions { edges { cursor } } }", "variables": {"pad": "x" * 2_000_000}}
    assert alice.post(big).status_code == 413


def test_syntax_and_validation_errors_are_shown_not_masked(alice: Api) -> None:
    body = alice.post({"query": "{ sessions { nope } }"}).json()
    assert "nope" in body["errors"][0]["message"]
    body = alice.post({"query": "{ sessions { "}).json()
    assert "Syntax Error" in body["errors"][0]["message"]


def test_a_subscription_over_http_answers_400_naming_the_websocket(alice: Api) -> None:
    """Guards ``GraphQLView.execute_single``'s check: without it a subscription sent
    as a POST ran as a query and answered 200 with "Unexpected error"."""
    for body in (
        {"query": 'subscription { taskProgress(taskId: "x") { seq } }'},
        {
            "query": "query Q { sessions { edges { cursor } } } subscription S { "
            'taskProgress(taskId: "x") { seq } }',
            "operationName": "S",
        },
    ):
        response = alice.post(body)
        assert response.status_code == 400
        assert response.json() == {"errors": [{"message": SUBSCRIPTIONS_OVER_HTTP}]}


def test_requests_without_a_valid_token_answer_401(server: Server) -> None:
    query = {"query": "{ sessions { edges { cursor } } }"}
    for headers in ({}, {"Authorization": "Bearer rs_wrong"}, {"Authorization": "Basic abc"}):
        response = httpx.post(f"{server.url}/graphql", json=query, headers=headers)
        assert response.status_code == 401
        assert response.json() == {
            "errors": [
                {
                    "message": "missing or invalid bearer token",
                    "extensions": {"code": "UNAUTHENTICATED"},
                }
            ]
        }


def test_graphiql_page_opens_in_a_browser_without_a_token(server: Server) -> None:
    response = httpx.get(f"{server.url}/graphql", headers={"Accept": "text/html"})
    assert response.status_code == 200
    assert "/static/vendor/graphiql-3.8.3/graphiql.min.js" in response.text
    assert "https://" not in response.text, "every script comes from the package"
    script = httpx.get(f"{server.url}/static/vendor/graphiql-3.8.3/graphiql.min.js")
    assert script.status_code == 200
    home = httpx.get(server.url)
    assert home.status_code == 200
    assert '<body data-graphiql="on">' in home.text
    assert 'href="/graphql"' in home.text


def test_a_message_count_past_graphql_int_is_refused(alice: Api) -> None:
    """Guards the counter bound: a delta that would take messageCount past 2^31-1
    answers InvalidInput naming it and writes nothing, and the session still reads
    (without the bound, it answered an error instead of itself)."""
    session = start_session(alice)
    largest = 2**31 - 1
    filled = update_session(alice, session["id"], 1, messageCountDelta=largest)
    assert (filled["messageCount"], filled["version"]) == (largest, 2)
    refused = update_session(alice, session["id"], 2, messageCountDelta=1)
    assert (refused["__typename"], refused["field"]) == ("InvalidInput", "messageCountDelta")
    read = alice("query($id: ID!) { session(id: $id) { " + SESSION + " } }", id=session["id"])
    assert (read["session"]["messageCount"], read["session"]["version"]) == (largest, 2)


UPDATE = (
    "mutation($id: ID!, $m: JSON) { updateSession(input: {id: $id, expectedVersion: 1,"
    " metadata: $m}) { __typename ... on AgentSession { metadata } } }"
)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ("NaN", "NaN is not a JSON number"),
        ("Infinity", "Infinity is not a JSON number"),
        ("[1, -Infinity]", "-Infinity is not a JSON number"),
        ('"a\\u0000b"', "Strings must not contain NUL characters or unpaired surrogates"),
        ('{"k\\u0000": 1}', "Strings must not contain NUL characters or unpaired surrogates"),
        ('"\\ud800"', "Strings must not contain NUL characters or unpaired surrogates"),
        ('["\\udfff x"]', "Strings must not contain NUL characters or unpaired surrogates"),
    ],
)
def test_values_neither_database_stores_alike_answer_400(
    alice: Api, metadata: str, message: str
) -> None:
    """Guards ``strict_json``: NaN, Infinity, NUL and unpaired surrogates in variables
    answer 400 saying which, on both backends, and write nothing."""
    session = start_session(alice)
    body = (
        '{"query": ' + json.dumps(UPDATE) + ', "variables": {"id": "' + session["id"] + '",'
        ' "m": ' + metadata + "}}"
    )
    response = alice.http.post(
        "/graphql", content=body.encode(), headers={"content-type": "application/json"}
    )
    assert (response.status_code, response.json()) == (400, {"errors": [{"message": message}]})
    read = alice("query($id: ID!) { session(id: $id) { " + SESSION + " } }", id=session["id"])
    assert read["session"]["version"] == 1


def test_a_surrogate_pair_and_an_escaped_backslash_are_fine(alice: Api) -> None:
    """Control: a real pair (an emoji) and the text ``\\u0000`` are stored as sent."""
    session = start_session(alice)
    metadata = ["\U0001f600", "\\u0000"]
    body = json.dumps(
        {"query": UPDATE, "variables": {"id": session["id"], "m": metadata}}, ensure_ascii=True
    )
    response = alice.http.post(
        "/graphql", content=body.encode(), headers={"content-type": "application/json"}
    )
    assert response.json()["data"]["updateSession"] == {
        "__typename": "AgentSession",
        "metadata": metadata,
    }


@pytest.mark.parametrize(
    ("literal", "message"),
    [
        ('"a\\u0000b"', "Strings must not contain NUL characters or unpaired surrogates"),
        ('"\\ud800"', "Syntax Error: Invalid Unicode escape sequence: '\\ud800'."),
        ("1e999", "1e999 is not a finite number"),
    ],
)
def test_the_same_values_written_in_the_document_are_refused(
    alice: Api, literal: str, message: str
) -> None:
    """Guards ``CleanLiterals``: the values strict_json refuses, written as literals in
    the document instead of variables, fail validation and write nothing."""
    session = start_session(alice)
    query = (
        f'mutation {{ updateSession(input: {{id: "{session["id"]}", expectedVersion: 1,'
        f" metadata: {literal}}}) {{ __typename }} }}"
    )
    body = alice.post({"query": query}).json()
    assert "data" not in body, "a request error: execution never began"
    assert [e["message"] for e in body["errors"]] == [message]
    read = alice("query($id: ID!) { session(id: $id) { " + SESSION + " } }", id=session["id"])
    assert read["session"]["version"] == 1


def test_ids_longer_than_any_stored_answer_not_found(alice: Api) -> None:
    """An id of 65 characters cannot exist; it answers NotFound like any unknown id."""
    long_id = "x" * 65
    read = alice(
        "query($id: ID!) { task(id: $id) { __typename } session(id: $id) { __typename } }",
        id=long_id,
    )
    assert read == {"task": {"__typename": "NotFound"}, "session": {"__typename": "NotFound"}}
    answer = update_session(alice, long_id, 1)
    assert (answer["__typename"], answer["id"]) == ("NotFound", long_id)
    started = step(
        alice, "startStep", "StepRefInput", taskId=long_id, expectedVersion=1, stepIndex=0
    )
    assert started["__typename"] == "NotFound"


LIMIT = 65_536


def sized(size: int) -> str:
    """A JSON string value of exactly ``size`` bytes once encoded."""
    return "x" * (size - 2)


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth - 1):
        value = [value]
    return value


def test_json_payloads_at_the_limits_pass_and_one_past_is_refused(alice: Api) -> None:
    """Guards ``validation.json_payload``: 64 KiB and 32 levels pass; one byte or one
    level more answers InvalidInput naming the field, and writes nothing."""
    assert start_session(alice, metadata=sized(LIMIT))["__typename"] == "AgentSession"
    assert start_session(alice, metadata=nested(32))["__typename"] == "AgentSession"
    big = start_session(alice, metadata=sized(LIMIT + 1))
    assert (big["__typename"], big["field"]) == ("InvalidInput", "metadata")
    assert big["message"] == "metadata: is 65537 bytes of JSON, more than the 65536 allowed"
    deep = start_session(alice, metadata=nested(33))
    assert (deep["__typename"], deep["field"]) == ("InvalidInput", "metadata")


@pytest.mark.parametrize(
    ("name", "input_type", "extra", "field"),
    [
        ("completeStep", "CompleteStepInput", {"stepIndex": 0, "output": "big"}, "output"),
        (
            "checkpointTask",
            "CheckpointTaskInput",
            {"steps": [{"index": 0, "status": "SUCCESS", "output": "big"}]},
            "steps[0].output",
        ),
        (
            "recordToolCall",
            "RecordToolCallInput",
            {"toolName": "t", "outcome": "SUCCESS", "result": "big"},
            "result",
        ),
    ],
)
def test_every_json_payload_is_bounded(
    alice: Api, name: str, input_type: str, extra: dict[str, Any], field: str
) -> None:
    t = new_task(alice, steps=1)
    payload = json.loads(json.dumps(extra).replace('"big"', json.dumps(sized(LIMIT + 1))))
    r = mutate(alice, name, input_type, PROBLEM, taskId=t["id"], expectedVersion=1, **payload)
    assert (r["__typename"], r["field"]) == ("InvalidInput", field)
    assert stored(alice, t["id"]) == t
    session = alice("query($id: ID!) { task(id: $id) { ... on Task { sessionId } } }", id=t["id"])
    plan = create_task(
        alice, session["task"]["sessionId"], steps=[{"action": "a", "input": sized(LIMIT + 1)}]
    )
    assert (plan["__typename"], plan["field"]) == ("InvalidInput", "steps[0].input")


@pytest.mark.parametrize("number", [str(2**64), str(-(2**63) - 1), "1e309", "-1e400"])
def test_numbers_json_cannot_keep_answer_invalid_input_naming_the_field(
    alice: Api, number: str
) -> None:
    """Guards ``validation.json_payload``'s numbers (issue 38, item 6): an integer
    past 64 bits (it answered "Unexpected error." with a traceback) and a number
    too large for a float (``1e309`` was stored as null in silence) answer
    InvalidInput naming the field, in metadata, a step's output and a step's input,
    and write nothing. Control: 2^63 - 1 and 1e308 are stored as sent."""
    session = start_session(alice)
    task = create_task(alice, session["id"], steps=1)

    def send(query: str, variables: str) -> dict[str, Any]:
        body = '{"query": ' + json.dumps(query) + ', "variables": ' + variables + "}"
        response = alice.http.post(
            "/graphql", content=body.encode(), headers={"content-type": "application/json"}
        )
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()["data"]
        return data

    meta = send(
        UPDATE.replace("__typename", PROBLEM), f'{{"id": "{session["id"]}", "m": [{number}]}}'
    )
    assert (meta["updateSession"]["__typename"], meta["updateSession"]["field"]) == (
        "InvalidInput",
        "metadata",
    )

    def with_json(name: str, fields: str) -> str:
        """Mutation ``name`` with its input's ``fields``, ``$j`` the JSON value."""
        return f"mutation($j: JSON) {{ {name}(input: {{{fields}}}) {{ {PROBLEM} }} }}"

    complete = with_json(
        "completeStep",
        f"taskId: {json.dumps(task['id'])}, stepIndex: 0, expectedVersion: 1, output: $j",
    )
    output = send(complete, f'{{"j": {{"n": {number}}}}}')["completeStep"]
    assert (output["__typename"], output["field"]) == ("InvalidInput", "output")
    create = with_json(
        "createTask",
        f'sessionId: {json.dumps(session["id"])}, goal: "g", steps: [{{action: "a", input: $j}}]',
    )
    planned = send(create, f'{{"j": {number}}}')["createTask"]
    assert (planned["__typename"], planned["field"]) == ("InvalidInput", "steps[0].input")
    assert stored(alice, task["id"]) == task
    read = alice("query($id: ID!) { session(id: $id) { " + SESSION + " } }", id=session["id"])
    assert read["session"]["version"] == 1
    kept = send(UPDATE, f'{{"id": "{session["id"]}", "m": [{2**63 - 1}, 1e308]}}')
    assert kept["updateSession"]["metadata"] == [2**63 - 1, 1e308]
