"""Writes side by side: runstate over HTTP against LangGraph's in-process
checkpointer and a raw aiosqlite compare-and-swap, measured in this one run.

Every figure is the median of ROUNDS back-to-back rounds, on SQLite in WAL mode
with SQLite's default synchronous=FULL on all sides (read back and printed):

- LangGraph ``AsyncSqliteSaver.aput``: one checkpoint per call, each holding a
  small step output, in this process: the rate agent builders get today;
- raw aiosqlite: ``UPDATE ... SET version = version + 1 WHERE version = ?`` and one
  event INSERT per transaction, in this process: what the database alone allows;
- runstate: ``runstate serve`` on its own SQLite file, startStep and completeStep
  over HTTP from 1 and from 16 clients (one task each, asyncio in this process),
  and ``checkpointTask`` with 10 patches a call (counted in step writes).

This process's CPU time is printed beside each HTTP figure, so that the load
generator is known not to be the bottleneck. The raw figures go to
``bench/results/writes.json``. Run with ``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite
from langgraph.checkpoint.base import BaseCheckpointSaver, create_checkpoint, empty_checkpoint
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from bench.fanout import STEP, Graph, new_task, serving

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
WRITES = int(os.environ.get("BENCH_WRITES", "400"))
"""Writes per measurement (each client's share, with several clients)."""
CLIENTS = 16
PATCHES = 10
RESULTS = Path(__file__).parent / "results" / "writes.json"
OUTPUT = {"answer": "42", "source": "search", "tokens": 512}

Measure = Callable[[], Awaitable[dict[str, float]]]


async def langgraph_aput(path: Path, writers: int = 1, writes: int = WRITES) -> dict[str, float]:
    """Checkpoints a second through ``AsyncSqliteSaver.aput``, ``writers`` threads
    at once (coroutines of this process), ``writes`` in all."""
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        await saver.setup()
        sync = float((await (await saver.conn.execute("PRAGMA synchronous")).fetchone() or [0])[0])
        return {"rate": await aputs(saver, writers, writes), "synchronous": sync}


async def aputs(saver: BaseCheckpointSaver[Any], writers: int, writes: int) -> float:
    """Checkpoints a second through ``saver.aput``, ``writers`` threads at once
    (coroutines of this process), ``writes`` in all, each holding a small output."""
    each = writes // writers

    async def writer(n: int) -> None:
        config: Any = {"configurable": {"thread_id": f"bench-{n}", "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        for step in range(each):
            checkpoint = create_checkpoint(checkpoint, None, step)
            checkpoint["channel_values"] = {"step": step, "output": OUTPUT}
            metadata: Any = {"source": "loop", "step": step, "parents": {}}
            config = await saver.aput(config, checkpoint, metadata, {})

    began = time.perf_counter()
    await asyncio.gather(*(writer(n) for n in range(writers)))
    return each * writers / (time.perf_counter() - began)


async def raw_cas(path: Path) -> dict[str, float]:
    """Compare-and-swap writes a second, each with its event row, one connection."""
    async with aiosqlite.connect(path) as db:
        await db.execute("PRAGMA journal_mode=WAL")
        sync = float((await (await db.execute("PRAGMA synchronous")).fetchone() or [0])[0])
        await db.execute("CREATE TABLE tasks (id INTEGER PRIMARY KEY, version INTEGER)")
        await db.execute(
            "CREATE TABLE events (task INT, seq INT, body TEXT, PRIMARY KEY (task, seq))"
        )
        await db.execute("INSERT INTO tasks VALUES (1, 1)")
        await db.commit()
        body = json.dumps(OUTPUT)
        began = time.perf_counter()
        for version in range(1, WRITES + 1):
            cursor = await db.execute(
                "UPDATE tasks SET version = version + 1 WHERE id = 1 AND version = ?", (version,)
            )
            assert cursor.rowcount == 1
            await db.execute("INSERT INTO events VALUES (1, ?, ?)", (version + 1, body))
            await db.commit()
        return {"rate": WRITES / (time.perf_counter() - began), "synchronous": sync}


async def drive(api: Graph, task_id: str) -> None:
    """``WRITES`` single-step writes: steps started and completed, one by one."""
    version = 1
    for write in range(WRITES):
        index, name = divmod(write, 2)
        kind = "StepRefInput" if name == 0 else "CompleteStepInput"
        mutation = ("startStep", "completeStep")[name]
        data = await api(
            STEP.format(name=mutation, kind=kind),
            input={"taskId": task_id, "stepIndex": index, "expectedVersion": version}
            | ({"output": OUTPUT} if name else {}),
        )
        version = data[mutation]["version"]


async def checkpoints(api: Graph, task_id: str) -> None:
    """``WRITES`` step writes as checkpoints of ``PATCHES`` steps each."""
    version = 1
    for first in range(0, WRITES, PATCHES):
        patches = [
            {"index": i, "status": "SUCCESS", "output": OUTPUT}
            for i in range(first, first + PATCHES)
        ]
        data = await api(
            STEP.format(name="checkpointTask", kind="CheckpointTaskInput"),
            input={"taskId": task_id, "expectedVersion": version, "steps": patches},
        )
        version = data["checkpointTask"]["version"]


async def over_http(url: str, token: str, clients: int, work: Any) -> dict[str, float]:
    """Step writes a second from ``clients`` clients doing ``work`` on a task each,
    and this process's CPU seconds per wall second meanwhile."""
    apis = [Graph(url, token) for _ in range(clients)]
    steps = WRITES if work is checkpoints else WRITES // 2
    task_ids = [await new_task(api, steps) for api in apis]
    cpu, began = time.process_time(), time.perf_counter()
    await asyncio.gather(*(work(api, t) for api, t in zip(apis, task_ids, strict=True)))
    wall = time.perf_counter() - began
    for api in apis:
        await api.http.aclose()
    return {"rate": clients * WRITES / wall, "client_cpu": (time.process_time() - cpu) / wall}


def median(rounds: list[dict[str, float]], key: str = "rate") -> float:
    return statistics.median(r[key] for r in rounds)


def main() -> None:
    load = os.getloadavg()
    print(
        f"write benchmark: {ROUNDS} rounds, {WRITES} writes a measurement, SQLite (WAL),"
        f" {os.cpu_count()} cores, load average {load[0]:.2f} at start"
    )
    found: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp, serving(1) as (urls, token, _):
        for round_ in range(ROUNDS):
            base = Path(tmp) / f"round{round_}"
            base.mkdir()
            found.setdefault("langgraph", []).append(asyncio.run(langgraph_aput(base / "lg.db")))
            found.setdefault("raw", []).append(asyncio.run(raw_cas(base / "raw.db")))
            for name, clients, work in (
                ("http_1", 1, drive),
                (f"http_{CLIENTS}", CLIENTS, drive),
                ("checkpoint", 1, checkpoints),
            ):
                found.setdefault(name, []).append(
                    asyncio.run(over_http(urls[0], token, clients, work))
                )
    default_sync = sqlite3.connect(":memory:").execute("PRAGMA synchronous").fetchone()[0]
    langgraph = median(found["langgraph"])
    rows: list[tuple[str, str, float | None]] = [
        ("LangGraph AsyncSqliteSaver.aput, in process", "langgraph", None),
        ("raw aiosqlite CAS + event, in process", "raw", None),
        ("runstate over HTTP, single-step writes, 1 client", "http_1", 0.25),
        (f"runstate over HTTP, single-step writes, {CLIENTS} clients", f"http_{CLIENTS}", 0.5),
        (f"runstate checkpointTask, {PATCHES} patches a call (step writes)", "checkpoint", 2.0),
    ]
    print(f"{'figure':<64} {'per s':>7} {'vs aput':>8} {'target':>7}  load generator's CPU")
    for label, key, target in rows:
        rate = median(found[key])
        aim = "" if target is None else f">={target:.2f}x"
        cpu = f"{median(found[key], 'client_cpu'):.0%} of a core" if target else ""
        print(f"{label:<64} {rate:>7.0f} {rate / langgraph:>7.2f}x {aim:>7}  {cpu}")
    print(
        f"synchronous (2 = FULL): LangGraph {found['langgraph'][0]['synchronous']:.0f},"
        f" raw {found['raw'][0]['synchronous']:.0f}, runstate {default_sync} (Tortoise keeps"
        f" SQLite's default); load average {os.getloadavg()[0]:.2f} at end"
    )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"load": load, "rounds": found}, indent=1) + "\n")


if __name__ == "__main__":
    main()
