"""The AG-UI endpoint against a real server: a task as a live AG-UI run, its frames
judged by AG-UI's own validator (``ag-ui-validate``) and its state by GraphQL's
``taskAt``, resumed by cursor from any frame on any process, its decisions
answered as interrupts, and the API's rules (auth, 404s, limits) kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from ag_ui_validate import PatchErr, apply_patch
from ag_ui_validate.pytest_plugin import validate_agui

from tests.agui_client import (
    Answer,
    post,
    replayed,
    run_input,
    state_at,
    state_now,
    valid,
)
from tests.integration.test_api import create_task, new_task, start_session, step
from tests.integration.test_progress import drive
from tests.support import (
    Api,
    RedisServer,
    Server,
    create_token,
    postgres_database,
    query_value,
    runstate,
    settled,
)

HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache"}


def started_task(api: Api, steps: int = 3) -> dict[str, Any]:
    """A new task of ``steps`` steps in a new session."""
    return new_task(api, steps=steps)


def cursors(answer: Answer) -> list[str | None]:
    return [f.id for f in answer.frames]


def in_doubt(api: Api, actions: tuple[str, ...] = ("charge",)) -> dict[str, Any]:
    """A task whose steps (none safe to repeat) were all running when their agent
    stopped: each IN_DOUBT, the task AWAITING_DECISION."""
    session = start_session(api)
    plan = [{"action": a, "idempotent": False} for a in actions]
    task = create_task(api, session["id"], steps=plan)
    version = task["version"]
    for index in range(len(actions)):
        version = step(
            api,
            "startStep",
            "StepRefInput",
            taskId=task["id"],
            stepIndex=index,
            expectedVersion=version,
        )["version"]
    resumed = api(
        "mutation($t: ID!) { resumeTask(input: {taskId: $t}) { __typename"
        " ... on ResumePlan { task { status version } } } }",
        t=task["id"],
    )["resumeTask"]
    assert resumed["task"]["status"] == "AWAITING_DECISION", resumed
    return {**task, "version": resumed["task"]["version"]}


def decisions(api: Api, task_id: str) -> list[dict[str, Any]]:
    """The task's decision events (RETRY, SKIP, COMPLETE of a step in doubt)."""
    kinds = {"STEP_RESET", "STEP_SKIPPED", "STEP_SUCCEEDED"}
    logged = api(
        "query($t: ID!) { task(id: $t) { ... on Task {"
        " events(afterSeq: 0, first: 100) { seq kind actor note } } } }",
        t=task_id,
    )["task"]["events"]
    return [e for e in logged if e["kind"] in kinds]


def answer_of(interrupt_id: str, decision: str, **payload: Any) -> dict[str, Any]:
    return {
        "interruptId": interrupt_id,
        "status": "resolved",
        "payload": {"decision": decision, **payload},
    }


async def watch_while(
    server: Server, api: Api, task: dict[str, Any], work: Any, **options: Any
) -> Answer:
    """A run watched from now while ``work(api)`` writes, read to its end."""
    started = asyncio.Event()
    reading = asyncio.create_task(
        post(
            server.url,
            api.token,
            task["id"],
            run_input(task["sessionId"]),
            started=started,
            **options,
        )
    )
    await asyncio.wait_for(started.wait(), 30)
    await asyncio.to_thread(work, api)
    return await asyncio.wait_for(reading, 60)


# ---------------------------------------------------------------- a run


async def test_a_run_follows_its_task_to_success_frame_by_frame(server: Server, alice: Api) -> None:
    """Guards the run (§2-§4): opening frames, one delta and the step frames per
    event, the success ending; every frame's cursor in its id and its metadata;
    AG-UI's validator finds nothing; the state after each delta is GraphQL's
    ``taskAt(n) { ...AguiState }`` and at the end ``task(id)``'s."""
    task = started_task(alice)
    answer = await watch_while(server, alice, task, lambda api: drive(api, task["id"], 3))
    assert answer.status == 200
    assert {k: answer.headers[k] for k in HEADERS} == HEADERS
    assert answer.headers["x-accel-buffering"] == "no"
    assert answer.types == ["RUN_STARTED", "STATE_SNAPSHOT"] + [
        "STATE_DELTA",
        "STEP_STARTED",
        "STATE_DELTA",
        "STEP_FINISHED",
    ] * 3 + ["RUN_FINISHED"]
    valid(answer)
    started, snapshot = answer.frames[0].event, answer.frames[1].event
    epoch = started["metadata"]["runstate"]["epoch"]
    assert (started["threadId"], started["runId"]) == (task["sessionId"], "run-1")
    assert started["protocolVersion"] == "1.0"
    assert started["metadata"]["runstate"]["taskId"] == task["id"]
    expected_ids = (
        [f"{epoch}:1:1:0", f"{epoch}:1:1:1"]
        + [f"{epoch}:1:{seq}:{k}" for seq in range(2, 8) for k in range(2)]
        + [f"{epoch}:1:7:2"]
    )
    assert cursors(answer) == expected_ids
    assert [f.event["metadata"]["runstate"]["cursor"] for f in answer.frames] == expected_ids
    assert snapshot["snapshot"] == state_at(alice, task["id"], 1)
    final, after = replayed(answer.frames)
    assert sorted(after) == list(range(2, 8))
    for seq, state in after.items():
        assert state == state_at(alice, task["id"], seq), f"after the delta of seq {seq}"
    assert final == state_now(alice, task["id"])
    first_delta = answer.frames[2].event
    assert first_delta["delta"][0] == {"op": "test", "path": "/eventSeq", "value": 1}
    assert first_delta["metadata"]["runstate"] == {
        "seq": 2,
        "cursor": f"{epoch}:1:2:0",
        "kind": "STEP_STARTED",
        "actor": "alice",
    }
    assert answer.frames[3].event["stepName"] == "0:step-0"
    assert answer.frames[3].event["metadata"]["runstate"]["status"] == "RUNNING"
    assert answer.frames[-1].event["outcome"] == {"type": "success"}


async def test_a_resting_task_is_answered_with_its_end_at_once(server: Server, alice: Api) -> None:
    """Guards the resting points (§2): COMPLETED success, CANCELLED cancelled,
    FAILED ``RUN_ERROR TASK_FAILED`` naming the step and its error, each in a
    sync-only run; a run on a running task ends the steps it opened."""
    done = started_task(alice, steps=1)
    drive(alice, done["id"], 1)
    failed = started_task(alice, steps=2)
    drive(alice, failed["id"], 1)
    step(alice, "startStep", "StepRefInput", taskId=failed["id"], stepIndex=1, expectedVersion=3)
    step(
        alice,
        "failStep",
        "FailStepInput",
        taskId=failed["id"],
        stepIndex=1,
        expectedVersion=4,
        error="card declined",
    )
    cancelled = started_task(alice, steps=1)
    alice(
        "mutation($t: ID!) { setTaskStatus(input: {taskId: $t, expectedVersion: 1,"
        " status: CANCELLED}) { __typename } }",
        t=cancelled["id"],
    )
    answers = {
        name: await post(server.url, alice.token, task["id"], run_input(task["sessionId"]))
        for name, task in (("done", done), ("failed", failed), ("cancelled", cancelled))
    }
    for answer in answers.values():
        valid(answer)
    assert answers["done"].types == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert answers["done"].frames[-1].event["outcome"] == {"type": "success"}
    assert answers["cancelled"].frames[-1].event["outcome"] == {"type": "cancelled"}
    error = answers["failed"].frames[-1].event
    assert (error["type"], error["code"]) == ("RUN_ERROR", "TASK_FAILED")
    assert error["message"] == "step 1 (step-1) failed: card declined"
    assert answers["failed"].frames[-1].id is not None  # the run's end, resumable as any frame


async def test_a_lost_delta_fails_to_apply_instead_of_applying_to_the_wrong_state(
    server: Server, alice: Api
) -> None:
    """Guards the ``test`` op that opens every delta (§3). Control: the same frames
    with one delta lost apply without a sign once the test ops are stripped, and
    leave a state that is not the task's."""
    task = started_task(alice)
    answer = await watch_while(server, alice, task, lambda api: drive(api, task["id"], 3))
    first_delta = next(i for i, f in enumerate(answer.frames) if f.type == "STATE_DELTA")
    lost = answer.frames[:first_delta] + answer.frames[first_delta + 1 :]  # seq 2's delta
    state = copy.deepcopy(answer.frames[1].event["snapshot"])
    refusals = []
    for frame in lost:
        if frame.type == "STATE_DELTA":
            applied = apply_patch(state, frame.event["delta"])
            if isinstance(applied, PatchErr):
                refusals.append(frame.event["metadata"]["runstate"]["seq"])
            else:
                state = applied.result
    assert refusals == [3, 4, 5, 6, 7], "every delta after the lost one is refused"
    untested = copy.deepcopy(answer.frames[1].event["snapshot"])
    for frame in lost:
        if frame.type == "STATE_DELTA":
            applied = apply_patch(untested, frame.event["delta"][1:])
            assert not isinstance(applied, PatchErr), "without the test op nothing is refused"
            untested = applied.result
            if frame.event["metadata"]["runstate"]["seq"] == 3:
                break
    truth = state_at(alice, task["id"], 3)
    assert (untested["status"], truth["status"]) == ("PLANNED", "RUNNING"), "silently wrong"


# ---------------------------------------------------------------- resume by cursor


@pytest.fixture(scope="module")
def second(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A second server process on the same database, without Redis."""
    with Server(server.database_url, tmp_path_factory.mktemp("agui") / "second.log") as other:
        yield other


async def test_a_cut_between_any_two_frames_resumes_on_any_process_exactly(
    server: Server, second: Server, alice: Api
) -> None:
    """Guards resume by cursor (§5): reconnected with ``Last-Event-ID`` after each
    frame of a finished run, on this process or another, the answer is every later
    frame exactly as first sent (same ids, same bytes: the outputs' keys, which
    PostgreSQL's jsonb gives back in its own order, are sorted); after the last
    frame, 204."""
    task = started_task(alice)
    output = {"zeta": [{"b": 1, "a": 2}], "alpha": "first", "mid": None}
    whole = await watch_while(
        server, alice, task, lambda api: drive_from(api, task["id"], 0, 2, 1, output)
    )
    body = run_input(task["sessionId"])
    for cut in range(1, len(whole.frames)):
        cursor = whole.frames[cut - 1].id
        host = (server, second)[cut % 2]
        rest = await post(host.url, alice.token, task["id"], body, last_event_id=cursor)
        if cut == len(whole.frames):
            continue
        assert rest.status == 200, (cut, rest.body)
        assert rest.frames == whole.frames[cut:], f"after frame {cut - 1} on {host.url}"
    end = await post(second.url, alice.token, task["id"], body, last_event_id=whole.frames[-1].id)
    assert (end.status, end.body) == (204, b"")


async def test_a_live_cut_goes_on_where_it_stopped(
    server: Server, second: Server, alice: Api
) -> None:
    """Guards a reconnect during a live run: cut after the snapshot, one step run
    while the client is away, reconnected on another process and followed live to
    the end: the frames put together are the run's, none lost or repeated, and pass
    AG-UI's validator as one run."""
    task = started_task(alice)
    body = run_input(task["sessionId"])
    head = await post(server.url, alice.token, task["id"], body, cut_after=2)
    drive(alice, task["id"], 1)
    tail = await watch_while(
        second,
        alice,
        task,
        lambda api: drive_from(api, task["id"], 1, 2, 3),
        last_event_id=head.frames[-1].id,
    )
    joined = Answer(200, head.headers, frames=head.frames + tail.frames)
    valid(joined)
    whole = await post(server.url, alice.token, task["id"], body, last_event_id=head.frames[0].id)
    assert joined.frames == head.frames[:1] + whole.frames
    assert replayed(joined.frames)[0] == state_now(alice, task["id"])


def drive_from(
    api: Api, task_id: str, first: int, last: int, version: int, output: Any = None
) -> None:
    """Start and complete steps ``first`` to ``last`` from ``version``, each with
    ``output``."""
    for index in range(first, last + 1):
        version = step(
            api,
            "startStep",
            "StepRefInput",
            taskId=task_id,
            stepIndex=index,
            expectedVersion=version,
        )["version"]
        version = step(
            api,
            "completeStep",
            "CompleteStepInput",
            taskId=task_id,
            stepIndex=index,
            expectedVersion=version,
            output=output,
        )["version"]


async def test_cursors_that_cannot_be_continued(server: Server, alice: Api) -> None:
    """Guards the cursor's edges (§5): another epoch, a seq past the log or a k past
    its group answer one ``RUN_ERROR RESYNC_REQUIRED`` with no id (the only stream
    ag-ui-validate flags, for opening with ``RUN_ERROR``); a cursor that does not
    parse is 400 naming ``Last-Event-ID``."""
    task = started_task(alice, steps=1)
    drive(alice, task["id"], 1)
    body = run_input(task["sessionId"])
    whole = await post(server.url, alice.token, task["id"], body)
    epoch = whole.frames[0].event["metadata"]["runstate"]["epoch"]
    resync = ("another-epoch:3:3:0", f"{epoch}:3:9:0", f"{epoch}:3:3:7", f"{epoch}:3:2:0")
    for cursor in (*resync, f"{epoch}:0:0:0", f"{epoch}:0:1:0"):
        answer = await post(server.url, alice.token, task["id"], body, last_event_id=cursor)
        assert answer.status == 200
        assert [(f.id, f.type, f.event.get("code")) for f in answer.frames] == [
            (None, "RUN_ERROR", "RESYNC_REQUIRED")
        ], cursor
        # The one answer ag-ui-validate 0.4.0 flags, by the contract's choice (§5): a
        # lone RUN_ERROR (AGUI001), which the 1.0 draft allows. Nothing else.
        findings = validate_agui([f.event for f in answer.frames]).diagnostics
        flagged = [(d.rule, d.severity) for d in findings if d.severity != "info"]
        assert flagged == [("AGUI001", "error")]
    for garbage in ("nonsense", f"{epoch}:1:x:0", f"{epoch}:1:1"):
        answer = await post(server.url, alice.token, task["id"], body, last_event_id=garbage)
        assert answer.status == 400, garbage
        assert answer.json()["code"] == "INVALID_INPUT"
        assert answer.json()["field"] == "Last-Event-ID"


# ---------------------------------------------------------------- interrupts


async def test_a_step_in_doubt_is_an_interrupt_answered_by_a_resume(
    server: Server, alice: Api
) -> None:
    """Guards decisions the AG-UI way (§6): the run ends with the state then one
    interrupt per step in doubt; a run with ``resume`` decides through decideStep
    (the event carries the actor and note) and follows the task from there; the
    same resume sent again writes nothing."""
    task = in_doubt(alice, ("charge",))
    body = run_input(task["sessionId"])
    asked = await post(server.url, alice.token, task["id"], body)
    valid(asked)
    assert asked.types == ["RUN_STARTED", "STATE_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    (interrupt,) = asked.frames[-1].event["outcome"]["interrupts"]
    version = task["version"]
    assert interrupt["id"] == f"{task['id']}:0@{version}"
    assert interrupt["reason"] == "input_required"
    assert interrupt["responseSchema"]["properties"]["decision"] == {
        "enum": ["RETRY", "SKIP", "COMPLETE"]
    }
    assert interrupt["metadata"]["runstate"] == {
        "kind": "step_in_doubt",
        "taskId": task["id"],
        "stepIndex": 0,
        "stepId": f"{task['id']}:0",
        "action": "charge",
        "expectedVersion": version,
        "attempts": 1,
    }
    resume = [answer_of(interrupt["id"], "COMPLETE", output={"charged": 12}, note="bank says ok")]
    answered = await post(
        server.url, alice.token, task["id"], {**body, "runId": "run-2", "resume": resume}
    )
    valid(answered)
    assert answered.types == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert answered.frames[-1].event["outcome"] == {"type": "success"}
    state = answered.frames[1].event["snapshot"]
    assert (state["status"], state["steps"][0]["output"]) == ("COMPLETED", {"charged": 12})
    (decided,) = decisions(alice, task["id"])
    assert (decided["kind"], decided["actor"], decided["note"]) == (
        "STEP_SUCCEEDED",
        "alice",
        "bank says ok",
    )
    again = await post(
        server.url, alice.token, task["id"], {**body, "runId": "run-3", "resume": resume}
    )
    assert again.types == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert len(decisions(alice, task["id"])) == 1, "a replayed answer writes nothing"
    assert again.frames[1].event["snapshot"]["eventSeq"] == state["eventSeq"]


def naive_decide(api: Api, task_id: str, index: int, decision: str) -> str:
    """An answer without the interrupt's version and key: decideStep at whatever
    version the task has now."""
    version = api("query($t: ID!) { task(id: $t) { ... on Task { version } } }", t=task_id)
    return str(
        step(
            api,
            "decideStep",
            "DecideStepInput",
            taskId=task_id,
            stepIndex=index,
            expectedVersion=version["task"]["version"],
            decision=decision,
        )["__typename"]
    )


async def test_a_replayed_answer_never_decides_a_later_episode(server: Server, alice: Api) -> None:
    """Guards the interrupt's version and the derived key (§6): an answer to the
    first time a step was in doubt, sent again once the step is in doubt a second
    time, writes nothing and the run restates the new interrupt. Control: the same
    answer without the version and key decides the new episode too."""
    task = in_doubt(alice, ("charge",))
    body = run_input(task["sessionId"])
    first = [answer_of(f"{task['id']}:0@{task['version']}", "RETRY")]
    # A retried step waits for its agent: the run follows it, and is left here.
    retried = await post(
        server.url, alice.token, task["id"], {**body, "resume": first}, cut_after=2
    )
    assert retried.types == ["RUN_STARTED", "STATE_SNAPSHOT"]
    step(
        alice,
        "startStep",
        "StepRefInput",
        taskId=task["id"],
        stepIndex=0,
        expectedVersion=task["version"] + 1,
    )
    alice("mutation($t: ID!) { resumeTask(input: {taskId: $t}) { __typename } }", t=task["id"])
    assert len(decisions(alice, task["id"])) == 1
    replay = await post(server.url, alice.token, task["id"], {**body, "resume": first})
    valid(replay)
    (interrupt,) = replay.frames[-1].event["outcome"]["interrupts"]
    assert interrupt["id"] == f"{task['id']}:0@{task['version'] + 3}"
    assert len(decisions(alice, task["id"])) == 1, "the replay decided nothing"
    assert naive_decide(alice, task["id"], 0, "RETRY") == "Task"
    assert len(decisions(alice, task["id"])) == 2, "control: the naive answer decides again"


async def test_two_different_answers_at_once_have_one_winner(server: Server, alice: Api) -> None:
    """Guards one decider (§6): two devices answer one interrupt differently at the
    same moment; one decision is written, the other run is ``VERSION_CONFLICT``.
    Control: two naive answers, each at the version it reads, both write."""
    task = in_doubt(alice, ("charge",))
    body = run_input(task["sessionId"])
    interrupt_id = f"{task['id']}:0@{task['version']}"
    both = await asyncio.gather(
        *(
            post(
                server.url,
                alice.token,
                task["id"],
                {**body, "runId": f"device-{d}", "resume": [answer_of(interrupt_id, d)]},
                cut_after=2,  # the winner's run follows the task on; its opening is enough
            )
            for d in ("RETRY", "SKIP")
        )
    )
    seconds = sorted((a.frames[1].type, a.frames[1].event.get("code")) for a in both)
    assert seconds == [("RUN_ERROR", "VERSION_CONFLICT"), ("STATE_SNAPSHOT", None)]
    assert len(decisions(alice, task["id"])) == 1
    control = in_doubt(alice, ("charge",))
    assert naive_decide(alice, control["id"], 0, "RETRY") == "Task"
    assert naive_decide(alice, control["id"], 0, "SKIP") == "Task"
    assert len(decisions(alice, control["id"])) == 2


async def test_resumes_that_are_refused_write_nothing(server: Server, alice: Api) -> None:
    """Guards the checks before any decision (§6): an id of another task or
    version set, a payload off the schema, a resume that leaves an open interrupt
    unanswered: ``RUN_STARTED`` then ``RUN_ERROR INVALID_INPUT`` with no ids, and
    nothing written; an answer after the task moved on is ``VERSION_CONFLICT``."""
    task = in_doubt(alice, ("charge", "mail"))
    body = run_input(task["sessionId"])
    v = task["version"]
    ok = {"decision": "SKIP"}
    wrong = {
        "another task": [answer_of(f"other:0@{v}", "SKIP")],
        "two versions": [
            answer_of(f"{task['id']}:0@{v}", "SKIP"),
            answer_of(f"{task['id']}:1@{v - 1}", "SKIP"),
        ],
        "not covered": [answer_of(f"{task['id']}:0@{v}", "SKIP")],
        "bad decision": [
            answer_of(f"{task['id']}:0@{v}", "MAYBE"),
            answer_of(f"{task['id']}:1@{v}", "SKIP"),
        ],
        "unknown field": [
            {
                "interruptId": f"{task['id']}:0@{v}",
                "status": "resolved",
                "payload": {**ok, "why": 1},
            },
            answer_of(f"{task['id']}:1@{v}", "SKIP"),
        ],
        "bad status": [{"interruptId": f"{task['id']}:0@{v}", "status": "maybe"}],
        "decision not text": [
            {
                "interruptId": f"{task['id']}:0@{v}",
                "status": "resolved",
                "payload": {"decision": ["RETRY"]},
            },
            answer_of(f"{task['id']}:1@{v}", "SKIP"),
        ],
    }
    for name, resume in wrong.items():
        answer = await post(server.url, alice.token, task["id"], {**body, "resume": resume})
        valid(answer)
        assert [(f.id, f.type) for f in answer.frames] == [
            (None, "RUN_STARTED"),
            (None, "RUN_ERROR"),
        ], name
        assert answer.frames[1].event["code"] == "INVALID_INPUT", name
    assert decisions(alice, task["id"]) == []
    stale = [
        answer_of(f"{task['id']}:0@{v - 1}", "SKIP"),
        answer_of(f"{task['id']}:1@{v - 1}", "SKIP"),
    ]
    answer = await post(server.url, alice.token, task["id"], {**body, "resume": stale})
    assert answer.frames[1].event["code"] == "VERSION_CONFLICT"
    assert decisions(alice, task["id"]) == []


# ---------------------------------------------------------------- the API's rules


async def test_requests_refused_before_any_stream(server: Server, alice: Api, bob: Api) -> None:
    """Guards the answers outside the stream (§7): 401 with ``WWW-Authenticate``;
    one 404 for a missing task, someone else's and a wrong ``threadId`` (the same
    bytes but the echoed id); 400 naming the field; 405 with ``Allow: POST``."""
    task = started_task(alice, steps=1)
    body = run_input(task["sessionId"])
    nobody = await post(server.url, None, task["id"], body)
    assert (nobody.status, nobody.headers["www-authenticate"]) == (401, "Bearer")
    missing = await post(server.url, alice.token, "no-such-task", body)
    theirs = await post(server.url, bob.token, task["id"], body)
    other_thread = await post(server.url, alice.token, task["id"], run_input("another-session"))
    assert missing.status == theirs.status == other_thread.status == 404
    assert theirs.body == other_thread.body
    assert theirs.body.replace(task["id"].encode(), b"no-such-task") == missing.body
    assert missing.json() == {
        "code": "NOT_FOUND",
        "message": "task 'no-such-task' not found",
        "id": "no-such-task",
    }
    bad = {
        b"not json": "body",
        b"[1]": "body",
        b'{"runId": "r", "messages": []}': "threadId",
        b'{"threadId": "t", "runId": 7, "messages": []}': "runId",
        b'{"threadId": "t", "runId": "r", "messages": {}}': "messages",
        b'{"threadId": "t", "runId": "r", "messages": [], "resume": {}}': "resume",
    }
    for content, field_name in bad.items():
        answer = await post(server.url, alice.token, task["id"], content)
        assert answer.status == 400, content
        assert answer.json()["field"] == field_name
    async with httpx.AsyncClient() as client:
        for method in ("GET", "PUT", "DELETE"):
            other = await client.request(
                method,
                f"{server.url}/agui/tasks/{task['id']}",
                headers={"Authorization": f"Bearer {alice.token}"},
            )
            assert (other.status_code, other.headers["allow"]) == (405, "POST"), method


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with short clocks: tokens checked every 0.2 s, a 1 s operation time
    limit, a keep-alive in each 0.3 s of silence, one connection per user, and a
    budget of 12 points."""
    tmp = tmp_path_factory.mktemp("agui-strict")
    env = {
        "RUNSTATE_AUTH_CHECK_SECONDS": "0.2",
        "RUNSTATE_OPERATION_SECONDS": "1",
        "RUNSTATE_STREAM_KEEPALIVE_SECONDS": "0.3",
        "RUNSTATE_MAX_CONNECTIONS": "1",
    }
    with Server(f"sqlite://{tmp / 'strict.db'}", tmp / "server.log", **env) as srv:
        yield srv


@pytest.fixture
def callers(strict: Server) -> Iterator[Any]:
    """Makes callers of the strict server with tokens of their own, closed after the test."""
    made: list[Api] = []

    def caller(name: str) -> Api:
        made.append(Api(strict.url, create_token(strict.database_url, name)))
        return made[-1]

    yield caller
    for api in made:
        api.close()


async def until(predicate: Any, what: str, within: float = 15) -> None:
    """Poll ``predicate`` until true, failing after ``within`` seconds."""
    deadline = asyncio.get_running_loop().time() + within
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"waited {within} s for {what}"
        await asyncio.sleep(0.05)


async def test_a_quiet_stream_outlives_the_time_limit_with_keepalives(
    strict: Server, callers: Any
) -> None:
    """Guards the exemption from ``RUNSTATE_OPERATION_SECONDS`` and the keep-alive
    comments (§9): a run quiet for well past the 1 s limit is still open, has sent
    ``: keepalive`` comments in its silence, and goes on to its end."""
    api = callers("quiet")
    task = started_task(api, steps=1)
    live = Answer(0, httpx.Headers())
    opened = asyncio.get_running_loop().time()
    reading = asyncio.create_task(
        post(strict.url, api.token, task["id"], run_input(task["sessionId"]), into=live)
    )
    await until(lambda: len(live.comments) >= 5 or reading.done(), "five keep-alives")
    assert not reading.done(), live.frames
    assert asyncio.get_running_loop().time() - opened > 1.2, "past the 1 s time limit"
    assert set(live.comments) == {": keepalive"}
    await asyncio.to_thread(drive, api, task["id"], 1)
    answer = await asyncio.wait_for(reading, 30)
    assert answer.types[-1] == "RUN_FINISHED"
    valid(answer)


async def test_a_stream_is_a_connection_freed_when_its_client_leaves(
    strict: Server, callers: Any
) -> None:
    """Guards the connection cap (§9): with one connection per user, a second
    stream is refused 429 while the first is open, and allowed once its client has
    left (the server stops the stream and forgets it)."""
    api = callers("capped")
    task = started_task(api, steps=1)
    body = run_input(task["sessionId"])
    started = asyncio.Event()
    first = asyncio.create_task(post(strict.url, api.token, task["id"], body, started=started))
    await asyncio.wait_for(started.wait(), 30)
    refused = await post(strict.url, api.token, task["id"], body, cut_after=1)
    assert (refused.status, refused.json()["code"]) == (429, "TOO_MANY_CONNECTIONS")
    first.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await first
    deadline = asyncio.get_running_loop().time() + 15
    while True:
        again = await post(strict.url, api.token, task["id"], body, cut_after=1)
        if again.status == 200:
            break
        assert asyncio.get_running_loop().time() < deadline, "the left stream was never freed"
        await asyncio.sleep(0.05)
    assert again.types == ["RUN_STARTED"]


async def test_a_resume_past_the_connection_cap_decides_nothing(
    strict: Server, callers: Any
) -> None:
    """Guards the order of the checks (§9): a resume from a user already holding
    every connection allowed is 429 before any decision is written."""
    api = callers("full")
    holder = started_task(api, steps=1)
    started = asyncio.Event()
    holding = asyncio.create_task(
        post(strict.url, api.token, holder["id"], run_input(holder["sessionId"]), started=started)
    )
    await asyncio.wait_for(started.wait(), 30)
    task = in_doubt(api, ("charge",))
    resume = [answer_of(f"{task['id']}:0@{task['version']}", "SKIP")]
    refused = await post(
        strict.url, api.token, task["id"], run_input(task["sessionId"], resume=resume)
    )
    holding.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await holding
    assert (refused.status, refused.json()["code"]) == (429, "TOO_MANY_CONNECTIONS")
    assert decisions(api, task["id"]) == []


async def test_a_revoked_token_ends_the_run(strict: Server, callers: Any) -> None:
    """Guards revocation (§7): once the stream's token is revoked, the run ends with
    ``RUN_ERROR UNAUTHENTICATED`` within the token check's interval."""
    api = callers("revoked")
    token = api.token
    task = started_task(api, steps=1)
    started = asyncio.Event()
    reading = asyncio.create_task(
        post(strict.url, token, task["id"], run_input(task["sessionId"]), started=started)
    )
    await asyncio.wait_for(started.wait(), 30)
    await asyncio.to_thread(runstate, "token", "revoke", token, database_url=strict.database_url)
    answer = await asyncio.wait_for(reading, 30)
    assert (answer.frames[-1].type, answer.frames[-1].event["code"]) == (
        "RUN_ERROR",
        "UNAUTHENTICATED",
    )
    assert answer.frames[-1].id is None
    valid(answer)


async def test_an_expired_or_deleted_session_ends_the_run(server: Server, alice: Api) -> None:
    """Guards the session's end (§7): a run whose session expires ends with
    ``RUN_ERROR SESSION_EXPIRED``, a run opened after that is ``RUN_STARTED`` then
    that error; a run whose session is deleted ends with ``RUN_ERROR NOT_FOUND``.
    None of these frames has an id: nothing resumes them."""
    short = start_session(alice, ttlSeconds=1)
    task = create_task(alice, short["id"], steps=1)
    body = run_input(short["id"])
    expiring = await post(server.url, alice.token, task["id"], body)
    assert [(f.type, f.event.get("code")) for f in expiring.frames[-1:]] == [
        ("RUN_ERROR", "SESSION_EXPIRED")
    ]
    assert expiring.types[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"]
    assert expiring.frames[-1].id is None
    valid(expiring)
    mid_run = await post(
        server.url, alice.token, task["id"], body, last_event_id=expiring.frames[1].id
    )
    assert [(f.id, f.type, f.event.get("code")) for f in mid_run.frames] == [
        (None, "RUN_ERROR", "SESSION_EXPIRED")
    ], "a reconnect goes on with the run: no second RUN_STARTED"
    late = await post(server.url, alice.token, task["id"], body)
    assert [(f.id, f.type, f.event.get("code")) for f in late.frames] == [
        (None, "RUN_STARTED", None),
        (None, "RUN_ERROR", "SESSION_EXPIRED"),
    ]
    valid(late)
    doomed = started_task(alice, steps=1)
    started = asyncio.Event()
    reading = asyncio.create_task(
        post(server.url, alice.token, doomed["id"], run_input(doomed["sessionId"]), started=started)
    )
    await asyncio.wait_for(started.wait(), 30)
    alice(
        "mutation($s: ID!) { deleteSession(input: {id: $s}) { __typename } }",
        s=doomed["sessionId"],
    )
    deleted = await asyncio.wait_for(reading, 30)
    assert (deleted.frames[-1].type, deleted.frames[-1].event["code"]) == ("RUN_ERROR", "NOT_FOUND")
    valid(deleted)


async def test_a_stream_costs_what_a_subscription_costs(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Guards the rate limit (§7): with a budget of 12 points and next to no refill,
    the session and task (2 writes, 4 points) and a run (5 points) are served, and
    the second run, short of its 5 points, is 429 with ``Retry-After``, as
    everywhere."""
    tmp = tmp_path_factory.mktemp("agui-rate")
    env = {"RUNSTATE_RATE_BURST": "12", "RUNSTATE_RATE_PER_SECOND": "0.01"}
    with Server(f"sqlite://{tmp / 'rate.db'}", tmp / "server.log", **env) as srv:
        token = create_token(srv.database_url, "metered")
        with Api(srv.url, token) as api:
            task = started_task(api, steps=1)
        body = run_input(task["sessionId"])
        answers = [await post(srv.url, token, task["id"], body, cut_after=2) for _ in range(2)]
    assert [a.status for a in answers] == [200, 429]
    assert answers[1].json()["errors"][0]["extensions"]["code"] == "RATE_LIMITED"
    assert int(answers[1].headers["retry-after"]) >= 1


async def test_a_run_on_one_process_follows_writes_made_on_another_through_redis(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Guards live delivery across processes (§9, taskProgress's machinery): with
    catch-up polling at two minutes, a run watched on one process follows the
    writes made on another to its end, through Redis, in order, no frame missing.
    Control: the same two processes without Redis leave the run waiting."""
    tmp = tmp_path_factory.mktemp("agui-redis")
    redis = RedisServer(tmp / "redis.log").start()
    url = f"sqlite://{tmp / 'shared.db'}"
    token = create_token(url, "alice")
    slow = {"RUNSTATE_CATCH_UP_SECONDS": "120"}
    writer = Server(url, tmp / "a.log", RUNSTATE_REDIS_URL=redis.url, **slow).start()
    watcher = Server(url, tmp / "b.log", RUNSTATE_REDIS_URL=redis.url, **slow).start()
    alone = Server(url, tmp / "c.log", **slow).start()
    try:
        with Api(writer.url, token) as api:
            task = started_task(api, steps=2)
            body = run_input(task["sessionId"])
            started = asyncio.Event()
            control = Answer(0, httpx.Headers())
            unheard = asyncio.create_task(post(alone.url, token, task["id"], body, into=control))
            reading = asyncio.create_task(
                post(watcher.url, token, task["id"], body, started=started)
            )
            await asyncio.wait_for(started.wait(), 30)
            await until(lambda: len(control.frames) == 2, "the control's opening frames")
            await asyncio.to_thread(drive, api, task["id"], 2)
            answer = await asyncio.wait_for(reading, 30)
            valid(answer)
            assert answer.types[-1] == "RUN_FINISHED"
            assert str(answer.frames[-1].id).endswith(":1:5:2")
            assert replayed(answer.frames)[0] == state_now(api, task["id"])
            assert control.types == ["RUN_STARTED", "STATE_SNAPSHOT"], "control: nothing heard"
            unheard.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await unheard
    finally:
        for server in (writer, watcher, alone):
            server.stop()
        redis.stop()


def test_a_browser_on_another_origin_may_reconnect_with_last_event_id(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Guards CORS (§9): with ``RUNSTATE_ALLOWED_ORIGINS``, a preflight for a run
    that sends ``Last-Event-ID`` and ``Accept`` is allowed."""
    tmp = tmp_path_factory.mktemp("agui-cors")
    env = {"RUNSTATE_ALLOWED_ORIGINS": "http://app.example"}
    with Server(f"sqlite://{tmp / 'cors.db'}", tmp / "server.log", **env) as srv:
        answer = httpx.options(
            f"{srv.url}/agui/tasks/any",
            headers={
                "Origin": "http://app.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": (
                    "authorization, content-type, last-event-id, accept"
                ),
            },
        )
    assert answer.status_code == 200, answer.text
    allowed = {h.strip().lower() for h in answer.headers["access-control-allow-headers"].split(",")}
    assert {"last-event-id", "accept", "authorization", "content-type"} <= allowed


def test_tool_states_keep_one_order_whatever_the_databases_collation(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Guards the order of tool states (§3): on a PostgreSQL database whose collation
    sorts "alpha" before "Zeta" (ICU, en-US), GraphQL's toolStates and the AG-UI
    document both keep the order of the names' code points, the order a client
    applying events keeps, so the state after a delta is still ``taskAt``'s."""
    icu = "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
    tmp = tmp_path_factory.mktemp("agui-icu")
    with postgres_database(icu) as url, Server(url, tmp / "server.log") as srv:
        assert query_value(url, "SELECT 'alpha' < 'Zeta'"), "the collation sorts by letter"
        with Api(srv.url, create_token(url, "sorter")) as api:
            task = started_task(api, steps=1)

            def tools(api: Api) -> None:
                for name in ("alpha", "Zeta", "beta"):
                    api(
                        "mutation($t: ID!, $n: String!) { recordToolCall(input: {taskId: $t,"
                        " toolName: $n, outcome: CALLING}) { __typename } }",
                        t=task["id"],
                        n=name,
                    )
                drive(api, task["id"], 1, version=1)

            answer = asyncio.run(watch_while(srv, api, task, tools))
            final, after = replayed(answer.frames)
            names = [t["toolName"] for t in state_now(api, task["id"])["toolStates"]]
            assert names == ["Zeta", "alpha", "beta"]
            for seq, state in after.items():
                assert state == state_at(api, task["id"], seq), f"after seq {seq}"
            assert final == state_now(api, task["id"])


async def test_a_stopping_server_ends_its_runs_for_another_to_go_on(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Guards the stop (§9, ``Admission.stopping``): a server told to stop ends its
    open runs at once and cleanly (a ``: server stopping`` comment, no terminal
    frame, no run cancelled at the grace period's end), and the client goes on
    from its last frame on another process, losing and repeating nothing. Without
    it the stream stayed open until uvicorn cancelled it 3 s later, with a traceback
    in the log and a body cut mid-chunk."""
    tmp = tmp_path_factory.mktemp("agui-stop")
    url = f"sqlite://{tmp / 'stop.db'}"
    token = create_token(url, "mover")
    stopping = Server(url, tmp / "a.log").start()
    going_on = Server(url, tmp / "b.log").start()
    try:
        with Api(going_on.url, token) as api:
            task = started_task(api, steps=2)
            body = run_input(task["sessionId"])
            heard = Answer(0, httpx.Headers())
            first = asyncio.create_task(post(stopping.url, token, task["id"], body, into=heard))
            # Stopped once the run's first frames are read: its headers alone may
            # come before the server has written them (seen once: no frame at all).
            await settled(lambda: len(heard.frames) >= 2, "the run's first frames")
            await asyncio.to_thread(stopping.stop)
            head = await asyncio.wait_for(first, 30)
            assert head.types == ["RUN_STARTED", "STATE_SNAPSHOT"]
            assert head.comments == [": server stopping"]
            assert "graceful shutdown exceeded" not in stopping.log()
            assert "Traceback" not in stopping.log()
            tail = await watch_while(
                going_on,
                api,
                task,
                lambda api: drive(api, task["id"], 2),
                last_event_id=head.frames[-1].id,
            )
            joined = Answer(200, head.headers, frames=head.frames + tail.frames)
            valid(joined)
            assert replayed(joined.frames)[0] == state_now(api, task["id"])
    finally:
        stopping.stop()
        going_on.stop()
