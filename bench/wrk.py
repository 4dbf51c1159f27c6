"""Writes measured from outside the server, with a load generator that costs next
to nothing (wrk, a C program), side by side with the floors of the stack in the
same run:

- the floors, served by uvicorn as ``runstate serve`` is (``bench/floors.py``): a
  bare Starlette JSON POST, the trivial mutation below executed by graphql-core
  alone, and a trivial Strawberry mutation of the same name and input as
  runstate's;
- runstate single-step writes (``runstate serve`` on SQLite, rate limits off):
  each wrk connection drives its own task, startStep then completeStep, each
  with the version the previous answer gave (``bench/wrk_writes.lua``), from 1
  and from 16 connections, the SDK's documents named by id as the SDK sends them
  (the lean path, ``resolvers.lean``), once more with each completeStep
  reporting spend (tokens, cost and model), and once more sent as text (the
  standard path). Writes are counted from the tasks' versions afterwards, not
  from answers;
- LangGraph ``AsyncSqliteSaver.aput``, in this process, 16 coroutines on their
  own threads;
- on PostgreSQL: ``runstate serve --workers 2`` (two processes, Redis between
  them) under the same 16 wrk connections, against LangGraph's
  ``AsyncPostgresSaver.aput`` from 16 coroutines on a pool of 16 connections (as
  LangGraph's documentation sets it up), on fresh databases of the same server.

For each: requests (or writes) a second, p50 and p99 latency, and the server's
CPU per request from /proc (a server of several workers: all its processes).
The raw figures go to ``bench/results/wrk.json``. Run with ``make bench`` (which
installs wrk when it is missing); never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from bench.fanout import Graph, cpu_seconds, free_port, new_task, serving
from bench.writes import aputs, langgraph_aput
from runstate.client import documents as doc
from tests.support import postgres_database

SECONDS = int(os.environ.get("BENCH_WRK_SECONDS", "10"))
CONNECTIONS = (1, 16)
STEPS = 5000
"""Steps of each task wrk drives: more than a connection writes in SECONDS."""
SCRIPT = Path(__file__).parent / "wrk_writes.lua"
RESULTS = Path(__file__).parent / "results" / "wrk.json"
APUT_WRITES = 4000
QUIET = ("--log-level", "warning", "--no-access-log")
"""uvicorn's options for the floors: as quiet as ``runstate serve``."""


SPEND = ',"spend":{"inputTokens":1200,"outputTokens":340,"costMicros":5100,"model":"gpt-4o-mini"}'
"""What a completeStep with spend reports: one model call's tokens, cost and model."""


def bodies(by_id: bool, spend: bool = False) -> dict[str, str]:
    """The request bodies of the SDK's startStep and completeStep, by id (the lean
    path) or as text (the standard path), as wrk_writes.lua's templates; with
    ``spend``, each completeStep reports what the step spent."""

    def body(document: str, output: str) -> str:
        named = {"documentId": doc.document_id(document)} if by_id else {"query": document}
        variables = '{"input":{"taskId":"%s","stepIndex":%d,"expectedVersion":%d' + output + "}}"
        return json.dumps(named)[:-1] + ',"variables":' + variables + "}"

    return {
        "BENCH_START": body(doc.START_STEP, ""),
        "BENCH_COMPLETE": body(
            doc.COMPLETE_STEP, ',"output":{"answer":"42","tokens":512}' + (SPEND if spend else "")
        ),
    }


def wrk(
    url: str, connections: int, tasks: list[str], token: str, sent: dict[str, str] | None = None
) -> dict[str, Any]:
    """One wrk run of SECONDS with ``connections`` connections (a thread each, so
    that each keeps its own task and version), sending ``sent`` (``bodies``; the
    script's own documents when None); what its script's done() printed."""
    env = {**os.environ, "BENCH_TASKS": ",".join(tasks), "BENCH_TOKEN": token, **(sent or {})}
    command = ["wrk", "-t", str(connections), "-c", str(connections), "-d", f"{SECONDS}s"]
    ran = subprocess.run(
        [*command, "-s", str(SCRIPT), url], env=env, capture_output=True, text=True, check=True
    )
    figures: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return figures


def measured(
    url: str,
    pid: int,
    connections: int,
    tasks: list[str],
    token: str,
    sent: dict[str, str] | None = None,
) -> tuple[dict[str, Any], float]:
    """A wrk run and the CPU seconds during it of the server and its children."""
    began = tree_cpu(pid)
    figures = wrk(url, connections, tasks, token, sent)
    return figures, tree_cpu(pid) - began


def tree_cpu(pid: int) -> float:
    """The CPU seconds of a process and its children (a server's workers), from /proc."""
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = (entry / "stat").read_text().rpartition(")")[2].split()[1]
            except OSError:  # it ended meanwhile
                continue
            if int(parent) == pid:
                children.append(int(entry.name))
    return cpu_seconds(pid) + sum(tree_cpu(child) for child in children)


@contextmanager
def floor(app: str) -> Iterator[tuple[str, int]]:
    """``bench.floors:<app>`` under uvicorn on a free port: its URL and pid."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", f"bench.floors:{app}", "--port", str(port), *QUIET],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                httpx.post(f"{url}/graphql", json={}, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url, server.pid
    finally:
        server.terminate()
        server.wait()


async def tasks_of(url: str, token: str, count: int) -> list[str]:
    """``count`` new tasks of STEPS steps, one session each."""
    api = Graph(url, token)
    try:
        return [await new_task(api, STEPS) for _ in range(count)]
    finally:
        await api.http.aclose()


async def versions(url: str, token: str, tasks: list[str]) -> int:
    """The writes the tasks took: their versions past the first."""
    api = Graph(url, token)
    query = "query($id: ID!) { task(id: $id) { ... on Task { version } } }"
    try:
        return sum([(await api(query, id=t))["task"]["version"] - 1 for t in tasks])
    finally:
        await api.http.aclose()


def written(
    name: str,
    url: str,
    pid: int,
    connections: int,
    token: str,
    *,
    by_id: bool = True,
    spend: bool = False,
) -> dict[str, Any]:
    """One wrk run of single-step writes on new tasks of the server at ``url``, the
    SDK's documents sent by id (or as text), each completeStep with spend if
    ``spend``, its line printed: wrk's figures, the writes the tasks took, their
    rate and the server's CPU per write."""
    tasks = asyncio.run(tasks_of(url, token, connections))
    figures, cpu = measured(url, pid, connections, tasks, token, bodies(by_id, spend))
    writes = asyncio.run(versions(url, token, tasks))
    rate = writes / SECONDS
    line(name, rate, figures, cpu, writes)
    return {**figures, "writes": writes, "rate": rate, "cpu_per_write": cpu / max(writes, 1)}


def line(name: str, rate: float, figures: dict[str, Any], cpu: float, count: int) -> None:
    print(
        f"  {name:46s} {rate:8,.0f}/s  p50 {figures['p50'] / 1000:6.2f} ms"
        f"  p99 {figures['p99'] / 1000:6.2f} ms  server CPU {1000 * cpu / max(count, 1):5.2f} ms",
        flush=True,
    )


def main() -> None:
    if shutil.which("wrk") is None:
        sys.exit("bench.wrk needs wrk: apt-get install wrk (make bench installs it)")
    print(f"Writes from wrk, {SECONDS} s a run; per second, latency, server CPU per request")
    results: dict[str, Any] = {}
    names = {
        "bare": "bare Starlette JSON POST",
        "executed": "graphql-core execute alone",
        "trivial": "trivial Strawberry mutation",
    }
    for app in names:
        with floor(app) as (url, pid):
            figures, cpu = measured(url, pid, 16, ["floor"] * 16, "none")
        rate = figures["requests"] / SECONDS
        line(f"{names[app]}, 16 connections", rate, figures, cpu, figures["requests"])
        results[app] = {**figures, "rate": rate, "cpu_per_request": cpu / figures["requests"]}
    with serving(1, RUNSTATE_MAX_STEPS=str(STEPS)) as ((url,), token, (pid,)):
        for connections in CONNECTIONS:
            name = f"runstate single-step writes, {connections} conn."
            results[f"runstate_{connections}"] = written(name, url, pid, connections, token)
        name = "the same, each completeStep with spend, 16 conn."
        results["runstate_spend_16"] = written(name, url, pid, 16, token, spend=True)
        name = "the same, sent as text: the standard path, 16 conn."
        results["runstate_text_16"] = written(name, url, pid, 16, token, by_id=False)
    postgres(results)
    with tempfile.TemporaryDirectory() as tmp:
        aput = asyncio.run(langgraph_aput(Path(tmp) / "lg.db", 16, APUT_WRITES))["rate"]
    print(f"  {'LangGraph AsyncSqliteSaver.aput, 16 coroutines':46s} {aput:8,.0f}/s  (in process)")
    results["aput_16"] = {"rate": aput}
    floor_rate = results["trivial"]["rate"]
    for connections in CONNECTIONS:
        rate = results[f"runstate_{connections}"]["rate"]
        print(
            f"  runstate, {connections} conn.: {rate / aput:.2f}x aput,"
            f" {rate / floor_rate:.3f}x the trivial mutation"
        )
    cpu = results["runstate_16"]["cpu_per_write"]
    standard = results["runstate_text_16"]["cpu_per_write"]
    trivial = results["trivial"]["cpu_per_request"]
    print(
        f"  server CPU per single-step write, 16 conn.: {1000 * cpu:.2f} ms,"
        f" {cpu / trivial:.1f}x the trivial mutation's (target <= 2.5x);"
        f" as text {1000 * standard:.2f} ms, {standard / trivial:.1f}x"
    )
    rate = results["runstate_16"]["rate"]
    print(f"  runstate single-step writes / aput, 16: {rate / aput:.2f}x (target >= 0.6x)")
    spent = results["runstate_spend_16"]
    print(
        f"  with spend / without, 16 conn.: {spent['rate'] / rate:.2f}x the writes a second,"
        f" {spent['cpu_per_write'] / cpu:.2f}x the server CPU per write"
    )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


def postgres(results: dict[str, Any]) -> None:
    """runstate on PostgreSQL (two workers, 16 wrk connections) against
    ``AsyncPostgresSaver.aput`` from 16 coroutines, on fresh databases."""
    with postgres_database() as runstate_db, postgres_database() as langgraph_db:
        with serving(1, runstate_db, workers=2, RUNSTATE_MAX_STEPS=str(STEPS)) as (
            (url,),
            token,
            (pid,),
        ):
            name = "runstate on PostgreSQL, --workers 2, 16 conn."
            found = results["postgres_16"] = written(name, url, pid, 16, token)
        aput = asyncio.run(postgres_aput(langgraph_db))
    print(
        f"  {'LangGraph AsyncPostgresSaver.aput, 16 coroutines':46s} {aput:8,.0f}/s  (in process)"
    )
    ratio = found["rate"] / aput
    print(f"  runstate on PostgreSQL: {ratio:.2f}x AsyncPostgresSaver (target >= 0.5x)")
    results["postgres_aput_16"] = {"rate": aput}


async def postgres_aput(url: str) -> float:
    """``AsyncPostgresSaver.aput`` a second from 16 coroutines on a pool of 16."""
    conninfo = url.replace("postgres://", "postgresql://", 1)
    settings = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    async with AsyncConnectionPool(conninfo, max_size=16, kwargs=settings, open=False) as pool:
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await saver.setup()
        await aputs(saver, 16, 160)  # warm: the pool's connections, prepared plans
        return await aputs(saver, 16, APUT_WRITES)


if __name__ == "__main__":
    main()
