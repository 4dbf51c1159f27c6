"""A minimal agent process for crash tests: lease, resume, decide, run steps.

    python -m tests.agents.worker URL TOKEN TASK_ID --holder NAME [--ttl S]
        [--effects FILE] [--pause-at ACTION] [--decide RETRY|SKIP]

It prints one JSON line per thing it does, appends each step's action to
--effects when it performs the step's side effect, and blocks on stdin right
after starting the --pause-at step (so a test can kill it there). It exits 3 on
the first refused write.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

TASK = "... on Task { version status steps { action status } }"
PROBLEM = """
  ... on Problem { code message }
  ... on StaleFencingToken { currentToken }
  ... on LockHeld { holderId }
"""


class RefusedError(Exception):
    """The server answered with a Problem."""


class Worker:
    def __init__(self, url: str, token: str, task_id: str, holder: str, ttl: int) -> None:
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        self.task_id = task_id
        self.holder = holder
        self.ttl = ttl
        self.fence = 0
        self.version = 0

    def call(self, name: str, input_type: str, fields: str, **input: Any) -> dict[str, Any]:
        query = f"mutation($i: {input_type}!) {{ {name}(input: $i) {{ __typename {fields} }} }}"
        body = self.http.post("/graphql", json={"query": query, "variables": {"i": input}}).json()
        if body.get("errors"):
            raise RuntimeError(body["errors"])
        result: dict[str, Any] = body["data"][name]
        return result

    def write(self, name: str, input_type: str, **input: Any) -> dict[str, Any]:
        result = self.call(
            name,
            input_type,
            TASK + PROBLEM,
            taskId=self.task_id,
            expectedVersion=self.version,
            fencingToken=self.fence,
            **input,
        )
        if result["__typename"] != "Task":
            say(event="refused", write=name, **result)
            raise RefusedError(result["__typename"])
        self.version = result["version"]
        return result

    def acquire(self, within: float = 30) -> None:
        deadline = time.monotonic() + within
        while True:
            lock = self.call(
                "acquireTaskLock",
                "AcquireTaskLockInput",
                "... on TaskLock { fencingToken } ... on LockHeld { holderId }",
                taskId=self.task_id,
                holderId=self.holder,
                ttlSeconds=self.ttl,
            )
            if lock["__typename"] == "TaskLock":
                self.fence = lock["fencingToken"]
                say(event="leased", token=self.fence)
                return
            if time.monotonic() > deadline:
                raise RefusedError(lock["__typename"])
            time.sleep(0.1)  # polling the lease: the previous holder's ttl must run out

    def resume(self) -> dict[str, Any]:
        plan = self.call(
            "resumeTask",
            "ResumeTaskInput",
            "... on ResumePlan { resumeFrom needsDecision stepsInDoubt task { version } }"
            + PROBLEM,
            taskId=self.task_id,
            fencingToken=self.fence,
        )
        if plan["__typename"] != "ResumePlan":
            raise RefusedError(plan["__typename"])
        self.version = plan["task"]["version"]
        say(
            event="plan",
            resumeFrom=plan["resumeFrom"],
            needsDecision=plan["needsDecision"],
            stepsInDoubt=plan["stepsInDoubt"],
        )
        return plan


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("task_id")
    parser.add_argument("--holder", required=True)
    parser.add_argument("--ttl", type=int, default=2)
    parser.add_argument("--effects", type=Path)
    parser.add_argument("--pause-at")
    parser.add_argument("--decide", choices=["RETRY", "SKIP"])
    args = parser.parse_args()

    worker = Worker(args.url, args.token, args.task_id, args.holder, args.ttl)
    try:
        worker.acquire()
        plan = worker.resume()
        if plan["needsDecision"]:
            if args.decide is None:
                say(event="needs-decision", steps=plan["stepsInDoubt"])
                return 4
            for index in plan["stepsInDoubt"]:
                worker.write("decideStep", "DecideStepInput", stepIndex=index, decision=args.decide)
                say(event="decided", step=index, decision=args.decide)
            plan = worker.resume()
        index = plan["resumeFrom"]
        while index is not None:
            task = worker.write("startStep", "StepRefInput", stepIndex=index)
            action = task["steps"][index]["action"]
            say(event="started", step=index, action=action)
            if action == args.pause_at:
                say(event="paused", step=index)
                sys.stdin.readline()
            if args.effects is not None:
                with args.effects.open("a") as effects:
                    effects.write(action + "\n")
            task = worker.write("completeStep", "CompleteStepInput", stepIndex=index)
            say(event="done", step=index, action=action)
            statuses = [s["status"] for s in task["steps"]]
            pending = [i for i, s in enumerate(statuses) if s not in ("SUCCESS", "SKIPPED")]
            index = pending[0] if pending else None
        worker.call(
            "releaseTaskLock",
            "ReleaseTaskLockInput",
            "",
            taskId=args.task_id,
            holderId=args.holder,
        )
        say(event="finished")
        return 0
    except RefusedError:
        return 3


if __name__ == "__main__":
    sys.exit(main())
