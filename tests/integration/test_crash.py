"""Real agent processes: frozen past their lease (SIGSTOP), killed mid-task (SIGKILL)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.integration.test_api import events, new_task
from tests.integration.test_lifecycle import acquire, task_now
from tests.support import TASK, AgentProcess, Api, Server, mutate, wait_until


def test_a_frozen_lease_holder_cannot_write_after_a_takeover(server: Server, alice: Api) -> None:
    task = new_task(alice, steps=300)
    tid = task["id"]
    agent = AgentProcess(server.url, alice.token, tid, "--holder", "frozen", "--ttl", "2")
    try:
        agent.until(lambda line: line.get("event") == "done" and line["step"] == 5)
        os.kill(agent.process.pid, signal.SIGSTOP)
        wait_until(lambda: task_now(alice, tid)["lock"] is None, 15, "the frozen lease to lapse")
        rescue = acquire(alice, tid, "rescuer")
        assert rescue["fencingToken"] == 2
        takeover_seq = task_now(alice, tid)["eventSeq"]
        added = mutate(
            alice,
            "addSteps",
            "AddStepsInput",
            TASK,
            taskId=tid,
            expectedVersion=task_now(alice, tid)["version"],
            fencingToken=2,
            steps=[{"action": "verify"}],
        )
        assert added["__typename"] == "Task"
        os.kill(agent.process.pid, signal.SIGCONT)
        last = agent.rest()[-1]
        assert agent.process.returncode == 3
        assert (last["event"], last["__typename"], last["currentToken"]) == (
            "refused",
            "StaleFencingToken",
            2,
        )
        after = [e["kind"] for e in events(alice, tid) if e["seq"] > takeover_seq]
        assert after == ["STEPS_ADDED"], "nothing the frozen holder sent was accepted"
    finally:
        agent.kill()


def test_an_agent_killed_mid_task_is_resumed_by_a_new_process(
    server: Server, alice: Api, tmp_path: Path
) -> None:
    plan = [
        {"action": "search flights"},
        {"action": "compare prices"},
        {"action": "book flight", "idempotent": False},
        {"action": "send confirmation", "idempotent": False},
    ]
    task = mutate(
        alice,
        "createTask",
        "CreateTaskInput",
        TASK,
        sessionId=new_task(alice, steps=0)["sessionId"],
        goal="book a trip",
        steps=plan,
    )
    tid = task["id"]
    effects = tmp_path / "effects.txt"
    common = ["--ttl", "2", "--effects", str(effects)]
    first = AgentProcess(
        server.url, alice.token, tid, "--holder", "run-1", "--pause-at", "book flight", *common
    )
    try:
        first.until(lambda line: line.get("event") == "paused")
    finally:
        first.kill()  # SIGKILL while "book flight" is RUNNING
    assert effects.read_text().splitlines() == ["search flights", "compare prices"]

    second = AgentProcess(
        server.url, alice.token, tid, "--holder", "run-2", "--decide", "RETRY", *common
    )
    try:
        lines = second.rest(within=60)
    finally:
        second.kill()
    assert second.process.returncode == 0, lines
    assert {
        "event": "plan",
        "resumeFrom": None,
        "needsDecision": True,
        "stepsInDoubt": [2],
    } in lines
    assert effects.read_text().splitlines() == [
        "search flights",
        "compare prices",
        "book flight",
        "send confirmation",
    ], "no finished step ran again"
    log = events(alice, tid)
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert [(e["kind"], e["stepIndex"]) for e in log] == [
        ("TASK_CREATED", None),
        ("LOCK_ACQUIRED", None),
        ("TASK_STATUS_CHANGED", None),
        ("STEP_STARTED", 0),
        ("STEP_SUCCEEDED", 0),
        ("STEP_STARTED", 1),
        ("STEP_SUCCEEDED", 1),
        ("STEP_STARTED", 2),
        ("LOCK_ACQUIRED", None),
        ("TASK_STATUS_CHANGED", 2),
        ("STEP_RESET", 2),
        ("STEP_STARTED", 2),
        ("STEP_SUCCEEDED", 2),
        ("STEP_STARTED", 3),
        ("STEP_SUCCEEDED", 3),
        ("LOCK_RELEASED", None),
    ]
    assert log[-1]["status"] == "COMPLETED"
