"""Does watching slow the writer? One ``runstate serve`` process on SQLite, a writer
doing startStep + completeStep over HTTP as fast as it can, first with no watcher,
then with WATCHERS WebSocket subscribers of the same task.

Prints the writer's rate in both rounds and their ratio (target: about 1.0x), the
commit-to-receipt delay (median and 99th percentile) and the events missed or out
of order (must be 0), and the CPU time of this load-generating process, so that
it is known not to be the bottleneck. The watchers run in this process. Run with
``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

WATCHERS = int(os.environ.get("BENCH_WATCHERS", "100"))
STEPS = int(os.environ.get("BENCH_STEPS", "100"))
SELECTION = os.environ.get("BENCH_SELECTION", "seq kind status steps { index status }")
SUBSCRIBE = "subscription($id: ID!) { taskProgress(taskId: $id) { " + SELECTION + " } }"
STEP = "mutation($input: {kind}!) {{ {name}(input: $input) {{ ... on Task {{ version }} }} }}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def runstate(database_url: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "runstate", "--database-url", database_url, *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()[-1]


class Graph:
    """A GraphQL-over-HTTP caller."""

    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )

    async def __call__(self, query: str, **variables: Any) -> dict[str, Any]:
        response = await self.http.post("/graphql", json={"query": query, "variables": variables})
        body: dict[str, Any] = response.json()
        assert "errors" not in body, body
        return body["data"]  # type: ignore[no-any-return]


async def new_task(api: Graph) -> str:
    session = await api("mutation { startSession(input: {}) { ... on AgentSession { id } } }")
    steps = [{"action": f"step-{i}"} for i in range(STEPS)]
    task = await api(
        "mutation($input: CreateTaskInput!) { createTask(input: $input) { ... on Task { id } } }",
        input={"sessionId": session["startSession"]["id"], "goal": "bench", "steps": steps},
    )
    return str(task["createTask"]["id"])


async def write(api: Graph, task_id: str, committed: dict[int, float]) -> float:
    """Every step started and completed; the writes per second."""
    version, seq = 1, 1
    began = time.perf_counter()
    for index in range(STEPS):
        for name, kind in (("startStep", "StepRefInput"), ("completeStep", "CompleteStepInput")):
            data = await api(
                STEP.format(name=name, kind=kind),
                input={"taskId": task_id, "stepIndex": index, "expectedVersion": version},
            )
            version = data[name]["version"]
            seq += 1
            committed[seq] = time.perf_counter()
    return 2 * STEPS / (time.perf_counter() - began)


async def watch(ws_url: str, token: str, task_id: str) -> tuple[ClientConnection, list[Any]]:
    socket_ = await connect(ws_url, subprotocols=[Subprotocol("graphql-transport-ws")])
    init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
    await socket_.send(json.dumps(init))
    assert json.loads(await socket_.recv())["type"] == "connection_ack"
    subscribe = {"query": SUBSCRIBE, "variables": {"id": task_id}}
    await socket_.send(json.dumps({"id": "1", "type": "subscribe", "payload": subscribe}))
    json.loads(await socket_.recv())  # the SNAPSHOT
    return socket_, []


async def receive(socket_: ClientConnection, got: list[tuple[int, float]], last: int) -> None:
    while not got or got[-1][0] < last:
        message = json.loads(await socket_.recv())
        if message["type"] == "next":
            got.append((message["payload"]["data"]["taskProgress"]["seq"], time.perf_counter()))


async def round_(url: str, token: str, watchers: int) -> dict[str, Any]:
    api = Graph(url, token)
    task_id = await new_task(api)
    ws_url = url.replace("http", "ws", 1) + "/graphql"
    sockets = [await watch(ws_url, token, task_id) for _ in range(watchers)]
    committed: dict[int, float] = {}
    cpu = time.process_time()
    last = 1 + 2 * STEPS
    readers = [asyncio.create_task(receive(s, got, last)) for s, got in sockets]
    rate = await write(api, task_id, committed)
    await asyncio.wait_for(asyncio.gather(*readers), 120)
    cpu = time.process_time() - cpu
    delays = [t - committed[seq] for _, got in sockets for seq, t in got]
    wrong = sum([seq for seq, _ in got] != list(range(2, last + 1)) for _, got in sockets)
    for s, _ in sockets:
        await s.close()
    await api.http.aclose()
    return {"rate": rate, "delays": delays, "wrong": wrong, "cpu": cpu}


@contextmanager
def serving() -> Iterator[tuple[str, str]]:
    """A ``runstate serve`` process on a fresh SQLite database, and a token for it."""
    with tempfile.TemporaryDirectory() as tmp:
        database_url = f"sqlite://{Path(tmp) / 'fanout.db'}"
        runstate(database_url, "migrate")
        token = runstate(database_url, "token", "create", "bench")
        port = free_port()
        command = [sys.executable, "-m", "runstate", "--database-url", database_url, "serve"]
        server = subprocess.Popen(
            [*command, "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(100):
                try:
                    httpx.get(f"{url}/healthz", timeout=1)
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            yield url, token
        finally:
            server.terminate()
            server.wait()


async def rounds(url: str, token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return await round_(url, token, 0), await round_(url, token, WATCHERS)


def main() -> None:
    with serving() as (url, token):
        alone, watched = asyncio.run(rounds(url, token))
    delays = sorted(watched["delays"])
    p50 = statistics.median(delays) * 1000
    p99 = delays[int(0.99 * (len(delays) - 1))] * 1000
    print(
        f"fan-out benchmark: 1 server (SQLite), {WATCHERS} watchers in this process, "
        f"{2 * STEPS} writes, load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"writes/s alone {alone['rate']:.1f}, watched {watched['rate']:.1f}, "
        f"ratio {watched['rate'] / alone['rate']:.2f}x (target about 1.0x)"
    )
    print(
        f"commit to receipt: p50 {p50:.1f} ms, p99 {p99:.1f} ms; "
        f"watchers with a missing or misordered event: {watched['wrong']} (must be 0)"
    )
    print(f"this process's CPU: {watched['cpu']:.1f} s over the watched round")


if __name__ == "__main__":
    main()
