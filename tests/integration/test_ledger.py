"""A session's admission ledger over HTTP, on SQLite and PostgreSQL: admission in
order, the four policies, cancelling, claims that follow the ledger's turn, and
a task asked to stop."""

from __future__ import annotations

from typing import Any

from tests.integration.test_api import start_session, step
from tests.integration.test_claim import claim
from tests.support import Api, Server, mutate, query_value, wait_until

SUBMISSION = """
  __typename
  ... on Submission { id sessionId seq policy status reason taskId displacedBy actor input
    task { id status interruptRequested submission { id } } }
  ... on SessionBusy { active { id seq } }
  ... on Problem { code message }
  ... on InvalidInput { field }
"""
TASK = """
  __typename
  ... on Task { id status version interruptRequested steps { status } }
  ... on TaskInterrupted { submission { id seq status displacedBy } }
  ... on Problem { code message }
"""


def submit(api: Api, session_id: str, policy: str | None = None, **input: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"goal": "answer", "steps": [{"action": "think"}], **input}
    if policy is not None:
        fields["policy"] = policy
    return mutate(api, "submitInput", "SubmitInput", SUBMISSION, sessionId=session_id, **fields)


def ledger(api: Api, session_id: str) -> list[dict[str, Any]]:
    data = api(
        "query($s: ID!) { session(id: $s) { ... on AgentSession {"
        " submissions { seq status taskId } activeSubmission { seq } } } }",
        s=session_id,
    )
    submissions: list[dict[str, Any]] = data["session"]["submissions"]
    return submissions


def task(api: Api, task_id: str) -> dict[str, Any]:
    data = api(f"query($id: ID!) {{ task(id: $id) {{ {TASK} }} }}", id=task_id)
    found: dict[str, Any] = data["task"]
    return found


def run_step(api: Api, task_id: str, index: int, token: int | None = None) -> dict[str, Any]:
    """Start and complete one step of a task; the answer of the start if refused."""
    current = task(api, task_id)
    started = mutate(
        api, "startStep", "StepRefInput", TASK, taskId=task_id, stepIndex=index,
        expectedVersion=current["version"], fencingToken=token,
    )  # fmt: skip
    if started["__typename"] != "Task":
        return started
    return mutate(
        api, "completeStep", "CompleteStepInput", TASK, taskId=task_id, stepIndex=index,
        expectedVersion=started["version"], fencingToken=token,
    )  # fmt: skip


def test_the_first_input_is_active_at_once_and_reject_refuses_the_next(alice: Api) -> None:
    """Admission: an idle session admits under any policy, ACTIVE with a PLANNED
    task; REJECT then answers SessionBusy naming the active one and writes nothing
    (the ledger keeps one entry, seq 1)."""
    session = start_session(alice)["id"]
    first = submit(alice, session, input={"text": "hello"})
    assert (first["seq"], first["status"], first["policy"]) == (1, "ACTIVE", "REJECT")
    assert first["task"]["status"] == "PLANNED"
    assert first["task"]["submission"] == {"id": first["id"]}
    assert first["input"] == {"text": "hello"}
    assert first["actor"] == "alice"

    busy = submit(alice, session, "REJECT")
    assert busy["__typename"] == "SessionBusy"
    assert busy["active"] == {"id": first["id"], "seq": 1}
    assert ledger(alice, session) == [{"seq": 1, "status": "ACTIVE", "taskId": first["taskId"]}]


def test_enqueued_inputs_run_in_order_and_claims_follow_the_turn(alice: Api) -> None:
    """ENQUEUE: a queued submission's task is not claimable; finishing the active
    task makes the next one ACTIVE in the same write, and the claim then hands
    out that task."""
    session = start_session(alice)["id"]
    first = submit(alice, session, "ENQUEUE")
    second = submit(alice, session, "ENQUEUE")
    assert (second["seq"], second["status"]) == (2, "QUEUED")

    lease = claim(alice, "w1", session_id=session)
    assert lease["taskId"] == first["taskId"]
    nothing = claim(alice, "w2", session_id=session)
    assert nothing["__typename"] == "NotFound"  # the second waits its turn

    done = run_step(alice, first["taskId"], 0, lease["fencingToken"])
    assert done["status"] == "COMPLETED"
    assert [(s["seq"], s["status"]) for s in ledger(alice, session)] == [
        (1, "COMPLETED"),
        (2, "ACTIVE"),
    ]
    assert claim(alice, "w2", session_id=session)["taskId"] == second["taskId"]


def test_a_queued_task_cannot_be_started_directly(alice: Api) -> None:
    """The turn holds for direct writes too: startStep on a QUEUED submission's
    task is refused (InvalidTransition), so no two tasks of one ledger run."""
    session = start_session(alice)["id"]
    submit(alice, session)
    queued = submit(alice, session, "ENQUEUE")
    refused = run_step(alice, queued["taskId"], 0)
    assert refused["__typename"] == "InvalidTransition"


def test_interrupt_stops_a_leased_task_at_its_next_start(alice: Api) -> None:
    """INTERRUPT with the active task leased and running: the task is flagged; the
    step it is in still completes (it happened) and the task ends CANCELLED with
    it; its next start answers TaskInterrupted; the interrupting submission is
    ACTIVE next, ahead of one queued before it."""
    session = start_session(alice)["id"]
    first = submit(alice, session, input="one", steps=[{"action": "a"}, {"action": "b"}])
    queued = submit(alice, session, "ENQUEUE", input="two")
    lease = claim(alice, "w1", session_id=session)
    token = lease["fencingToken"]
    current = task(alice, first["taskId"])
    started = step(
        alice, "startStep", "StepRefInput", taskId=first["taskId"], stepIndex=0,
        expectedVersion=current["version"], fencingToken=token,
    )  # fmt: skip
    assert started["status"] == "RUNNING"

    interrupting = submit(alice, session, "INTERRUPT", input="three")
    assert (interrupting["seq"], interrupting["status"]) == (3, "QUEUED")
    assert task(alice, first["taskId"])["interruptRequested"] is True

    done = step(
        alice, "completeStep", "CompleteStepInput", taskId=first["taskId"], stepIndex=0,
        expectedVersion=task(alice, first["taskId"])["version"], fencingToken=token,
    )  # fmt: skip
    assert done["status"] == "CANCELLED"
    assert [s["status"] for s in done["steps"]] == ["SUCCESS", "PENDING"]
    refused = run_step(alice, first["taskId"], 1, token)
    assert refused["__typename"] == "TaskInterrupted"  # the task ended, and says why

    states = {s["seq"]: s["status"] for s in ledger(alice, session)}
    assert states == {1: "INTERRUPTED", 2: "QUEUED", 3: "ACTIVE"}
    assert claim(alice, "w2", session_id=session)["taskId"] == interrupting["taskId"]
    assert queued["status"] == "QUEUED"


def test_a_start_after_the_interrupt_answers_task_interrupted(alice: Api) -> None:
    """A leased task between steps when INTERRUPT comes: its next startStep answers
    TaskInterrupted (nothing written); releasing its lease ends it CANCELLED and
    the new submission runs."""
    session = start_session(alice)["id"]
    first = submit(alice, session, steps=[{"action": "a"}, {"action": "b"}])
    lease = claim(alice, "w1", session_id=session)
    interrupting = submit(alice, session, "INTERRUPT")
    before = task(alice, first["taskId"])
    refused = run_step(alice, first["taskId"], 0, lease["fencingToken"])
    assert refused["__typename"] == "TaskInterrupted"
    assert refused["submission"]["displacedBy"] == interrupting["id"]
    assert task(alice, first["taskId"])["version"] == before["version"]

    released = mutate(
        alice, "releaseTaskLock", "ReleaseTaskLockInput", "... on Task { status }",
        taskId=first["taskId"], holderId="w1",
    )  # fmt: skip
    assert released["status"] == "CANCELLED"
    states = {s["seq"]: s["status"] for s in ledger(alice, session)}
    assert states == {1: "INTERRUPTED", 2: "ACTIVE"}


def test_interrupt_ends_an_unclaimed_task_at_once_and_rollback_removes_it(alice: Api) -> None:
    """With no live lease, INTERRUPT ends the active task in the request itself;
    ROLLBACK does the same and removes the task (its submission kept, taskId
    null)."""
    session = start_session(alice)["id"]
    first = submit(alice, session)
    second = submit(alice, session, "INTERRUPT")
    assert second["status"] == "ACTIVE"
    assert task(alice, first["taskId"])["status"] == "CANCELLED"

    third = submit(alice, session, "ROLLBACK")
    assert third["status"] == "ACTIVE"
    assert task(alice, second["taskId"])["__typename"] == "NotFound"
    rows = {s["seq"]: (s["status"], s["taskId"]) for s in ledger(alice, session)}
    assert rows == {
        1: ("INTERRUPTED", first["taskId"]),
        2: ("ROLLED_BACK", None),
        3: ("ACTIVE", third["taskId"]),
    }


def test_cancel_removes_a_queued_submission_and_refuses_any_other(alice: Api, bob: Api) -> None:
    """cancelSubmission: a QUEUED one becomes CANCELLED with its task removed; the
    ACTIVE one answers InvalidTransition; another user's answers NotFound."""
    session = start_session(alice)["id"]
    active = submit(alice, session)
    queued = submit(alice, session, "ENQUEUE")

    def cancel(api: Api, submission_id: str) -> dict[str, Any]:
        return mutate(
            api, "cancelSubmission", "CancelSubmissionInput", SUBMISSION,
            id=submission_id, note="changed my mind",
        )  # fmt: skip

    assert cancel(bob, queued["id"])["__typename"] == "NotFound"
    assert cancel(alice, active["id"])["__typename"] == "InvalidTransition"
    cancelled = cancel(alice, queued["id"])
    assert (cancelled["status"], cancelled["reason"], cancelled["taskId"]) == (
        "CANCELLED",
        "changed my mind",
        None,
    )
    assert task(alice, queued["taskId"])["__typename"] == "NotFound"


def test_bad_input_is_refused_naming_its_field_and_writes_nothing(alice: Api, bob: Api) -> None:
    """Bad input to the ledger: an input past the payload limits (InvalidInput on
    ``input``), an expired session (SessionExpired, for submitInput and
    createSchedule alike), another user's session and submission (NotFound, as
    if unknown); the ledger is left as it was."""
    session = start_session(alice)["id"]
    first = submit(alice, session)
    deep: Any = "x"
    for _ in range(40):
        deep = [deep]
    for value in (deep, "x" * 70_000):
        refused = submit(alice, session, "ENQUEUE", input=value)
        assert (refused["__typename"], refused["field"]) == ("InvalidInput", "input"), refused
    assert submit(bob, session)["__typename"] == "NotFound"
    cancel = mutate(bob, "cancelSubmission", "CancelSubmissionInput", SUBMISSION, id=first["id"])
    assert cancel["__typename"] == "NotFound"
    seen = bob("query($id: ID!) { submission(id: $id) { __typename } }", id=first["id"])
    assert seen["submission"] == {"__typename": "NotFound"}
    assert ledger(alice, session) == [{"seq": 1, "status": "ACTIVE", "taskId": first["taskId"]}]

    short = start_session(alice, ttlSeconds=1)["id"]
    expired = alice("query($id: ID!) { session(id: $id) { __typename } }", id=short)
    wait_until(
        lambda: (
            alice("query($id: ID!) { session(id: $id) { __typename } }", id=short)["session"]
            == {"__typename": "SessionExpired"}
        ),
        timeout=10,
        what="the session to expire",
    )
    assert expired["session"] == {"__typename": "AgentSession"}
    assert submit(alice, short)["__typename"] == "SessionExpired"
    schedule = mutate(
        alice, "createSchedule", "CreateScheduleInput", "__typename",
        sessionId=short, cron="@daily", goal="g", steps=[{"action": "a"}],
    )  # fmt: skip
    assert schedule["__typename"] == "SessionExpired"


def test_a_stop_whose_request_never_ran_is_asked_again(alice: Api, server: Server) -> None:
    """Guards the recovery of a stop half made (``stops.end_lapsed``): a process
    that marked the active submission to stop and died before asking its task
    leaves the task unflagged; each firing round asks it, so its next start still
    answers TaskInterrupted. The mark is made here straight in the database."""
    session = start_session(alice)["id"]
    first = submit(alice, session)
    claim(alice, "w1", session_id=session)
    marked = query_value(
        server.database_url,
        "UPDATE submissions SET stop = 'INTERRUPTED'"
        f" WHERE public_id = '{first['id']}' RETURNING id",
    )
    assert marked is not None
    wait_until(
        lambda: task(alice, first["taskId"])["interruptRequested"],
        timeout=10,
        what="the task to be asked to stop",
    )


def test_an_interrupted_task_that_finishes_its_last_step_completes(alice: Api) -> None:
    """Guards the end of a stop with nothing left to stop: a task asked to stop
    that completes its last step is COMPLETED, its submission too, and the
    interrupting one runs next."""
    session = start_session(alice)["id"]
    first = submit(alice, session)
    lease = claim(alice, "w1", session_id=session)
    current = task(alice, first["taskId"])
    mutate(
        alice, "startStep", "StepRefInput", TASK, taskId=first["taskId"], stepIndex=0,
        expectedVersion=current["version"], fencingToken=lease["fencingToken"],
    )  # fmt: skip
    submit(alice, session, "INTERRUPT")
    done = mutate(
        alice, "completeStep", "CompleteStepInput", TASK, taskId=first["taskId"], stepIndex=0,
        expectedVersion=task(alice, first["taskId"])["version"],
        fencingToken=lease["fencingToken"],
    )  # fmt: skip
    assert done["status"] == "COMPLETED"
    assert {s["seq"]: s["status"] for s in ledger(alice, session)} == {
        1: "COMPLETED",
        2: "ACTIVE",
    }
