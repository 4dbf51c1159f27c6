"""What sessionActivity watchers cost a server: ``runstate serve`` on SQLite, WATCHERS
subscribers of one session (one WebSocket each, opened from this process), a writer
stepping one of its tasks at PACE events a second for EVENTS events. It reports the
writes a second the writer kept, the server's CPU over the writes, the events its
streams read from the database because live delivery missed them
(``runstate_gap_filled_events``), and that every watcher got every event once, in
order (memory per idle subscriber: ``bench.memory``). Before sessionActivity
followed the relay, and while the head checks flagged every watcher of a session
with a task changed lately, the server spent a whole core here and the writer fell
behind its pace.

The watchers are Python clients: their CPU is not the server's, but on a small
machine it competes with it; compare runs on one machine, not across machines.
Run with ``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

from bench.fanout import Committed, Graph, cpu_seconds, serving, write

WATCHERS = int(os.environ.get("BENCH_SESSION_WATCHERS", "1000"))
PACE = 5.0
EVENTS = 100
SETTLE = 5.0
"""Seconds the subscribers are left before the writes (they park with the relay)."""

QUERY = "subscription($id: ID!) { sessionActivity(sessionId: $id) { taskId seq kind } }"


async def watcher(url: str, token: str, session_id: str, ready: asyncio.Event) -> list[int]:
    """A subscriber of the session until it has seq EVENTS + 1 of the task: the seqs
    it got, in order."""
    socket: ClientConnection = await connect(
        url, subprotocols=[Subprotocol("graphql-transport-ws")]
    )
    async with socket:
        init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
        await socket.send(json.dumps(init))
        await socket.recv()
        payload = {"query": QUERY, "variables": {"id": session_id}}
        await socket.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))
        ready.set()
        seqs: list[int] = []
        while not seqs or seqs[-1] < EVENTS + 1:
            message = json.loads(await socket.recv())
            assert message["type"] == "next", message
            seqs.append(message["payload"]["data"]["sessionActivity"]["seq"])
        return seqs


METRICS_TOKEN = "bench-sessions-metrics"


def gap_filled(url: str) -> float:
    """The server's ``runstate_gap_filled_events`` so far."""
    headers = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    text = httpx.get(f"{url}/metrics", headers=headers, timeout=10).text
    found = re.search(r"^runstate_gap_filled_events_total (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def measure(url: str, token: str, pid: int) -> dict[str, Any]:
    api = Graph(url, token)
    session = await api("mutation { startSession(input: {}) { ... on AgentSession { id } } }")
    session_id = session["startSession"]["id"]
    plan = [{"action": f"step-{i}"} for i in range(EVENTS // 2)]
    created = await api(
        "mutation($input: CreateTaskInput!) { createTask(input: $input) { ... on Task { id } } }",
        input={"sessionId": session_id, "goal": "bench", "steps": plan},
    )
    task_id = created["createTask"]["id"]
    ws_url = url.replace("http", "ws", 1) + "/graphql"
    running: list[asyncio.Task[list[int]]] = []
    for _ in range(0, WATCHERS, 100):
        readies = [asyncio.Event() for _ in range(min(100, WATCHERS - len(running)))]
        running += [
            asyncio.create_task(watcher(ws_url, token, session_id, ready)) for ready in readies
        ]
        await asyncio.gather(*(ready.wait() for ready in readies))
    await asyncio.sleep(SETTLE)
    filled, began = gap_filled(url), cpu_seconds(pid)
    started = time.perf_counter()
    committed: Committed = {}
    rate = await write(api, task_id, committed, PACE, steps=EVENTS // 2)
    got = await asyncio.gather(*running)
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds(pid) - began
    await api.http.aclose()
    expected = list(range(2, EVENTS + 2))
    return {
        "cpu": cpu,
        "elapsed": elapsed,
        "rate": rate,
        "gap_filled": gap_filled(url) - filled,
        "wrong": sum(seqs != expected for seqs in got),
    }


def main() -> None:
    with serving(1, RUNSTATE_METRICS_TOKEN=METRICS_TOKEN) as (urls, token, pids):
        found = asyncio.run(measure(urls[0], token, pids[0]))
    print(
        f"sessions: {WATCHERS:,} sessionActivity watchers of one session, {EVENTS} events,"
        f" the writer at {found['rate']:.1f}/s (paced at {PACE:.0f}):"
        f" server CPU {found['cpu']:.1f} s over {found['elapsed']:.1f} s"
        f" ({100 * found['cpu'] / found['elapsed']:.0f}% of a core),"
        f" {found['gap_filled']:,.0f} events read from the database;"
        f" {found['wrong']} watchers missing or misordering events"
    )


if __name__ == "__main__":
    main()
