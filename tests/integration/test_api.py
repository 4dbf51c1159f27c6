"""Every operation of the core API over HTTP, on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import pytest

from tests.support import SESSION, TASK, Api, Server, mutate, query_value


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def start_session(api: Api, **input: Any) -> dict[str, Any]:
    return mutate(api, "startSession", "StartSessionInput", SESSION, **input)


def update_session(api: Api, session_id: str, version: int, **input: Any) -> dict[str, Any]:
    return mutate(
        api,
        "updateSession",
        "UpdateSessionInput",
        SESSION,
        id=session_id,
        expectedVersion=version,
        **input,
    )


def create_task(
    api: Api, session_id: str, steps: int | list[dict[str, Any]] = 3, **input: Any
) -> dict[str, Any]:
    plan = [{"action": f"step-{i}"} for i in range(steps)] if isinstance(steps, int) else steps
    return mutate(
        api,
        "createTask",
        "CreateTaskInput",
        TASK,
        sessionId=session_id,
        goal=input.pop("goal", "book a trip"),
        steps=plan,
        **input,
    )


def step(api: Api, name: str, input_type: str, **input: Any) -> dict[str, Any]:
    return mutate(api, name, input_type, TASK, **input)


def checkpoint(api: Api, task_id: str, version: int, **input: Any) -> dict[str, Any]:
    return step(
        api,
        "checkpointTask",
        "CheckpointTaskInput",
        taskId=task_id,
        expectedVersion=version,
        **input,
    )


def set_status(api: Api, task_id: str, version: int, status: str, **input: Any) -> dict[str, Any]:
    return step(
        api,
        "setTaskStatus",
        "SetTaskStatusInput",
        taskId=task_id,
        expectedVersion=version,
        status=status,
        **input,
    )


def new_task(api: Api, steps: int = 3, **input: Any) -> dict[str, Any]:
    session = start_session(api)
    return create_task(api, session["id"], steps=steps, **input)


def events(api: Api, task_id: str) -> list[dict[str, Any]]:
    """Every event of the task, read a page of 100 (the most a list holds) at a time."""
    result: list[dict[str, Any]] = []
    while True:
        page = api(
            "query($id: ID!, $after: Int!) { task(id: $id) { ... on Task {"
            " events(afterSeq: $after, first: 100) { seq kind taskVersion stepIndex status"
            " steps { index status } task { version } } } } }",
            id=task_id,
            after=result[-1]["seq"] if result else 0,
        )["task"]["events"]
        result += page
        if len(page) < 100:
            return result


# ---------------------------------------------------------------- sessions


def test_start_session_defaults(alice: Api) -> None:
    s = start_session(alice, metadata={"channel": "web"})
    assert s["__typename"] == "AgentSession"
    assert (s["userId"], s["status"], s["version"], s["messageCount"]) == ("alice", "ACTIVE", 1, 0)
    assert s["ttlSeconds"] == 3600
    assert s["metadata"] == {"channel": "web"}
    created = datetime.fromisoformat(s["lastActiveAt"])
    assert (datetime.fromisoformat(s["expiresAt"]) - created).total_seconds() == 3600


def test_start_session_with_same_id_returns_it_unchanged(alice: Api) -> None:
    sid = uid("s")
    first = start_session(alice, id=sid, ttlSeconds=120, metadata={"a": 1})
    again = start_session(alice, id=sid, ttlSeconds=999, metadata={"a": 2})
    assert again == first


def test_two_users_may_choose_the_same_session_id(alice: Api, bob: Api) -> None:
    sid = uid("shared")
    a = start_session(alice, id=sid)
    b = start_session(bob, id=sid)
    assert (a["userId"], b["userId"]) == ("alice", "bob")


def test_update_session_bumps_version_and_counts_messages(alice: Api) -> None:
    s = start_session(alice)
    u = update_session(
        alice,
        s["id"],
        1,
        messageCountDelta=3,
        metadata={"topic": "trip"},
        status="PAUSED",
    )
    assert (u["version"], u["messageCount"], u["status"], u["metadata"]) == (
        2,
        3,
        "PAUSED",
        {"topic": "trip"},
    )
    assert u["lastActiveAt"] > s["lastActiveAt"]


def test_update_session_with_stale_version_answers_conflict(alice: Api) -> None:
    s = start_session(alice)
    update_session(alice, s["id"], 1)
    stale = update_session(alice, s["id"], 1)
    assert stale["__typename"] == "VersionConflict"
    assert (stale["code"], stale["expectedVersion"], stale["currentVersion"]) == (
        "VERSION_CONFLICT",
        1,
        2,
    )


def test_update_session_refuses_a_completed_session_coming_back(alice: Api) -> None:
    s = start_session(alice)
    done = update_session(
        alice,
        s["id"],
        1,
        status="COMPLETED",
    )
    assert done["status"] == "COMPLETED"
    back = update_session(
        alice,
        s["id"],
        2,
        status="ACTIVE",
    )
    assert (back["__typename"], back["from"], back["to"]) == (
        "InvalidTransition",
        "COMPLETED",
        "ACTIVE",
    )
    assert alice(
        "query($id: ID!) { session(id: $id) { ... on AgentSession { version } } }", id=s["id"]
    )["session"] == {"version": 2}


def test_update_session_refuses_negative_message_delta(alice: Api) -> None:
    s = start_session(alice)
    bad = update_session(
        alice,
        s["id"],
        1,
        messageCountDelta=-1,
    )
    assert (bad["__typename"], bad["field"]) == ("InvalidInput", "messageCountDelta")


DELETE = "mutation($id: ID!) { deleteSession(input: {id: $id}) { __typename %s } }"


def test_delete_session_removes_everything_below_it(server: Server, alice: Api) -> None:
    t = new_task(alice)
    step(alice, "startStep", "StepRefInput", taskId=t["id"], stepIndex=0, expectedVersion=1)
    pk = query_value(
        server.database_url,
        f"SELECT id FROM tasks WHERE user_id = 'alice' AND public_id = '{t['id']}'",
    )
    below = {
        "tasks": f"SELECT COUNT(*) FROM tasks WHERE id = {pk}",
        "steps": f"SELECT COUNT(*) FROM steps WHERE task_id = {pk}",
        "task_events": f"SELECT COUNT(*) FROM task_events WHERE task_id = {pk}",
    }
    counts = {name: query_value(server.database_url, sql) for name, sql in below.items()}
    assert counts == {"tasks": 1, "steps": 3, "task_events": 2}
    gone = alice(DELETE % "... on Deleted { id }", id=t["sessionId"])
    assert gone["deleteSession"] == {"__typename": "Deleted", "id": t["sessionId"]}
    counts = {name: query_value(server.database_url, sql) for name, sql in below.items()}
    assert counts == {"tasks": 0, "steps": 0, "task_events": 0}
    again = alice(DELETE % "... on NotFound { id }", id=t["sessionId"])
    assert again["deleteSession"] == {"__typename": "NotFound", "id": t["sessionId"]}
    assert alice("query($id: ID!) { task(id: $id) { __typename } }", id=t["id"])["task"] == {
        "__typename": "NotFound"
    }


def test_session_query_and_listing(alice: Api) -> None:
    s = start_session(alice)
    got = alice("query($id: ID!) { session(id: $id) { " + SESSION + " } }", id=s["id"])
    assert got["session"] == s
    create_task(alice, s["id"])
    create_task(alice, s["id"])
    data = alice(
        "query($id: ID!) { session(id: $id) { ... on AgentSession {"
        " tasks(first: 1) { edges { node { id } } pageInfo { hasNextPage } } } } }",
        id=s["id"],
    )
    assert data["session"]["tasks"]["pageInfo"]["hasNextPage"] is True


def test_sessions_are_listed_newest_first_with_cursors(bob: Api) -> None:
    ids = [start_session(bob, id=uid("page"))["id"] for _ in range(3)]
    seen: list[str] = []
    after = None
    while True:
        page = bob(
            "query($after: String) { sessions(first: 2, after: $after) {"
            " edges { cursor node { id } } pageInfo { hasNextPage endCursor } } }",
            after=after,
        )["sessions"]
        seen += [e["node"]["id"] for e in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert seen[:3] == list(reversed(ids))
    assert len(seen) == len(set(seen))


def test_sessions_filter_by_status(alice: Api) -> None:
    s = start_session(alice)
    update_session(
        alice,
        s["id"],
        1,
        status="PAUSED",
    )
    paused = alice("{ sessions(status: PAUSED, first: 100) { edges { node { id status } } } }")
    nodes = [e["node"] for e in paused["sessions"]["edges"]]
    assert {"id": s["id"], "status": "PAUSED"} in nodes
    assert {n["status"] for n in nodes} == {"PAUSED"}


# ---------------------------------------------------------------- tasks


def test_create_task_plans_steps_and_logs_one_event(alice: Api) -> None:
    s = start_session(alice)
    t = create_task(
        alice,
        s["id"],
        steps=[
            {"action": "search", "input": {"q": "flights"}},
            {"action": "book", "idempotent": False},
        ],
    )
    assert (t["status"], t["version"], t["eventSeq"], t["currentStep"], t["totalSteps"]) == (
        "PLANNED",
        1,
        1,
        0,
        2,
    )
    assert [(x["index"], x["action"], x["status"], x["idempotent"]) for x in t["steps"]] == [
        (0, "search", "PENDING", True),
        (1, "book", "PENDING", False),
    ]
    assert t["steps"][0]["input"] == {"q": "flights"}
    assert events(alice, t["id"]) == [
        {
            "seq": 1,
            "kind": "TASK_CREATED",
            "taskVersion": 1,
            "stepIndex": None,
            "status": "PLANNED",
            "steps": [{"index": 0, "status": "PENDING"}, {"index": 1, "status": "PENDING"}],
            "task": None,
        }
    ]


def test_create_task_with_same_id_and_content_returns_it_unchanged(alice: Api) -> None:
    s = start_session(alice)
    tid = uid("t")
    first = create_task(alice, s["id"], id=tid)
    again = create_task(alice, s["id"], id=tid)
    assert again == first
    assert len(events(alice, tid)) == 1


def test_drive_a_task_through_its_steps(alice: Api) -> None:
    t = new_task(alice, steps=2)
    tid = t["id"]
    t = step(alice, "startStep", "StepRefInput", taskId=tid, stepIndex=0, expectedVersion=1)
    assert (t["status"], t["version"], t["steps"][0]["status"], t["steps"][0]["attempts"]) == (
        "RUNNING",
        2,
        "RUNNING",
        1,
    )
    assert t["steps"][0]["startedAt"] is not None
    t = step(
        alice,
        "completeStep",
        "CompleteStepInput",
        taskId=tid,
        stepIndex=0,
        expectedVersion=2,
        output={"flights": 3},
    )
    assert (t["currentStep"], t["steps"][0]["status"], t["steps"][0]["output"]) == (
        1,
        "SUCCESS",
        {"flights": 3},
    )
    t = step(alice, "startStep", "StepRefInput", taskId=tid, stepIndex=1, expectedVersion=3)
    t = step(alice, "completeStep", "CompleteStepInput", taskId=tid, stepIndex=1, expectedVersion=4)
    assert (t["status"], t["version"], t["currentStep"], t["eventSeq"]) == ("COMPLETED", 5, 2, 5)
    assert [
        (e["seq"], e["kind"], e["taskVersion"], e["stepIndex"]) for e in events(alice, tid)
    ] == [
        (1, "TASK_CREATED", 1, None),
        (2, "STEP_STARTED", 2, 0),
        (3, "STEP_SUCCEEDED", 3, 0),
        (4, "STEP_STARTED", 4, 1),
        (5, "STEP_SUCCEEDED", 5, 1),
    ]
    last = events(alice, tid)[-1]
    assert (last["status"], last["steps"]) == ("COMPLETED", [{"index": 1, "status": "SUCCESS"}])


def test_fail_step_fails_the_task(alice: Api) -> None:
    t = new_task(alice)
    tid = t["id"]
    step(alice, "startStep", "StepRefInput", taskId=tid, stepIndex=0, expectedVersion=1)
    t = step(
        alice,
        "failStep",
        "FailStepInput",
        taskId=tid,
        stepIndex=0,
        expectedVersion=2,
        error="timeout",
    )
    assert (t["status"], t["steps"][0]["status"], t["steps"][0]["error"]) == (
        "FAILED",
        "FAILED",
        "timeout",
    )
    assert events(alice, tid)[-1]["kind"] == "STEP_FAILED"


def test_complete_a_pending_step_is_an_invalid_transition(alice: Api) -> None:
    t = new_task(alice)
    r = step(
        alice, "completeStep", "CompleteStepInput", taskId=t["id"], stepIndex=0, expectedVersion=1
    )
    assert (r["__typename"], r["code"], r["from"], r["to"]) == (
        "InvalidTransition",
        "INVALID_TRANSITION",
        "PENDING",
        "SUCCESS",
    )
    assert len(events(alice, t["id"])) == 1


def test_checkpoint_applies_a_batch_as_one_version(alice: Api) -> None:
    t = new_task(alice, steps=3)
    r = checkpoint(
        alice,
        t["id"],
        1,
        steps=[
            {"index": 0, "status": "SUCCESS", "output": {"n": 1}},
            {"index": 1, "status": "RUNNING"},
        ],
    )
    assert (r["version"], r["status"], r["currentStep"], r["eventSeq"]) == (2, "RUNNING", 1, 2)
    assert [x["status"] for x in r["steps"]] == ["SUCCESS", "RUNNING", "PENDING"]
    assert r["steps"][0]["attempts"] == 1
    assert events(alice, t["id"])[-1]["kind"] == "CHECKPOINT"


def test_checkpoint_with_one_refused_patch_changes_nothing(alice: Api) -> None:
    t = new_task(alice, steps=2)
    ok = checkpoint(
        alice,
        t["id"],
        1,
        steps=[{"index": 0, "status": "SUCCESS"}],
    )
    refused = checkpoint(
        alice,
        t["id"],
        2,
        steps=[{"index": 1, "status": "SUCCESS"}, {"index": 0, "status": "PENDING"}],
    )
    assert (refused["__typename"], refused["from"], refused["to"]) == (
        "InvalidTransition",
        "SUCCESS",
        "PENDING",
    )
    now = alice("query($id: ID!) { task(id: $id) { " + TASK + " } }", id=t["id"])["task"]
    assert now == ok


def test_checkpoint_finishing_every_step_completes_the_task(alice: Api) -> None:
    t = new_task(alice, steps=2)
    r = checkpoint(
        alice,
        t["id"],
        1,
        steps=[{"index": 0, "status": "SUCCESS"}, {"index": 1, "status": "SKIPPED"}],
    )
    assert (r["status"], r["currentStep"], r["version"]) == ("COMPLETED", 2, 2)


def test_add_steps_appends_to_the_plan(alice: Api) -> None:
    t = new_task(alice, steps=1)
    r = step(
        alice,
        "addSteps",
        "AddStepsInput",
        taskId=t["id"],
        expectedVersion=1,
        steps=[{"action": "compare"}, {"action": "pay", "idempotent": False}],
    )
    assert (r["totalSteps"], r["version"]) == (3, 2)
    assert [(x["index"], x["action"], x["idempotent"]) for x in r["steps"]] == [
        (0, "step-0", True),
        (1, "compare", True),
        (2, "pay", False),
    ]
    assert events(alice, t["id"])[-1] == {
        "seq": 2,
        "kind": "STEPS_ADDED",
        "taskVersion": 2,
        "stepIndex": 1,
        "status": "PLANNED",
        "steps": [{"index": 1, "status": "PENDING"}, {"index": 2, "status": "PENDING"}],
        "task": None,
    }


def test_set_task_status_follows_the_machine(alice: Api) -> None:
    t = new_task(alice)
    r = set_status(alice, t["id"], 1, "CANCELLED")
    assert (r["status"], r["version"]) == ("CANCELLED", 2)
    again = set_status(alice, t["id"], 2, "RUNNING")
    assert (again["__typename"], again["from"], again["to"]) == (
        "InvalidTransition",
        "CANCELLED",
        "RUNNING",
    )
    refused = step(
        alice, "startStep", "StepRefInput", taskId=t["id"], stepIndex=0, expectedVersion=2
    )
    assert refused["__typename"] == "InvalidTransition"
    assert events(alice, t["id"])[-1]["kind"] == "TASK_STATUS_CHANGED"


def test_task_cannot_be_set_completed_with_work_left(alice: Api) -> None:
    t = new_task(alice)
    r = set_status(alice, t["id"], 1, "COMPLETED")
    assert (r["__typename"], r["from"], r["to"]) == ("InvalidTransition", "PLANNED", "COMPLETED")


def test_stale_step_write_answers_conflict_with_current_version(alice: Api) -> None:
    t = new_task(alice)
    step(alice, "startStep", "StepRefInput", taskId=t["id"], stepIndex=0, expectedVersion=1)
    r = step(alice, "startStep", "StepRefInput", taskId=t["id"], stepIndex=1, expectedVersion=1)
    assert (r["__typename"], r["expectedVersion"], r["currentVersion"]) == (
        "VersionConflict",
        1,
        2,
    )
    assert len(events(alice, t["id"])) == 2


def test_tasks_listing_filters_by_session_and_status(alice: Api) -> None:
    s = start_session(alice)
    a = create_task(alice, s["id"])
    b = create_task(alice, s["id"])
    step(alice, "startStep", "StepRefInput", taskId=b["id"], stepIndex=0, expectedVersion=1)
    q = (
        "query($s: ID, $st: TaskStatus) { tasks(sessionId: $s, status: $st) {"
        " edges { node { id status } } } }"
    )
    every = [e["node"]["id"] for e in alice(q, s=s["id"], st=None)["tasks"]["edges"]]
    running = [e["node"]["id"] for e in alice(q, s=s["id"], st="RUNNING")["tasks"]["edges"]]
    assert every == [b["id"], a["id"]]
    assert running == [b["id"]]
    assert alice(q, s="no-such-session", st=None)["tasks"]["edges"] == []


def test_task_session_field(alice: Api) -> None:
    t = new_task(alice)
    got = alice(
        "query($id: ID!) { task(id: $id) { ... on Task { session { id userId } } } }", id=t["id"]
    )
    assert got["task"]["session"] == {"id": t["sessionId"], "userId": "alice"}


def test_writes_in_a_session_move_its_last_active_time(alice: Api) -> None:
    s = start_session(alice)
    t = create_task(alice, s["id"])
    step(alice, "startStep", "StepRefInput", taskId=t["id"], stepIndex=0, expectedVersion=1)
    after = alice("query($id: ID!) { session(id: $id) { " + SESSION + " } }", id=s["id"])["session"]
    assert after["lastActiveAt"] > s["lastActiveAt"]
    assert after["version"] == 1


# ---------------------------------------------------------------- isolation


@pytest.mark.parametrize(
    ("query", "variables"),
    [
        ("query($id: ID!) { session(id: $id) { __typename ... on NotFound { id } } }", "session"),
        ("query($id: ID!) { task(id: $id) { __typename ... on NotFound { id } } }", "task"),
    ],
)
def test_someone_elses_ids_answer_like_unknown_ids(
    alice: Api, bob: Api, query: str, variables: str
) -> None:
    t = new_task(alice)
    target = t["sessionId"] if variables == "session" else t["id"]
    theirs = bob(query, id=target)
    unknown = bob(query, id="never-made")
    assert theirs[variables]["__typename"] == unknown[variables]["__typename"] == "NotFound"


def test_someone_else_cannot_write_or_delete(alice: Api, bob: Api) -> None:
    t = new_task(alice)
    r = step(bob, "startStep", "StepRefInput", taskId=t["id"], stepIndex=0, expectedVersion=1)
    assert (r["__typename"], r["id"]) == ("NotFound", t["id"])
    u = update_session(bob, t["sessionId"], 1)
    assert u["__typename"] == "NotFound"
    c = create_task(bob, t["sessionId"])
    assert c["__typename"] == "NotFound"
    d = bob(
        "mutation($id: ID!) { deleteSession(input: {id: $id}) { __typename } }", id=t["sessionId"]
    )
    assert d["deleteSession"]["__typename"] == "NotFound"
    bobs = bob("{ tasks(first: 100) { edges { node { id } } } }")["tasks"]["edges"]
    assert t["id"] not in [e["node"]["id"] for e in bobs]
    mine = alice("query($id: ID!) { task(id: $id) { " + TASK + " } }", id=t["id"])["task"]
    assert mine == t


@pytest.mark.parametrize("value", ["done", "42", "", 7, 2.5, True, [1, "a", None], {"k": "v"}])
def test_json_values_of_every_kind_round_trip(alice: Api, value: Any) -> None:
    s = start_session(alice, metadata=value)
    assert s["metadata"] == value
    assert update_session(alice, s["id"], 1, metadata=value)["metadata"] == value
    t = create_task(alice, s["id"], steps=[{"action": "a", "input": value}])
    assert t["steps"][0]["input"] == value
    step(alice, "startStep", "StepRefInput", taskId=t["id"], stepIndex=0, expectedVersion=1)
    done = step(
        alice,
        "completeStep",
        "CompleteStepInput",
        taskId=t["id"],
        stepIndex=0,
        expectedVersion=2,
        output=value,
    )
    assert done["steps"][0]["output"] == value
    assert events(alice, t["id"])[-1]["kind"] == "STEP_SUCCEEDED"
    result = alice(
        "mutation($i: RecordToolCallInput!) { recordToolCall(input: $i) {"
        " ... on ToolState { lastResult } } }",
        i={"taskId": t["id"], "toolName": "x", "outcome": "SUCCESS", "result": value},
    )
    assert result["recordToolCall"]["lastResult"] == value


def test_a_task_id_that_exists_answers_that_task_only_for_the_same_content(alice: Api) -> None:
    """Guards createTask's client-chosen id: sent again with the same session, goal
    and plan it answers the task as it stands (idempotent, even after it moved on);
    with another session, goal or plan it is InvalidInput on ``id`` and writes
    nothing (it once answered the other task as if it were the one asked for)."""
    session = start_session(alice)["id"]
    other_session = start_session(alice)["id"]
    plan: list[dict[str, Any]] = [
        {"action": "search", "input": {"q": 1}},
        {"action": "pay", "idempotent": False},
    ]
    task_id = f"chosen-{uuid.uuid4().hex[:8]}"
    made = create_task(alice, session, plan, goal="trip", id=task_id)
    moved = step(alice, "startStep", "StepRefInput", taskId=task_id, stepIndex=0, expectedVersion=1)
    again = create_task(alice, session, plan, goal="trip", id=task_id)
    assert (again["id"], again["version"]) == (task_id, moved["version"])
    different = [
        {"sessionId": other_session},
        {"goal": "another trip"},
        {"steps": plan[:1]},
        {"steps": [plan[0], {"action": "pay"}]},
        {"steps": [{"action": "search", "input": {"q": 2}}, plan[1]]},
    ]
    fields = "__typename ... on InvalidInput { field message }"
    for change in different:
        input = {"sessionId": session, "goal": "trip", "steps": plan, "id": task_id} | change
        refused = mutate(alice, "createTask", "CreateTaskInput", fields, **input)
        assert (refused["__typename"], refused["field"]) == ("InvalidInput", "id"), change
    assert made["version"] == 1
    assert events(alice, task_id)[-1]["seq"] == 2, "the refusals wrote nothing"
