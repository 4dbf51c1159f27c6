"""What an AG-UI watcher costs the server, beside a ``taskProgress`` subscriber of the
same task. One ``runstate serve`` on SQLite; BENCH_AGUI_WATCHERS (100) watchers of
one task, in two rounds:

1. ``taskProgress`` subscriptions (``bench/watchers.c``, a C program on epoll; caught
   up, they share the relay's one reader and one rendering per event);
2. AG-UI runs (``POST /agui/tasks/{taskId}``), each read by ``curl -N``, a C program
   from Debian's packages, into a file: every stream has its own inbox and builds its
   own frames (a delta and step frames per event, each with its run's cursor).

The writer (one keep-alive connection, ``fanout.Wire``) starts and completes
BENCH_STEPS steps (100: 200 events) as fast as it can. For each round: the
server's CPU seconds while the writer ran (from /proc), per event delivered to one
watcher, the writer's rate, and the watchers that missed or misordered an event
(must be 0); then the ratio of AG-UI's CPU per delivered event to taskProgress's,
the baseline of the same run. Run with ``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from bench.fanout import STEPS, Committed, Wire, cpu_seconds, new_task, serving, watched, write

WATCHERS = int(os.environ.get("BENCH_AGUI_WATCHERS", "100"))


def frames_of(path: Path) -> list[dict[str, Any]]:
    """The events a curl wrote, one per ``data:`` line."""
    return [
        json.loads(line[6:]) for line in path.read_text().splitlines() if line.startswith("data: ")
    ]


async def progress_round(url: str, token: str, pid: int) -> dict[str, Any]:
    """``WATCHERS`` taskProgress subscribers of a task while its writer runs."""
    api = Wire(url, token)
    task_id = await new_task(api)

    async def writer(committed: Committed, sent: Committed) -> float:
        return await write(api, task_id, committed, None, STEPS, 0.0, sent)

    try:
        result = await watched("runstate", WATCHERS, [task_id], token, [url], writer, STEPS, [pid])
    finally:
        await api.aclose()
    return {"cpu": result["server_cpu"], "rate": result["rate"], "wrong": result["wrong"]}


async def agui_round(url: str, token: str, pid: int, tmp: Path) -> dict[str, Any]:
    """``WATCHERS`` AG-UI runs of a task, each read by ``curl -N``, while its writer runs."""
    api = Wire(url, token)
    task_id = await new_task(api)
    session = await api("query($t: ID!) { task(id: $t) { ... on Task { sessionId } } }", t=task_id)
    body = json.dumps({"threadId": session["task"]["sessionId"], "runId": "r", "messages": []})
    outputs = [tmp / f"agui-{i}.txt" for i in range(WATCHERS)]
    curls = [
        await asyncio.create_subprocess_exec(
            "curl",
            "-sN",
            "-X",
            "POST",
            f"{url}/agui/tasks/{task_id}",
            "-H",
            f"Authorization: Bearer {token}",
            "-H",
            "Content-Type: application/json",
            "--data",
            body,
            "-o",
            str(path),
        )
        for path in outputs
    ]
    try:
        await opened(outputs)
        before = cpu_seconds(pid)
        rate = await write(api, task_id, {}, None)
        for curl in curls:
            await asyncio.wait_for(curl.wait(), 120)
        cpu = cpu_seconds(pid) - before
    finally:
        await api.aclose()
        for curl in curls:
            if curl.returncode is None:
                curl.kill()
                await curl.wait()
    expected = list(range(2, 2 * STEPS + 2))
    wrong = 0
    for path in outputs:
        deltas = [
            e["metadata"]["runstate"]["seq"] for e in frames_of(path) if e["type"] == "STATE_DELTA"
        ]
        wrong += deltas != expected
    return {"cpu": cpu, "rate": rate, "wrong": wrong}


async def opened(outputs: list[Path], within: float = 60) -> None:
    """Until every run has opened (its snapshot has come), polling for ``within`` s."""
    for _ in range(int(within / 0.01)):
        if all(p.exists() and p.read_text().count("data: ") >= 2 for p in outputs):
            return
        await asyncio.sleep(0.01)
    raise SystemExit(f"the AG-UI runs did not all open within {within:g} s")


def line(name: str, result: dict[str, Any]) -> str:
    per_event = result["cpu"] / (WATCHERS * 2 * STEPS) * 1e6
    return (
        f"  {name}: server CPU {result['cpu']:.2f} s, {per_event:.0f} us per event delivered"
        f" to one watcher; writer {result['rate']:.0f} events/s; watchers with a missing or"
        f" misordered event: {result['wrong']} (must be 0)"
    )


async def main() -> None:
    if shutil.which("curl") is None:
        raise SystemExit("runstate: bench.agui needs curl (apt-get install curl)")
    print(f"AG-UI runs beside taskProgress: {WATCHERS} watchers of one task, {2 * STEPS} events")
    with serving(1) as (urls, token, pids), tempfile.TemporaryDirectory() as tmp:
        baseline = await progress_round(urls[0], token, pids[0])
        agui = await agui_round(urls[0], token, pids[0], Path(tmp))
    print(line("taskProgress (baseline)", baseline))
    print(line("AG-UI", agui))
    ratio = agui["cpu"] / baseline["cpu"]
    print(f"  AG-UI / taskProgress, server CPU per delivered event: {ratio:.1f}x")


if __name__ == "__main__":
    asyncio.run(main())
