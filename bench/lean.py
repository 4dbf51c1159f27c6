"""Whether the lean path (``resolvers.lean``) earns its place: the server's CPU per
operation with it on and off, in one run.

Four single-process ``runstate serve`` servers run side by side for the whole
run: SQLite with the lean path on and off (``RUNSTATE_LEAN``), PostgreSQL with it
on and off (fresh databases of the machine's server). Each round measures, on each
of the four, a LangGraph super-step (``bench.langgraph.run``: a 20-node chain,
``durability="sync"``, through ``RunstateSaver``) and a single write (wrk driving
startStep/completeStep with the SDK's documents by id, one connection,
``bench/wrk_writes.lua``), on and off interleaved (on first in even rounds, off
first in odd ones), so that a machine busy with other work weighs on both alike.
Server CPU is the server process tree's (``/proc``), before and after.

It prints, per case, the median CPU per operation of each arm, the paired
per-round ratio, and the share of the server's CPU the lean path saves (1 -
on/off) against the rule it is kept by: at least a fifth, or it goes (issue 54).
Run with ``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
from collections.abc import Callable

import bench.langgraph as lg
import bench.wrk as bw
from bench.fanout import serving
from runstate.integrations.langgraph import RunstateSaver
from tests.support import postgres_database

ROUNDS = int(os.environ.get("BENCH_LEAN_ROUNDS", "5"))
KEEPS = 0.2
"""The share of the server's CPU the lean path must save to stay."""
SUPER_STEPS = lg.ROUNDS * lg.NODES


def super_step(url: str, token: str, pid: int) -> float:
    """Server CPU (ms) per super-step of one ``bench.langgraph.run``."""

    async def run() -> float:
        async with RunstateSaver.from_url(url, token) as saver:
            cpu = bw.tree_cpu(pid)
            await lg.run(saver)
            return 1000 * (bw.tree_cpu(pid) - cpu) / SUPER_STEPS

    return asyncio.run(run())


def single_write(url: str, token: str, pid: int) -> float:
    """Server CPU (ms) per write of a wrk run on one connection, the writes counted
    from the task's version afterwards."""
    tasks = asyncio.run(bw.tasks_of(url, token, 1))
    _, cpu = bw.measured(url, pid, 1, tasks, token, bw.bodies(True))
    return 1000 * cpu / max(asyncio.run(bw.versions(url, token, tasks)), 1)


CASES: dict[str, Callable[[str, str, int], float]] = {
    "super-step": super_step,
    "single write": single_write,
}


def main() -> None:
    print(f"lean path A/B: {ROUNDS} interleaved rounds, server CPU per operation (ms)")
    bw.SECONDS, bw.STEPS = 5, 5000
    samples: dict[tuple[str, str, str], list[float]] = {}
    with contextlib.ExitStack() as stack:
        servers = {}
        for backend in ("sqlite", "postgres"):
            for arm in ("on", "off"):
                database = (
                    stack.enter_context(postgres_database()) if backend == "postgres" else None
                )
                lean = "true" if arm == "on" else "false"
                servers[backend, arm] = stack.enter_context(
                    serving(1, database, RUNSTATE_LEAN=lean, RUNSTATE_MAX_STEPS="5000")
                )
        for (url,), token, (pid,) in servers.values():  # warm each: imports, caches
            super_step(url, token, pid)
        for i in range(ROUNDS):
            arms = ("on", "off") if i % 2 == 0 else ("off", "on")
            for case, measure in CASES.items():
                for backend in ("sqlite", "postgres"):
                    for arm in arms:
                        (url,), token, (pid,) = servers[backend, arm]
                        samples.setdefault((case, backend, arm), []).append(
                            measure(url, token, pid)
                        )
    for case in CASES:
        for backend in ("sqlite", "postgres"):
            on, off = samples[case, backend, "on"], samples[case, backend, "off"]
            saved = 1 - statistics.median(on) / statistics.median(off)
            paired = statistics.median(b / a for a, b in zip(on, off, strict=True))
            verdict = "keeps it" if saved >= KEEPS else "below the rule"
            print(
                f"  {case:12s} {backend:8s} on {statistics.median(on):6.3f}"
                f"  off {statistics.median(off):6.3f}  off/on paired {paired:.2f}"
                f"  saves {100 * saved:4.1f}% ({verdict}: {100 * KEEPS:.0f}%)"
            )


if __name__ == "__main__":
    main()
