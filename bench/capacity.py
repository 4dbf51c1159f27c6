"""How many LangGraph super-steps one ``runstate serve`` process stores a second at
saturation, on SQLite and on PostgreSQL, measured from outside with wrk.

The body is one the SDK sent: ``RunstateSaver`` runs the 20-node chain of
``bench.langgraph`` once and the ``putGraphCheckpoint`` of a super-step in its middle
(the checkpoint with the writes of the node before it) is kept, with its thread,
checkpoint, parent and LangGraph task ids made placeholders. Each wrk connection
then writes the super-steps of a thread of its own, a new checkpoint a request
(``bench/wrk_graph.lua``), for ``BENCH_CAPACITY_SECONDS``; a super-step counts when
its answer names the Task (stored). Printed per database: super-steps a second,
p50 and p99 latency, the server's CPU per super-step (its process, from /proc) and
PostgreSQL's (``bench.peers.database_cpu``), beside the sizing LangGraph publishes
for its own Agent Server. Run with ``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

from bench.fanout import serving
from bench.langgraph import chain
from bench.peers import database_cpu
from bench.wrk import tree_cpu
from runstate.client import calls
from runstate.client import documents as doc
from runstate.integrations.langgraph import RunstateSaver
from tests.support import postgres_database

SECONDS = int(os.environ.get("BENCH_CAPACITY_SECONDS", "10"))
CONNECTIONS = int(os.environ.get("BENCH_CAPACITY_CONNECTIONS", "8"))
SCRIPT = Path(__file__).parent / "wrk_graph.lua"
PUBLISHED = (
    "LangGraph's published sizing for its Agent Server: 500 write requests a second"
    " on 15 API servers + 10 queue workers + an 8-CPU PostgreSQL"
)


async def captured(url: str, token: str, threads: list[str]) -> str:
    """A super-step's ``putGraphCheckpoint`` body as the saver sent it, ids made
    placeholders; each of ``threads`` made (a run of the chain on it)."""
    sent: list[dict[str, Any]] = []
    async with RunstateSaver.from_url(url, token) as saver:
        keep = saver._client.put_graph_checkpoint

        async def kept(**input: Any) -> Any:
            sent.append(input)
            return await keep(**input)

        saver._client.put_graph_checkpoint = kept  # type: ignore[method-assign]
        graph = chain().compile(checkpointer=saver)
        for thread in threads:
            config: Any = {"configurable": {"thread_id": thread}}
            await graph.ainvoke({"count": 0}, config, durability="sync")
    middle = next(i for i in sent[10:] if i.get("writes") and i["writes"][0]["node"])
    (group,) = middle["writes"]
    marked = {
        **middle,
        "taskId": "@TASK@",
        "checkpointId": "@CP@",
        "parentId": "@PARENT@",
        "writes": [
            {**group, "graphTaskId": "@NODE@", "node": {**group["node"], "graphTaskId": "@NODE@"}}
        ],
    }
    body = {
        "documentId": calls.TRUSTED[doc.PUT_GRAPH_CHECKPOINT],
        "variables": {"input": calls._some(**marked)},
    }
    return json.dumps(body)


def name_of(database_url: str | None) -> str | None:
    """The PostgreSQL database a URL names (None for SQLite's)."""
    return None if database_url is None else database_url.rpartition("/")[2].partition("?")[0]


def measure(name: str, database_url: str | None) -> None:
    """One server process on the database, saturated by CONNECTIONS wrk connections."""
    with serving(1, database_url=database_url, RUNSTATE_REQUEST_LOG="off") as served:
        (url,), token, (pid,) = served
        threads = [f"capacity-{uuid.uuid4()}" for _ in range(CONNECTIONS)]
        body = asyncio.run(captured(url, token, threads))
        env = {**os.environ, "BENCH_TASKS": ",".join(threads), "BENCH_TOKEN": token}
        command = ["wrk", "-t", str(CONNECTIONS), "-c", str(CONNECTIONS), "-d", f"{SECONDS}s"]
        server, database = tree_cpu(pid), database_cpu(name_of(database_url), redis=False)
        ran = subprocess.run(
            [*command, "-s", str(SCRIPT), url],
            env={**env, "BENCH_BODY": body},
            capture_output=True,
            text=True,
            check=True,
        )
        server = tree_cpu(pid) - server
        database = database_cpu(name_of(database_url), redis=False) - database
    figures = json.loads(ran.stdout.strip().splitlines()[-1])
    stored = figures["stored"]
    beside = f", PostgreSQL {1000 * database / stored:.2f} ms" if database_url else ""
    print(
        f"  {name:12s} {stored / SECONDS:7.0f} super-steps/s  p50 {figures['p50'] / 1000:.1f} ms"
        f"  p99 {figures['p99'] / 1000:.1f} ms  CPU a super-step: server"
        f" {1000 * server / stored:.2f} ms{beside}  ({figures['non2xx']} refused)",
        flush=True,
    )


def main() -> None:
    print(
        f"Capacity: one runstate serve process, {CONNECTIONS} wrk connections, {SECONDS} s,"
        " a putGraphCheckpoint of the 20-node chain a request (request log off)"
    )
    measure("SQLite", None)
    with postgres_database() as database_url:
        measure("PostgreSQL", database_url)
    print(f"  ({PUBLISHED})")


if __name__ == "__main__":
    main()
