"""The checkpoint policies' trade-off, measured: steps a second, and steps lost when
the agent is killed at a random moment, each policy also with
``durability="async"`` where it writes more than once in a while.

One ``runstate serve`` on SQLite. For each policy, an agent process (this module,
``agent``) drives a task of STEPS steps through the SDK's ``TaskRunner``: each
step takes WORK seconds of work, and every LIMITED_EVERY-th step meets a
rate-limited tool (reported, then its retry's success: a key point). It prints a
line for every step the SDK has accepted as done. First a whole run (steps a
second, events it wrote); then KILLS runs, each killed with SIGKILL as soon as
it has printed a random number of steps (drawn with a fixed seed: every run and
every policy is killed at the same points), after which the task is read over the
API: steps the agent had done that the server does not hold as SUCCESS are
lost, to be run again on resume. Run with ``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from bench.fanout import Graph, new_task, serving
from runstate.client import AtEnd, CheckpointPolicy, EveryNSteps, EveryStep, KeyPoints, Runstate
from runstate.client.runner import Durability

STEPS = 100
WORK = 0.005
LIMITED_EVERY = 25
KILLS = 5
RESULTS = Path(__file__).parent / "results" / "policies.json"
POLICIES: dict[str, tuple[CheckpointPolicy, Durability]] = {
    "every step": (EveryStep(), "sync"),
    "every step, async": (EveryStep(), "async"),
    "every 10 steps": (EveryNSteps(10), "sync"),
    "every 10, async": (EveryNSteps(10), "async"),
    "key points": (KeyPoints(), "sync"),
    "at end": (AtEnd(), "sync"),
}
HEAD = "query($id: ID!) { task(id: $id) { ... on Task { eventSeq steps { status } } } }"


async def agent(url: str, token: str, task_id: str, policy: str) -> None:
    """Drive the task to its end under ``policy``, printing each step done."""
    checkpoints, durability = POLICIES[policy]
    async with (
        Runstate(url, token) as rs,
        rs.run(task_id, holder="bench-agent", policy=checkpoints, durability=durability) as run,
    ):
        began = time.perf_counter()
        for step in run.remaining:
            await run.begin(step.index)
            await asyncio.sleep(WORK)
            if (step.index + 1) % LIMITED_EVERY == 0:
                await run.tool("search", "RATE_LIMITED", retry_after_seconds=1)
                await run.tool("search", "SUCCESS", result={"hits": 3})
            await run.succeed(step.index, {"step": step.index})
            print("done", step.index, flush=True)
        await run.flush()
        print("took", time.perf_counter() - began, flush=True)


async def drive(
    url: str, token: str, task_id: str, policy: str, kill_at: int | None
) -> tuple[list[int], float]:
    """An agent process on the task, killed once it has done ``kill_at`` steps (None:
    let it finish): the steps it had done, and the seconds its work took."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.policies",
        "agent",
        url,
        token,
        task_id,
        policy,
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    done: list[int] = []
    took = 0.0
    while line := (await process.stdout.readline()).decode():
        word, *value = line.split()
        if word == "done":
            done.append(int(value[0]))
        elif word == "took":
            took = float(value[0])
        if len(done) == kill_at:
            process.kill()
    await process.wait()
    return done, took


async def held(api: Graph, task_id: str) -> tuple[set[int], int]:
    """The steps the server holds as SUCCESS, and the task's events."""
    task = (await api(HEAD, id=task_id))["task"]
    return {i for i, s in enumerate(task["steps"]) if s["status"] == "SUCCESS"}, task["eventSeq"]


async def measure(url: str, token: str, policy: str) -> dict[str, Any]:
    """One whole run, then KILLS killed ones, each on a task of its own."""
    api = Graph(url, token)
    task_id = await new_task(api, STEPS)
    done, took = await drive(url, token, task_id, policy, None)
    stored, events = await held(api, task_id)
    assert len(done) == len(stored) == STEPS, (policy, done, stored)
    lost = []
    for _ in range(KILLS):
        task_id = await new_task(api, STEPS)
        done, _ = await drive(url, token, task_id, policy, random.randrange(1, STEPS))
        stored, _ = await held(api, task_id)
        lost.append(len(set(done) - stored))
    await api.http.aclose()
    return {"steps_per_second": STEPS / took, "events": events, "lost": lost}


async def main() -> None:
    random.seed(11)
    print(
        f"checkpoint policies: {STEPS} steps of {WORK * 1000:.0f} ms work (alone"
        f" {1 / WORK:.0f} steps/s), a rate-limited tool every {LIMITED_EVERY} steps,"
        f" {KILLS} kills each"
    )
    print(f"{'policy':<18} {'steps/s':>8} {'events':>7} {'lost per kill (mean, max)':>26}  each")
    results = {}
    with serving(1) as (urls, token, _):
        for policy in POLICIES:
            found = await measure(urls[0], token, policy)
            lost = found["lost"]
            print(
                f"{policy:<18} {found['steps_per_second']:>8.0f} {found['events']:>7}"
                f" {sum(lost) / len(lost):>19.1f}, {max(lost):>4}  {lost}"
            )
            results[policy] = found
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    if sys.argv[1:2] == ["agent"]:
        asyncio.run(agent(*sys.argv[2:]))
    else:
        asyncio.run(main())
