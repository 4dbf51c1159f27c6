"""Byte quotas, per task and per user, on both databases: at the limit a write
passes, one byte past it answers InvalidInput naming the field and writes nothing;
deleting a session (by hand or by the sweep) gives its bytes back, and a user's
count always equals what their sessions and tasks hold."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from runstate.services.domain.quota import ROW_BYTES
from tests.integration.test_api import create_task, start_session, step, update_session
from tests.support import (
    Api,
    Server,
    create_token,
    query_value,
    runstate,
    server_on,
    wait_until,
)

TASK_LIMIT = 5_000
USER_LIMIT = 20_000


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    with server_on(
        request.param,
        tmp_path_factory,
        "quota",
        RUNSTATE_MAX_TASK_BYTES=str(TASK_LIMIT),
        RUNSTATE_MAX_USER_BYTES=str(USER_LIMIT),
        RUNSTATE_MAX_GOAL_CHARS=str(USER_LIMIT),
    ) as srv:
        yield srv


def caller(server: Server, name: str) -> Api:
    return Api(server.url, create_token(server.database_url, name))


def stored(api: Api, task_id: str) -> tuple[int, int]:
    """The task's storedBytes and version."""
    task = api(
        "query($id: ID!) { task(id: $id) { ... on Task { storedBytes version } } }", id=task_id
    )
    return task["task"]["storedBytes"], task["task"]["version"]


def usage(api: Api) -> int:
    held: int = api("{ usage { storedBytes maxStoredBytes maxTaskBytes } }")["usage"]["storedBytes"]
    return held


def started(api: Api, session_id: str) -> str:
    """A task of one step, that step RUNNING."""
    task = create_task(api, session_id, steps=1, goal="g")
    step(api, "startStep", "StepRefInput", taskId=task["id"], stepIndex=0, expectedVersion=1)
    return str(task["id"])


def complete(api: Api, task_id: str, output: str) -> dict[str, Any]:
    version = stored(api, task_id)[1]
    return step(
        api,
        "completeStep",
        "CompleteStepInput",
        taskId=task_id,
        stepIndex=0,
        expectedVersion=version,
        output=output,
    )


def completion_bytes(output: str) -> int:
    """What completing a step with ``output`` adds: its event row, the step's history
    row and the output as JSON."""
    return 2 * ROW_BYTES + len(json.dumps(output).encode())


def test_a_task_holds_up_to_its_limit(server: Server) -> None:
    """Guards RUNSTATE_MAX_TASK_BYTES (the check in the write path's ``_finish``):
    a completion that brings the task to exactly its limit passes; the same on a
    twin task with one byte more answers InvalidInput ``output`` and leaves the
    task, its history and the user's count as they were."""
    with caller(server, "tess") as api:
        session = start_session(api)["id"]
        fits, past = started(api, session), started(api, session)
        held, _ = stored(api, fits)
        assert stored(api, past)[0] == held
        output = "x" * (TASK_LIMIT - held - completion_bytes(""))
        assert held + completion_bytes(output) == TASK_LIMIT

        assert complete(api, fits, output)["__typename"] == "Task"
        assert stored(api, fits)[0] == TASK_LIMIT

        before, user_before = stored(api, past), usage(api)
        refused = complete(api, past, output + "y")
        assert refused["__typename"] == "InvalidInput"
        assert refused["field"] == "output"
        assert str(TASK_LIMIT) in refused["message"]
        assert stored(api, past) == before
        assert usage(api) == user_before


def test_a_user_holds_up_to_the_limit_and_deleting_gives_room(server: Server) -> None:
    """Guards RUNSTATE_MAX_USER_BYTES (``quota.charge``) and the release on delete
    (``sessions.remove_sessions``): a task that brings the user to exactly the limit
    passes, one byte more answers InvalidInput ``goal`` and creates nothing, another
    user is not affected, and deleting a session gives back exactly its bytes."""
    with caller(server, "uma") as api, caller(server, "vic") as other:
        spare = start_session(api)["id"]
        filler = create_task(api, spare, steps=0, goal="f" * 4_000)
        assert filler["__typename"] == "Task"
        session = start_session(api)["id"]
        held = usage(api)
        room = USER_LIMIT - held
        # A task without steps holds its row, its TASK_CREATED event and its goal;
        # tasks of up to the per-task limit fill the room exactly.
        goals = []
        while room:
            size = min(room - 2 * ROW_BYTES, TASK_LIMIT - 2 * ROW_BYTES)
            goals.append(size)
            room -= size + 2 * ROW_BYTES
        *first, last = goals
        for size in first:
            assert create_task(api, session, steps=0, goal="a" * size)["__typename"] == "Task"
        tasks_before = query_value(server.database_url, "SELECT count(*) FROM tasks")

        over = create_task(api, session, steps=0, goal="b" * (last + 1))
        assert over["__typename"] == "InvalidInput"
        assert over["field"] == "goal"
        assert str(USER_LIMIT) in over["message"]
        assert query_value(server.database_url, "SELECT count(*) FROM tasks") == tasks_before
        assert usage(api) == USER_LIMIT - last - 2 * ROW_BYTES

        assert create_task(api, session, steps=0, goal="b" * last)["__typename"] == "Task"
        assert usage(api) == USER_LIMIT
        assert create_task(other, start_session(other)["id"], steps=0)["__typename"] == "Task"

        freed = stored(api, filler["id"])[0]
        deleted = api(
            "mutation($id: ID!) { deleteSession(input: {id: $id}) { __typename } }", id=spare
        )
        assert deleted["deleteSession"]["__typename"] == "Deleted"
        assert usage(api) == USER_LIMIT - freed - ROW_BYTES  # the task and its session


def test_metadata_counts_what_it_now_holds(server: Server) -> None:
    """Guards the session's share (``sessions.update_session``): replacing metadata
    counts the new size instead of the old, so a shrinking write lowers the count."""
    with caller(server, "wes") as api:
        session = start_session(api, metadata={"note": "x" * 1_000})
        assert usage(api) == ROW_BYTES + len(
            json.dumps({"note": "x" * 1_000}, separators=(",", ":"))
        )
        update_session(api, session["id"], session["version"], metadata=[1])
        assert usage(api) == ROW_BYTES + len("[1]")


def test_the_count_is_what_the_rows_hold_and_the_sweep_gives_it_back(server: Server) -> None:
    """Guards the count's bookkeeping across every kind of write and the sweep's
    release: a tool report counts its result; after plans, steps, checkpoints, tool
    reports and metadata, the user's count equals the sum of their tasks' and
    sessions' stored bytes; once the sweep deletes the expired sessions it is 0."""
    with caller(server, "xia") as api:
        session = start_session(api, ttlSeconds=2, metadata={"k": 1})
        task = create_task(api, session["id"], steps=[{"action": "a", "input": {"q": 1}}] * 3)
        tid = task["id"]
        step(
            api, "addSteps", "AddStepsInput", taskId=tid, expectedVersion=1, steps=[{"action": "z"}]
        )
        step(api, "startStep", "StepRefInput", taskId=tid, stepIndex=0, expectedVersion=2)
        step(
            api,
            "checkpointTask",
            "CheckpointTaskInput",
            taskId=tid,
            expectedVersion=3,
            steps=[
                {"index": 0, "status": "SUCCESS", "output": [1, 2]},
                {"index": 1, "status": "FAILED", "error": "boom"},
            ],
        )
        before = stored(api, tid)[0]
        api(
            'mutation($t: ID!) { recordToolCall(input: {taskId: $t, toolName: "web",'
            ' outcome: SUCCESS, result: {r: "ok"}}) { __typename } }',
            t=tid,
        )
        # A tool report keeps the tool's state in its event: its row and its result.
        assert stored(api, tid)[0] == before + ROW_BYTES + len('{"r":"ok"}')
        sql = (
            "SELECT (SELECT coalesce(sum(stored_bytes), 0) FROM tasks WHERE user_id = 'xia')"
            " + (SELECT coalesce(sum(stored_bytes), 0) FROM sessions WHERE user_id = 'xia')"
        )
        assert usage(api) == query_value(server.database_url, sql) > 8 * ROW_BYTES

        def swept() -> bool:
            runstate("sweep", "--retention", "0", database_url=server.database_url)
            return bool(
                query_value(
                    server.database_url, "SELECT count(*) FROM sessions WHERE user_id = 'xia'"
                )
                == 0
            )

        wait_until(swept, 30, "the session to expire and be swept")
        assert usage(api) == 0


def test_kept_answers_count_until_the_sweep(server: Server) -> None:
    """Guards ``idempotency._counted``: a keyed updateSession keeps its answer, the
    session with its metadata, and that counts toward the user's quota: the user's
    count is what the sessions, tasks and key rows hold together, each of five keys
    counting at least its 1,500 bytes of metadata; once the answers fill the quota
    the next keyed write is refused (InvalidInput on idempotencyKey) and writes
    nothing; the sweep deletes the keys past their time and gives their bytes back.
    Without the count, the keys held what the quota never saw, and none was refused."""
    api = caller(server, "yan")
    session = start_session(api)
    metadata = {"notes": "n" * 1_500}
    version = session["version"]
    rows = (
        "SELECT (SELECT coalesce(sum(stored_bytes), 0) FROM tasks WHERE user_id = 'yan')"
        " + (SELECT coalesce(sum(stored_bytes), 0) FROM sessions WHERE user_id = 'yan')"
    )
    keys = "SELECT coalesce(sum(stored_bytes), 0) FROM idempotency_keys WHERE user_id = 'yan'"
    for i in range(5):
        answer = update_session(
            api, session["id"], version, metadata=metadata, idempotencyKey=f"k{i}"
        )
        assert answer["__typename"] == "AgentSession", answer
        version = answer["version"]
    kept = query_value(server.database_url, keys)
    assert kept > 5 * 1_500
    assert usage(api) == query_value(server.database_url, rows) + kept
    refused = None
    for i in range(5, 40):
        answer = update_session(
            api, session["id"], version, metadata=metadata, idempotencyKey=f"k{i}"
        )
        if answer["__typename"] != "AgentSession":
            refused = answer
            break
        version = answer["version"]
    assert refused is not None
    assert refused["field"] == "idempotencyKey", refused
    assert stored_session_version(server, session["id"]) == version
    assert usage(api) <= USER_LIMIT
    query_value(
        server.database_url,
        "UPDATE idempotency_keys SET expires_at = created_at WHERE user_id = 'yan' RETURNING 1",
    )
    runstate("sweep", database_url=server.database_url)
    assert query_value(server.database_url, keys) == 0
    assert usage(api) == query_value(server.database_url, rows)
    api.close()


def stored_session_version(server: Server, session_id: str) -> int:
    version: int = query_value(
        server.database_url, f"SELECT version FROM sessions WHERE public_id = '{session_id}'"
    )
    return version


def test_the_key_row_of_a_task_write_counts(server: Server) -> None:
    """Guards ``idempotency._counted`` for task writes (issue 38, item 8): the key row
    of a keyed ``startStep`` (its answer a reference to the task) counts its row,
    key, operation and fingerprint toward its user's quota, so the user's count is
    what the tasks, sessions and key rows hold together. (Such rows counted nothing:
    352 to 877 bytes each, for a day, that no quota saw.)"""
    with caller(server, "zoe") as api:
        session = start_session(api)
        task = create_task(api, session["id"], steps=1)
        answer = step(
            api,
            "startStep",
            "StepRefInput",
            taskId=task["id"],
            stepIndex=0,
            expectedVersion=1,
            idempotencyKey="zoe-start-0",
        )
        assert answer["status"] == "RUNNING"
        rows = (
            "SELECT (SELECT coalesce(sum(stored_bytes), 0) FROM tasks WHERE user_id = 'zoe')"
            " + (SELECT coalesce(sum(stored_bytes), 0) FROM sessions WHERE user_id = 'zoe')"
        )
        keys = "SELECT coalesce(sum(stored_bytes), 0) FROM idempotency_keys WHERE user_id = 'zoe'"
        kept = query_value(server.database_url, keys)
        assert kept > ROW_BYTES + len("zoe-start-0") + 64  # the row, its key, a SHA-256
        assert usage(api) == query_value(server.database_url, rows) + kept
