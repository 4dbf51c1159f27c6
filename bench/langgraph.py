"""What checkpointing costs a LangGraph graph, per super-step, side by side.

A real ``StateGraph`` of 20 trivial nodes in a chain runs ROUNDS times (a new
thread each time) with each checkpointer, checkpoints stored before the next
super-step runs (``durability="sync"``, so their cost is in the run's time), and
once with no checkpointer at all. A checkpointer's cost per super-step is its
run's time less the bare run's, over the super-steps run:

- LangGraph's ``AsyncSqliteSaver`` on a SQLite file, and ``AsyncPostgresSaver``
  on the machine's PostgreSQL (a fresh database), in this process;
- ``RunstateSaver`` against ``runstate serve`` on SQLite, and on PostgreSQL (a
  fresh database of the same server), with the server process's CPU per
  super-step (from /proc) beside; on SQLite once more making each new thread
  apart from its first checkpoint (as before ``newThread``), with the lean path off
  (``RUNSTATE_LEAN=false``: trusted writes run the standard path), once with no
  request log line (``RUNSTATE_REQUEST_LOG=off``), and watched (``saver.watch``:
  each node's start shown, going with the checkpoint before it), beside the same
  watched graph sending each start in a request of its own (as it did before);
  on PostgreSQL once more watched.

Run with ``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph

from bench.fanout import cpu_seconds, serving
from runstate.integrations.langgraph import RunstateSaver
from tests.support import postgres_database

NODES = 20
ROUNDS = int(os.environ.get("BENCH_GRAPH_ROUNDS", "20"))
REPEATS = 3


class Count(TypedDict):
    count: int


def chain() -> StateGraph[Count]:
    """``NODES`` nodes in a line, each adding one."""
    builder = StateGraph(Count)

    def step(state: Count) -> dict[str, int]:
        return {"count": state["count"] + 1}

    names = [f"n{i}" for i in range(NODES)]
    for name in names:
        builder.add_node(name, step)
    builder.add_edge(START, names[0])
    for first, then in itertools.pairwise(names):
        builder.add_edge(first, then)
    builder.add_edge(names[-1], END)
    return builder


async def run(saver: BaseCheckpointSaver[Any] | None) -> float:
    """Seconds for ROUNDS runs of the chain, each on a thread of its own; a
    ``Watched`` saver's graph reports each node's start (``RunstateSaver.watch``)."""
    graph = chain().compile(checkpointer=saver)
    if isinstance(saver, Watched):
        graph = saver.watch(graph)
    # Without a checkpointer LangGraph 1.2 fails on durability="sync": nothing to wait for.
    options: dict[str, Any] = {} if saver is None else {"durability": "sync"}
    began = time.perf_counter()
    for _ in range(ROUNDS):
        config: Any = {"configurable": {"thread_id": str(uuid.uuid4())}}
        done = await graph.ainvoke({"count": 0}, config, **options)
        assert done["count"] == NODES
    return time.perf_counter() - began


class Watched(RunstateSaver):
    """A RunstateSaver whose graphs ``run`` watches."""


class WatchedAlone(Watched):
    """A watched saver that sends each node's start in a request of its own, as
    before the starts went with the checkpoint before them (the A of that A/B)."""

    def _next_nodes(self, *_: Any) -> list[str]:
        return []


class MadeApart(RunstateSaver):
    """A saver that makes a new thread apart from its first checkpoint: a refused
    checkpoint, a ``startSession`` and a ``createTask`` before it is sent again, as
    before ``newThread`` (the A of that A/B)."""

    def _new_thread(self, thread_id: str) -> dict[str, Any] | None:
        return None


@asynccontextmanager
async def sqlite_saver(path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        await saver.setup()
        yield saver


@asynccontextmanager
async def postgres_saver(url: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    conninfo = url.replace("postgres://", "postgresql://", 1)
    async with AsyncPostgresSaver.from_conn_string(conninfo) as saver:
        await saver.setup()
        yield saver


def per_step(seconds: float, bare: float) -> float:
    """Milliseconds of checkpointing per super-step."""
    return 1000 * (seconds - bare) / (ROUNDS * NODES)


async def measure(name: str, opened: Any, bare: float, server: int | None = None) -> float:
    """The median checkpointing cost per super-step of REPEATS rounds, in ms; with
    a ``server`` pid, that server's CPU per super-step beside it."""
    async with opened as saver:
        await run(saver)  # warm: connections, caches, the first thread's rows
        began = cpu_seconds(server) if server else 0.0
        costs = [per_step(await run(saver), bare) for _ in range(REPEATS)]
        spent = cpu_seconds(server) - began if server else 0.0
    cost = statistics.median(costs)
    beside = f"  (server CPU {1000 * spent / (REPEATS * ROUNDS * NODES):.2f} ms)" if server else ""
    print(f"  {name:52s} {cost:7.2f} ms{beside}", flush=True)
    return cost


def main() -> None:
    print(
        f"LangGraph checkpointing: {NODES}-node chain, {ROUNDS} runs a round, median of"
        f" {REPEATS} rounds, durability=sync; ms of checkpointing per super-step"
    )
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        runstate_pg = stack.enter_context(postgres_database())
        langgraph_pg = stack.enter_context(postgres_database())
        (sqlite_url,), token, (sqlite_pid,) = stack.enter_context(serving(1))
        (standard_url,), standard_token, (standard_pid,) = stack.enter_context(
            serving(1, RUNSTATE_LEAN="false")
        )
        (pg_url,), pg_token, (pg_pid,) = stack.enter_context(serving(1, database_url=runstate_pg))
        (quiet_url,), quiet_token, (quiet_pid,) = stack.enter_context(
            serving(1, RUNSTATE_REQUEST_LOG="off")
        )

        async def rounds() -> dict[str, float]:
            await run(None)
            bare = statistics.median([await run(None) for _ in range(REPEATS)])
            print(
                f"  {'no checkpointer (the graph alone, per super-step)':52s}"
                f" {1000 * bare / (ROUNDS * NODES):7.2f} ms"
            )
            return {
                "sqlite": await measure(
                    "LangGraph AsyncSqliteSaver", sqlite_saver(tmp / "lg.db"), bare
                ),
                "runstate_sqlite": await measure(
                    "RunstateSaver, runstate serve on SQLite",
                    RunstateSaver.from_url(sqlite_url, token),
                    bare,
                    sqlite_pid,
                ),
                "made_apart": await measure(
                    "the same, a new thread made apart from its first checkpoint",
                    MadeApart.from_url(sqlite_url, token),
                    bare,
                    sqlite_pid,
                ),
                "runstate_quiet": await measure(
                    "the same, no request log line (RUNSTATE_REQUEST_LOG=off)",
                    RunstateSaver.from_url(quiet_url, quiet_token),
                    bare,
                    quiet_pid,
                ),
                "watched_sqlite": await measure(
                    "RunstateSaver watched (starts shown), on SQLite",
                    Watched.from_url(sqlite_url, token),
                    bare,
                    sqlite_pid,
                ),
                "watched_alone": await measure(
                    "the same, each start in a request of its own",
                    WatchedAlone.from_url(sqlite_url, token),
                    bare,
                    sqlite_pid,
                ),
                "runstate_standard": await measure(
                    "the same, trusted writes on the standard path",
                    RunstateSaver.from_url(standard_url, standard_token),
                    bare,
                    standard_pid,
                ),
                "postgres": await measure(
                    "LangGraph AsyncPostgresSaver", postgres_saver(langgraph_pg), bare
                ),
                "runstate_postgres": await measure(
                    "RunstateSaver, runstate serve on PostgreSQL",
                    RunstateSaver.from_url(pg_url, pg_token),
                    bare,
                    pg_pid,
                ),
                "watched_postgres": await measure(
                    "RunstateSaver watched (starts shown), on PostgreSQL",
                    Watched.from_url(pg_url, pg_token),
                    bare,
                    pg_pid,
                ),
            }

        found = asyncio.run(rounds())
    print(
        f"  RunstateSaver / AsyncPostgresSaver on PostgreSQL:"
        f" {found['runstate_postgres'] / found['postgres']:.1f}x (target <= 3x)"
    )
    print(
        f"  RunstateSaver / AsyncSqliteSaver on SQLite:"
        f" {found['runstate_sqlite'] / found['sqlite']:.1f}x (target <= 3x)"
    )


if __name__ == "__main__":
    main()
