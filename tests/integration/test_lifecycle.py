"""Resume after a crash, decisions, leases with fencing tokens, tool states: over HTTP."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.integration.test_api import checkpoint, events, new_task, set_status, step
from tests.support import LEASE_PROBLEM, PROBLEM, TASK, TASK_FIELDS, Api, mutate, wait_until

PLAN = (
    "__typename ... on ResumePlan { resumeFrom needsDecision stepsInDoubt task {"
    + TASK_FIELDS
    + """} }
  ... on Problem { code message }
  ... on NotFound { id }
  ... on VersionConflict { expectedVersion currentVersion }
  ... on InvalidTransition { from to }
  ... on SessionExpired { sessionId }
"""
    + LEASE_PROBLEM
)
LOCK = """
  __typename
  ... on TaskLock { taskId holderId fencingToken expiresAt }
  ... on Problem { code message }
  ... on NotFound { id }
  ... on InvalidInput { field }
  ... on SessionExpired { sessionId }
  ... on LockHeld { holderId expiresAt }
"""
TOOL = (
    "... on ToolState { taskId toolName status version retryCount maxRetries lastResult"
    " lastError rateLimitResetAt }" + PROBLEM + LEASE_PROBLEM
)


def resume(api: Api, task_id: str, **input: Any) -> dict[str, Any]:
    return mutate(api, "resumeTask", "ResumeTaskInput", PLAN, taskId=task_id, **input)


def acquire(api: Api, task_id: str, holder: str, ttl: int = 60) -> dict[str, Any]:
    return mutate(
        api,
        "acquireTaskLock",
        "AcquireTaskLockInput",
        LOCK,
        taskId=task_id,
        holderId=holder,
        ttlSeconds=ttl,
    )


def tool(
    api: Api, task_id: str, outcome: str, name: str = "flights", **input: Any
) -> dict[str, Any]:
    return mutate(
        api,
        "recordToolCall",
        "RecordToolCallInput",
        TOOL,
        taskId=task_id,
        toolName=name,
        outcome=outcome,
        **input,
    )


def task_now(api: Api, task_id: str) -> dict[str, Any]:
    task: dict[str, Any] = api("query($id: ID!) { task(id: $id) { " + TASK + " } }", id=task_id)[
        "task"
    ]
    return task


def at_second_step(api: Api, status: str, idempotent: bool) -> dict[str, Any]:
    """A task whose step 0 succeeded and whose step 1 is ``status``."""
    created = mutate(
        api,
        "createTask",
        "CreateTaskInput",
        TASK,
        sessionId=new_task(api, steps=1)["sessionId"],
        goal="resume me",
        steps=[{"action": "search"}, {"action": "book", "idempotent": idempotent}],
    )
    patches = [{"index": 0, "status": "SUCCESS"}]
    if status != "PENDING":
        patches.append({"index": 1, "status": status})
    result = checkpoint(
        api,
        created["id"],
        1,
        steps=patches,
    )
    assert result["__typename"] == "Task", result
    return result


# status of step 1, idempotent -> resumeFrom, needsDecision, step 1 after, task after, event
RESUME_TABLE = [
    ("PENDING", True, 1, False, "PENDING", "RUNNING", None),
    ("PENDING", False, 1, False, "PENDING", "RUNNING", None),
    ("RUNNING", True, 1, False, "PENDING", "RUNNING", "STEP_RESET"),
    ("RUNNING", False, None, True, "IN_DOUBT", "AWAITING_DECISION", "TASK_STATUS_CHANGED"),
    ("FAILED", True, 1, False, "PENDING", "RUNNING", "STEP_RESET"),
    ("FAILED", False, 1, False, "PENDING", "RUNNING", "STEP_RESET"),
    ("SUCCESS", True, None, False, "SUCCESS", "COMPLETED", None),
    ("SUCCESS", False, None, False, "SUCCESS", "COMPLETED", None),
    ("SKIPPED", True, None, False, "SKIPPED", "COMPLETED", None),
    ("SKIPPED", False, None, False, "SKIPPED", "COMPLETED", None),
]


@pytest.mark.parametrize(
    ("status", "idempotent", "resume_from", "needs_decision", "step_after", "task_after", "event"),
    RESUME_TABLE,
)
def test_resume_plan(
    alice: Api,
    status: str,
    idempotent: bool,
    resume_from: int | None,
    needs_decision: bool,
    step_after: str,
    task_after: str,
    event: str | None,
) -> None:
    before = at_second_step(alice, status, idempotent)
    plan = resume(alice, before["id"])
    assert (plan["resumeFrom"], plan["needsDecision"]) == (resume_from, needs_decision)
    assert plan["stepsInDoubt"] == ([1] if needs_decision else [])
    after = plan["task"]
    assert (after["steps"][1]["status"], after["status"]) == (step_after, task_after)
    assert after["steps"][1]["attempts"] == before["steps"][1]["attempts"]
    log = events(alice, before["id"])
    if event is None:
        assert (after["version"], len(log)) == (before["version"], before["eventSeq"])
    else:
        assert after["version"] == before["version"] + 1
        assert log[-1]["kind"] == event
    again = resume(alice, before["id"])
    assert again["task"]["version"] == after["version"], "a second resume changes nothing"
    assert (again["resumeFrom"], again["needsDecision"]) == (resume_from, needs_decision)


def test_resume_refuses_a_cancelled_task_and_a_stale_version(alice: Api) -> None:
    task = new_task(alice)
    stale = resume(alice, task["id"], expectedVersion=7)
    assert (stale["__typename"], stale["currentVersion"]) == ("VersionConflict", 1)
    set_status(alice, task["id"], 1, "CANCELLED")
    refused = resume(alice, task["id"])
    assert (refused["__typename"], refused["from"], refused["to"]) == (
        "InvalidTransition",
        "CANCELLED",
        "RUNNING",
    )


@pytest.mark.parametrize(
    ("decision", "step_after"), [("RETRY", "PENDING"), ("SKIP", "SKIPPED"), ("COMPLETE", "SUCCESS")]
)
def test_decide_step_resolves_a_step_in_doubt(alice: Api, decision: str, step_after: str) -> None:
    task = at_second_step(alice, "RUNNING", idempotent=False)
    plan = resume(alice, task["id"])
    version = plan["task"]["version"]
    decided = step(
        alice,
        "decideStep",
        "DecideStepInput",
        taskId=task["id"],
        stepIndex=1,
        expectedVersion=version,
        decision=decision,
        output={"booked": "AF 123"},
    )
    assert decided["steps"][1]["status"] == step_after
    expected_output = {"booked": "AF 123"} if step_after == "SUCCESS" else None
    assert decided["steps"][1]["output"] == expected_output
    assert decided["steps"][1]["attempts"] == 1, "a decision is not another attempt"
    assert decided["status"] == ("RUNNING" if decision == "RETRY" else "COMPLETED")
    kinds = {"RETRY": "STEP_RESET", "SKIP": "STEP_SKIPPED", "COMPLETE": "STEP_SUCCEEDED"}
    assert events(alice, task["id"])[-1]["kind"] == kinds[decision]
    second_device = step(
        alice,
        "decideStep",
        "DecideStepInput",
        taskId=task["id"],
        stepIndex=1,
        expectedVersion=version,
        decision="SKIP",
    )
    assert (second_device["__typename"], second_device["currentVersion"]) == (
        "VersionConflict",
        version + 1,
    )


def parallel(api: Api, idempotent: list[bool]) -> dict[str, Any]:
    """A task whose steps all run at once, as when an agent calls tools in parallel."""
    created = mutate(
        api,
        "createTask",
        "CreateTaskInput",
        TASK,
        sessionId=new_task(api, steps=1)["sessionId"],
        goal="parallel",
        steps=[{"action": f"call-{i}", "idempotent": safe} for i, safe in enumerate(idempotent)],
    )
    patches = [{"index": i, "status": "RUNNING"} for i in range(len(idempotent))]
    running = checkpoint(api, created["id"], 1, steps=patches)
    assert running["__typename"] == "Task", running
    return running


@pytest.mark.parametrize(
    "idempotent",
    [list(mix) for n in (2, 3) for mix in itertools.product([True, False], repeat=n)],
    ids=lambda mix: "".join("i" if safe else "N" for safe in mix),
)
def test_resume_examines_every_running_step(alice: Api, idempotent: list[bool]) -> None:
    """Guards resume with parallel steps: every RUNNING step is reset when it is safe
    to repeat and IN_DOUBT when it is not, in one write; the task waits for a decision
    while any step is in doubt."""
    task = parallel(alice, idempotent)
    plan = resume(alice, task["id"])
    in_doubt = [i for i, safe in enumerate(idempotent) if not safe]
    statuses = [s["status"] for s in plan["task"]["steps"]]
    assert statuses == ["PENDING" if safe else "IN_DOUBT" for safe in idempotent]
    assert (plan["stepsInDoubt"], plan["needsDecision"]) == (in_doubt, bool(in_doubt))
    assert plan["resumeFrom"] == (None if in_doubt else 0)
    assert plan["task"]["status"] == ("AWAITING_DECISION" if in_doubt else "RUNNING")
    assert plan["task"]["version"] == task["version"] + 1, "one write"
    assert [s["attempts"] for s in plan["task"]["steps"]] == [1] * len(idempotent)


def test_the_task_waits_until_every_step_in_doubt_is_decided(alice: Api) -> None:
    """Guards the decision rule: deciding one of two steps in doubt leaves the task
    AWAITING_DECISION; the second decision lets it go on."""
    task = parallel(alice, [False, True, False])
    plan = resume(alice, task["id"])
    assert plan["stepsInDoubt"] == [0, 2]
    version = plan["task"]["version"]
    first = step(
        alice,
        "decideStep",
        "DecideStepInput",
        taskId=task["id"],
        stepIndex=2,
        expectedVersion=version,
        decision="COMPLETE",
        output="charged",
    )
    assert (first["status"], first["steps"][2]["output"]) == ("AWAITING_DECISION", "charged")
    started = step(
        alice,
        "startStep",
        "StepRefInput",
        taskId=task["id"],
        stepIndex=1,
        expectedVersion=version + 1,
    )
    assert (started["__typename"], started["to"]) == ("InvalidTransition", "RUNNING")
    second = step(
        alice,
        "decideStep",
        "DecideStepInput",
        taskId=task["id"],
        stepIndex=0,
        expectedVersion=version + 1,
        decision="RETRY",
    )
    assert second["status"] == "RUNNING"
    assert [s["status"] for s in second["steps"]] == ["PENDING", "PENDING", "SUCCESS"]
    again = resume(alice, task["id"])
    assert (again["resumeFrom"], again["stepsInDoubt"]) == (0, [])


def test_only_a_decision_takes_a_step_out_of_doubt(alice: Api) -> None:
    """Nothing but decideStep moves an IN_DOUBT step, and nothing moves a step
    RUNNING -> RUNNING; COMPLETE is for steps in doubt only."""
    task = parallel(alice, [False, True])
    again = [{"index": 1, "status": "RUNNING"}]
    refused_again = checkpoint(alice, task["id"], task["version"], steps=again)
    assert (refused_again["__typename"], refused_again["from"], refused_again["to"]) == (
        "InvalidTransition",
        "RUNNING",
        "RUNNING",
    )
    complete_running = step(
        alice,
        "decideStep",
        "DecideStepInput",
        taskId=task["id"],
        stepIndex=1,
        expectedVersion=task["version"],
        decision="COMPLETE",
    )
    assert (complete_running["__typename"], complete_running["from"]) == (
        "InvalidTransition",
        "RUNNING",
    )
    plan = resume(alice, task["id"])
    version = plan["task"]["version"]
    for patch in ({"index": 0, "status": "SUCCESS"}, {"index": 0, "status": "PENDING"}):
        refused = checkpoint(alice, task["id"], version, steps=[patch])
        assert (refused["__typename"], refused["from"]) == ("InvalidTransition", "IN_DOUBT")
    for name, input_type in (("completeStep", "CompleteStepInput"), ("failStep", "FailStepInput")):
        extra = {"error": "x"} if name == "failStep" else {}
        refused = step(
            alice,
            name,
            input_type,
            taskId=task["id"],
            stepIndex=0,
            expectedVersion=version,
            **extra,
        )
        assert (refused["__typename"], refused["from"]) == ("InvalidTransition", "IN_DOUBT")


# ---------------------------------------------------------------- leases


def test_lease_lifecycle_and_fencing(alice: Api) -> None:
    task = new_task(alice, steps=2)
    tid = task["id"]
    first = acquire(alice, tid, "worker-a")
    assert (first["__typename"], first["holderId"], first["fencingToken"]) == (
        "TaskLock",
        "worker-a",
        1,
    )
    seq = task_now(alice, tid)["eventSeq"]
    assert events(alice, tid)[-1]["kind"] == "LOCK_ACQUIRED"
    again = acquire(alice, tid, "worker-a", ttl=120)
    assert again["fencingToken"] == 1
    assert again["expiresAt"] > first["expiresAt"]
    assert task_now(alice, tid)["eventSeq"] == seq, "extending one's own lease logs nothing"
    held = acquire(alice, tid, "worker-b")
    assert (held["__typename"], held["holderId"]) == ("LockHeld", "worker-a")
    blind = step(alice, "startStep", "StepRefInput", taskId=tid, stepIndex=0, expectedVersion=1)
    assert (blind["__typename"], blind["holderId"]) == ("LockHeld", "worker-a")
    fenced = step(
        alice,
        "startStep",
        "StepRefInput",
        taskId=tid,
        stepIndex=0,
        expectedVersion=1,
        fencingToken=1,
    )
    assert (fenced["__typename"], fenced["lock"]) == ("Task", {"holderId": "worker-a"})
    renewed = mutate(
        alice,
        "renewTaskLock",
        "RenewTaskLockInput",
        LOCK,
        taskId=tid,
        holderId="worker-a",
        ttlSeconds=300,
    )
    assert renewed["expiresAt"] > again["expiresAt"]
    not_mine = mutate(
        alice,
        "renewTaskLock",
        "RenewTaskLockInput",
        LOCK,
        taskId=tid,
        holderId="worker-b",
        ttlSeconds=5,
    )
    assert not_mine["__typename"] == "LockNotHeld"
    released = alice(
        "mutation($i: ReleaseTaskLockInput!) { releaseTaskLock(input: $i) { __typename"
        " ... on Task { lock { holderId } } } }",
        i={"taskId": tid, "holderId": "worker-a"},
    )["releaseTaskLock"]
    assert released == {"__typename": "Task", "lock": None}
    assert events(alice, tid)[-1]["kind"] == "LOCK_RELEASED"
    second = acquire(alice, tid, "worker-b")
    assert second["fencingToken"] == 2
    stale = step(
        alice,
        "completeStep",
        "CompleteStepInput",
        taskId=tid,
        stepIndex=0,
        expectedVersion=2,
        fencingToken=1,
    )
    assert (stale["__typename"], stale["currentToken"]) == ("StaleFencingToken", 2)
    tool_write = tool(alice, tid, "CALLING", fencingToken=1)
    assert tool_write["__typename"] == "StaleFencingToken"
    unleased_tool = tool(alice, tid, "CALLING")
    assert unleased_tool["__typename"] == "LockHeld"


def test_an_expired_lease_is_as_good_as_released(alice: Api) -> None:
    task = new_task(alice)
    assert acquire(alice, task["id"], "short", ttl=1)["fencingToken"] == 1
    wait_until(lambda: task_now(alice, task["id"])["lock"] is None, 10, "the lease to lapse")
    free = step(
        alice, "startStep", "StepRefInput", taskId=task["id"], stepIndex=0, expectedVersion=1
    )
    assert free["__typename"] == "Task"
    assert acquire(alice, task["id"], "next")["fencingToken"] == 2
    lapsed = mutate(
        alice,
        "renewTaskLock",
        "RenewTaskLockInput",
        LOCK,
        taskId=task["id"],
        holderId="short",
        ttlSeconds=5,
    )
    assert lapsed["__typename"] == "LockNotHeld"


@pytest.mark.parametrize(("ttl", "holder", "field"), [(0, "w", "ttlSeconds"), (10, "", "holderId")])
def test_bad_lease_input(alice: Api, ttl: int, holder: str, field: str) -> None:
    task = new_task(alice)
    bad = acquire(alice, task["id"], holder, ttl=ttl)
    assert (bad["__typename"], bad["field"]) == ("InvalidInput", field)


# ---------------------------------------------------------------- tool states


def test_tool_state_machine(alice: Api) -> None:
    task = new_task(alice)
    tid = task["id"]
    calling = tool(alice, tid, "CALLING", maxRetries=2)
    assert (calling["status"], calling["version"], calling["maxRetries"]) == ("CALLING", 1, 2)
    first = tool(alice, tid, "FAILURE", error="502")
    assert (first["status"], first["retryCount"], first["lastError"]) == ("RETRYING", 1, "502")
    second = tool(alice, tid, "FAILURE", error="503")
    assert (second["status"], second["retryCount"]) == ("FAILED", 2)
    ok = tool(alice, tid, "SUCCESS", result={"flights": 4})
    assert (ok["status"], ok["retryCount"], ok["lastResult"], ok["version"]) == (
        "SUCCESS",
        0,
        {"flights": 4},
        4,
    )
    limited = tool(alice, tid, "RATE_LIMITED", retryAfterSeconds=120)
    assert (limited["status"], limited["rateLimitResetAt"] is not None) == ("RETRYING", True)
    blocked = tool(alice, tid, "CALLING")
    assert (blocked["__typename"], blocked["to"]) == ("InvalidTransition", "CALLING")
    stale = tool(alice, tid, "SUCCESS", expectedVersion=1)
    assert (stale["__typename"], stale["currentVersion"]) == ("VersionConflict", 5)
    now = task_now(alice, tid)
    assert now["version"] == 1, "tool states leave the task's version alone"
    assert now["toolStates"] == [{"toolName": "flights"}]
    log = events(alice, tid)
    assert [e["kind"] for e in log[1:]] == ["TOOL_STATE_CHANGED"] * 5
    assert {e["taskVersion"] for e in log} == {1}


@pytest.mark.parametrize(
    ("input", "field"),
    [
        ({"outcome": "RATE_LIMITED"}, "retryAfterSeconds"),
        ({"outcome": "CALLING", "maxRetries": -1}, "maxRetries"),
        ({"outcome": "CALLING", "name": ""}, "toolName"),
    ],
)
def test_bad_tool_input(alice: Api, input: dict[str, Any], field: str) -> None:
    task = new_task(alice)
    bad = tool(alice, task["id"], **input)
    assert (bad["__typename"], bad["field"]) == ("InvalidInput", field)


def test_a_reset_keeps_the_output_a_step_had(alice: Api) -> None:
    task = new_task(alice, steps=2)
    partial = checkpoint(
        alice,
        task["id"],
        1,
        steps=[{"index": 0, "status": "RUNNING", "output": {"partial": 1}}],
    )
    assert partial["steps"][0]["output"] == {"partial": 1}
    plan = resume(alice, task["id"])
    assert plan["task"]["steps"][0]["status"] == "PENDING"
    assert plan["task"]["steps"][0]["output"] == {"partial": 1}


AUDIT = (
    "query($id: ID!) { task(id: $id) { ... on Task { id"
    " steps { id index } events(first: 100) { seq kind actor holder note steps { id } } } } }"
)


def test_every_event_names_who_wrote_it_and_a_decision_keeps_its_reason(alice: Api) -> None:
    """Guards the audit trail: each event carries ``actor`` (the token's user), a write
    under a lease also the lease ``holder``, and decideStep's event the person's
    ``note``; a note over 1,000 characters is InvalidInput and writes nothing. Steps
    are identified as "<taskId>:<index>", in a task and in its events alike."""
    task = at_second_step(alice, "RUNNING", idempotent=False)
    lock = acquire(alice, task["id"], "worker-7")
    plan = resume(alice, task["id"], fencingToken=lock["fencingToken"])
    release = mutate(
        alice,
        "releaseTaskLock",
        "ReleaseTaskLockInput",
        "__typename",
        taskId=task["id"],
        holderId="worker-7",
    )
    assert release["__typename"] == "Task"
    version = plan["task"]["version"]
    decide = {"taskId": task["id"], "stepIndex": 1, "expectedVersion": version}
    too_long = step(
        alice, "decideStep", "DecideStepInput", **decide, decision="RETRY", note="x" * 1001
    )
    assert (too_long["__typename"], too_long["field"]) == ("InvalidInput", "note")
    reason = "it never reached the airline"
    step(alice, "decideStep", "DecideStepInput", **decide, decision="RETRY", note=reason)

    read = alice(AUDIT, id=task["id"])["task"]
    assert [s["id"] for s in read["steps"]] == [f"{task['id']}:0", f"{task['id']}:1"]
    rows = [(e["kind"], e["actor"], e["holder"], e["note"]) for e in read["events"]]
    assert rows[-4:] == [
        ("LOCK_ACQUIRED", "alice", None, None),
        ("TASK_STATUS_CHANGED", "alice", "worker-7", None),
        ("LOCK_RELEASED", "alice", None, None),
        ("STEP_RESET", "alice", None, reason),
    ]
    assert all(actor == "alice" for _, actor, _, _ in rows)
    assert read["events"][-1]["steps"] == [{"id": f"{task['id']}:1"}]


def test_a_decision_on_a_finished_step_says_so_not_that_its_task_is_final(alice: Api) -> None:
    """Guards the order of decideStep's checks: the step is judged first. On a
    COMPLETED task, deciding its SUCCESS step once answered "task cannot go from
    COMPLETED to RUNNING", which says nothing of the step the person picked."""
    task = at_second_step(alice, "SUCCESS", idempotent=False)
    assert task["status"] == "COMPLETED"
    fields = "__typename ... on InvalidTransition { from to message }"
    for decision, target in (("RETRY", "PENDING"), ("SKIP", "SKIPPED"), ("COMPLETE", "SUCCESS")):
        refused = mutate(
            alice,
            "decideStep",
            "DecideStepInput",
            fields,
            taskId=task["id"],
            stepIndex=1,
            expectedVersion=task["version"],
            decision=decision,
        )
        assert (refused["__typename"], refused["from"], refused["to"]) == (
            "InvalidTransition",
            "SUCCESS",
            target,
        ), decision
