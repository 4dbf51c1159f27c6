"""Idempotency keys over HTTP: a retried write answers as the first call did and
writes once, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLList,
    GraphQLNonNull,
    build_schema,
)

import runstate.resolvers.build
from tests.integration.test_api import (
    create_task,
    events,
    new_task,
    set_status,
    start_session,
    step,
)
from tests.integration.test_lifecycle import tool
from tests.support import Api, Server, query_value

schema = runstate.resolvers.build.build_schema()


def key() -> str:
    return f"k-{uuid.uuid4().hex}"


def start(api: Api, task_id: str, version: int, idempotency_key: str | None) -> dict[str, Any]:
    return step(
        api,
        "startStep",
        "StepRefInput",
        taskId=task_id,
        stepIndex=0,
        expectedVersion=version,
        idempotencyKey=idempotency_key,
    )


def test_a_write_sent_three_times_writes_once_and_answers_alike(alice: Api) -> None:
    """Guards replay: the second and third calls answer exactly as the first (the
    task as it stood right after that write, steps included, even once the task
    has moved on) and add no event. Control: without a key, the retry of the
    same write is refused as a VersionConflict."""
    task = new_task(alice)
    k = key()
    first = start(alice, task["id"], 1, k)
    assert (first["__typename"], first["version"]) == ("Task", 2)
    assert start(alice, task["id"], 1, k) == first
    done = step(
        alice,
        "completeStep",
        "CompleteStepInput",
        taskId=task["id"],
        stepIndex=0,
        expectedVersion=2,
        output="found",
    )
    assert done["version"] == 3
    assert start(alice, task["id"], 1, k) == first, "as it stood right after that write"
    assert [e["kind"] for e in events(alice, task["id"])] == [
        "TASK_CREATED",
        "STEP_STARTED",
        "STEP_SUCCEEDED",
    ]
    control = new_task(alice)
    assert start(alice, control["id"], 1, None)["__typename"] == "Task"
    retried = start(alice, control["id"], 1, None)
    assert (retried["__typename"], retried["currentVersion"]) == ("VersionConflict", 2)


def test_twenty_concurrent_calls_with_one_key_write_once(alice: Api, server: Server) -> None:
    """Guards the unique index: 20 calls at once with one key (and the same input)
    make one event and one answer, whichever call wrote it. Control: 20 concurrent
    tool failures without a key count 20 retries."""
    task = new_task(alice)
    k = key()
    with ThreadPoolExecutor(20) as pool:
        callers = [Api(server.url, alice.token) for _ in range(20)]
        answers = list(pool.map(lambda api: start(api, task["id"], 1, k), callers))
        failures = list(
            pool.map(
                lambda api: tool(api, task["id"], "FAILURE", name="flaky", maxRetries=100),
                callers,
            )
        )
    for api in callers:
        api.close()
    assert all(a == answers[0] for a in answers)
    assert answers[0]["version"] == 2
    kinds = [e["kind"] for e in events(alice, task["id"])]
    assert kinds.count("STEP_STARTED") == 1
    assert max(f["retryCount"] for f in failures) == 20


def test_a_tool_failure_reported_twice_with_one_key_counts_once(alice: Api) -> None:
    task = new_task(alice)
    k = key()
    first = tool(alice, task["id"], "FAILURE", error="503", idempotencyKey=k)
    again = tool(alice, task["id"], "FAILURE", error="503", idempotencyKey=k)
    assert first == again
    assert first["retryCount"] == 1
    assert tool(alice, task["id"], "FAILURE", error="503")["retryCount"] == 2


def test_a_key_reused_for_other_input_is_refused_and_writes_nothing(alice: Api) -> None:
    task = new_task(alice)
    k = key()
    assert start(alice, task["id"], 1, k)["__typename"] == "Task"
    other = step(
        alice,
        "startStep",
        "StepRefInput",
        taskId=task["id"],
        stepIndex=1,
        expectedVersion=2,
        idempotencyKey=k,
    )
    assert (other["__typename"], other["idempotencyKey"]) == ("IdempotencyKeyReused", k)
    elsewhere = tool(alice, task["id"], "CALLING", idempotencyKey=k)
    assert elsewhere["__typename"] == "IdempotencyKeyReused", "another operation, same key"
    assert len(events(alice, task["id"])) == 2


def test_keys_are_per_caller(alice: Api, bob: Api) -> None:
    """Bob's key never answers with Alice's write, whatever its name."""
    k = key()
    mine, theirs = new_task(alice), new_task(bob)
    assert start(alice, mine["id"], 1, k)["id"] == mine["id"]
    assert start(bob, theirs["id"], 1, k)["id"] == theirs["id"]


def test_a_key_past_its_retention_is_swept_and_writes_again(alice: Api, server: Server) -> None:
    """Guards the TTL: a key whose retention ended is deleted by the sweep, and the
    same call then writes again (here: a conflict, since it did write before)."""
    from tests.support import runstate

    task = new_task(alice)
    k = key()
    assert start(alice, task["id"], 1, k)["version"] == 2
    count = f"SELECT COUNT(*) FROM idempotency_keys WHERE key = '{k}'"
    assert query_value(server.database_url, count) == 1
    query_value(
        server.database_url,
        f"UPDATE idempotency_keys SET expires_at = created_at WHERE key = '{k}' RETURNING 1",
    )
    swept = runstate("sweep", database_url=server.database_url).stdout
    assert "1 idempotency keys deleted" in swept
    assert query_value(server.database_url, count) == 0
    again = start(alice, task["id"], 1, k)
    assert (again["__typename"], again["currentVersion"]) == ("VersionConflict", 2)


def placeholder(kind: GraphQLInputType) -> Any:
    """A value of ``kind`` that passes GraphQL's own coercion (the services may still
    refuse it; the key is checked before they run)."""
    if isinstance(kind, GraphQLNonNull):
        inner = kind.of_type
        return {} if getattr(inner, "name", None) == "JSON" else placeholder(inner)
    if isinstance(kind, GraphQLList):
        return []
    if isinstance(kind, GraphQLEnumType):
        return next(iter(kind.values))
    if isinstance(kind, GraphQLInputObjectType):
        return {
            name: placeholder(field.type)
            for name, field in kind.fields.items()
            if isinstance(field.type, GraphQLNonNull)
        }
    return {"Int": 1, "Float": 1.0, "Boolean": True, "JSON": None}.get(kind.name, "x")


MUTATIONS = sorted(build_schema(schema.as_str()).mutation_type.fields.items())  # type: ignore[union-attr]


@pytest.mark.parametrize("key", ["", "k" * 256], ids=["empty", "256 characters"])
def test_every_mutation_answers_invalid_input_for_a_bad_key(alice: Api, key: str) -> None:
    """Guards the key check on every mutation, read from the schema so that a new one
    cannot forget: an empty or too long ``idempotencyKey`` is InvalidInput on it.
    deleteSession, releaseTaskLock and resumeTask once answered "Unexpected error."
    (their unions had no InvalidInput member) with a traceback in the log."""
    answers = {}
    for name, field in MUTATIONS:
        input_type = field.args["input"].type
        document = (
            f"mutation($input: {input_type}) {{ {name}(input: $input) {{"
            " __typename ... on InvalidInput { field } } }"
        )
        value = placeholder(input_type) | {"idempotencyKey": key}
        answers[name] = alice(document, input=value)[name]
    assert answers == {
        name: {"__typename": "InvalidInput", "field": "idempotencyKey"} for name, _ in MUTATIONS
    }
    assert len(answers) == 36


def test_keys_on_a_big_task_hold_a_reference_not_the_task(alice: Api, server: Server) -> None:
    """Guards the stored answer's form (``idempotency._stored_answer``): 100 keyed
    writes on a task with a 10,000-character goal store a few dozen bytes of answer
    each, outside the quota as they are, where storing the task kept 10,000 and more
    each. The replay still answers the task as that write left it."""
    goal = "g" * 10_000
    session = start_session(alice)["id"]
    task = create_task(alice, session, steps=1, goal=goal)
    keys = [key() for _ in range(100)]
    version = 1
    for i, k in enumerate(keys):
        status = "RUNNING" if i % 2 == 0 else "WAITING_TOOL"
        answer = set_status(alice, task["id"], version, status, idempotencyKey=k)
        assert answer["__typename"] == "Task", answer
        version = answer["version"]
    stored = query_value(
        server.database_url,
        "SELECT SUM(LENGTH(CAST(answer AS TEXT))) FROM idempotency_keys"
        f" WHERE key IN ({', '.join(repr(k) for k in keys)})",
    )
    assert stored < 100 * 100, f"{stored} bytes for 100 keys"
    replayed = set_status(alice, task["id"], 1, "RUNNING", idempotencyKey=keys[0])
    assert (replayed["version"], replayed["status"], replayed["goal"]) == (2, "RUNNING", goal)


def test_a_keyed_resume_that_changes_nothing_leaves_no_hole(alice: Api) -> None:
    """Guards the keyed no-op over HTTP, as a user first met it: a task resumed (seq
    2), then resumed again under a key, which changes nothing. It must answer version
    and seq 2, as its unkeyed twin does, and its repeat likewise; the log stays 1, 2
    and taskAt answers both. Before the fix the keyed call answered 3 and 3, the log
    held [1, 2], and taskAt(3) answered "Unexpected error."."""
    task = new_task(alice, steps=1)
    plan = "... on ResumePlan { task { version eventSeq } }"
    document = f"mutation($input: ResumeTaskInput!) {{ resumeTask(input: $input) {{ {plan} }} }}"

    def resume(**input: Any) -> dict[str, Any]:
        answer: dict[str, Any] = alice(document, input={"taskId": task["id"], **input})
        shown: dict[str, Any] = answer["resumeTask"]["task"]
        return shown

    assert resume() == {"version": 2, "eventSeq": 2}
    assert resume() == {"version": 2, "eventSeq": 2}, "unkeyed, it changes nothing"
    k = key()
    assert resume(idempotencyKey=k) == {"version": 2, "eventSeq": 2}
    assert resume(idempotencyKey=k) == {"version": 2, "eventSeq": 2}
    assert [e["seq"] for e in events(alice, task["id"])] == [1, 2]
    at = alice(
        "query($id: ID!) { a: taskAt(id: $id, seq: 2) { __typename }"
        " b: taskAt(id: $id, seq: 3) { __typename ... on InvalidInput { field } } }",
        id=task["id"],
    )
    assert at == {"a": {"__typename": "Task"}, "b": {"__typename": "InvalidInput", "field": "seq"}}
