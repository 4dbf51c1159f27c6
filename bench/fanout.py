"""Does watching slow the writer? ``runstate serve`` processes on one SQLite file, a
writer doing startStep + completeStep over HTTP, and WebSocket watchers of its
task, in three rounds:

1. one server, the writer as fast as it can, nobody watching;
2. the same with WATCHERS watchers: the writer's rate against round 1 (target:
   about 1.0x);
3. the scene of issue 8: two servers sharing Redis (127.0.0.1:6379), the writer
   on the first at 20 events/s, half the watchers on each server: the rate the
   writer kept (target: 20/s).

For each watched round: commit-to-receipt delay (median, 99th percentile) and the
watchers that missed an event or saw one out of order (must be 0). Then the
baseline, in the same run: raw redis-py pub/sub with as many subscribers, each on
a connection of its own, at the same pace; the ratio of the 99th percentiles
(target: 3x or less). The watchers run in this process; its CPU time is printed,
so that it is known not to be the bottleneck. ``BENCH_WATCHERS=1000`` for the
large round. Run with ``make bench``; never part of ``make test``.
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
from redis.asyncio import Redis
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

WATCHERS = int(os.environ.get("BENCH_WATCHERS", "100"))
STEPS = int(os.environ.get("BENCH_STEPS", "100"))
PACE = 20.0
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
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


async def new_task(api: Graph, steps: int = STEPS) -> str:
    """A new session with a task of ``steps`` steps; the task's id."""
    session = await api("mutation { startSession(input: {}) { ... on AgentSession { id } } }")
    plan = [{"action": f"step-{i}"} for i in range(steps)]
    task = await api(
        "mutation($input: CreateTaskInput!) { createTask(input: $input) { ... on Task { id } } }",
        input={"sessionId": session["startSession"]["id"], "goal": "bench", "steps": plan},
    )
    return str(task["createTask"]["id"])


async def write(api: Graph, task_id: str, committed: dict[int, float], pace: float | None) -> float:
    """Every step started and completed, ``pace`` writes a second at most; the
    writes per second achieved."""
    version, seq = 1, 1
    began = time.perf_counter()
    for index in range(STEPS):
        for name, kind in (("startStep", "StepRefInput"), ("completeStep", "CompleteStepInput")):
            if pace is not None:  # the writer's own schedule, as an agent at 20 events/s
                await asyncio.sleep(max(0.0, began + (seq - 1) / pace - time.perf_counter()))
            data = await api(
                STEP.format(name=name, kind=kind),
                input={"taskId": task_id, "stepIndex": index, "expectedVersion": version},
            )
            version = data[name]["version"]
            seq += 1
            committed[seq] = time.perf_counter()
    return 2 * STEPS / (time.perf_counter() - began)


async def watch(ws_url: str, token: str, task_id: str) -> ClientConnection:
    """A watcher that has received its SNAPSHOT."""
    socket_ = await connect(ws_url, subprotocols=[Subprotocol("graphql-transport-ws")])
    init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
    await socket_.send(json.dumps(init))
    assert json.loads(await socket_.recv())["type"] == "connection_ack"
    subscribe = {"query": SUBSCRIBE, "variables": {"id": task_id}}
    await socket_.send(json.dumps({"id": "1", "type": "subscribe", "payload": subscribe}))
    json.loads(await socket_.recv())  # the SNAPSHOT
    return socket_


async def receive(socket_: ClientConnection, got: list[tuple[int, float]], last: int) -> None:
    while not got or got[-1][0] < last:
        message = json.loads(await socket_.recv())
        if message["type"] == "next":
            got.append((message["payload"]["data"]["taskProgress"]["seq"], time.perf_counter()))


async def round_(
    urls: list[str], token: str, watchers: int, pace: float | None = None
) -> dict[str, Any]:
    """One round: the writer on ``urls[0]``, the watchers spread over ``urls``."""
    api = Graph(urls[0], token)
    task_id = await new_task(api)
    sockets = [
        await watch(urls[i % len(urls)].replace("http", "ws", 1) + "/graphql", token, task_id)
        for i in range(watchers)
    ]
    got: list[list[tuple[int, float]]] = [[] for _ in sockets]
    committed: dict[int, float] = {}
    cpu = time.process_time()
    last = 1 + 2 * STEPS
    readers = [asyncio.create_task(receive(s, g, last)) for s, g in zip(sockets, got, strict=True)]
    rate = await write(api, task_id, committed, pace)
    await asyncio.wait_for(asyncio.gather(*readers), 120)
    cpu = time.process_time() - cpu
    for s in sockets:
        await s.close()
    await api.http.aclose()
    return {
        "rate": rate,
        "delays": sorted(t - committed[seq] for g in got for seq, t in g),
        "wrong": sum([seq for seq, _ in g] != list(range(2, last + 1)) for g in got),
        "cpu": cpu,
    }


UNLIMITED = {
    "RUNSTATE_RATE_LIMIT": "false",
    "RUNSTATE_MAX_CONNECTIONS": "100000",
}
"""One bench user drives every watcher and the writer: the per-user limits, which
would refuse that, are not what is measured."""


@contextmanager
def serving(count: int, **env: str) -> Iterator[tuple[list[str], str, list[int]]]:
    """``count`` servers on one fresh SQLite file, a token for them, their pids."""
    with tempfile.TemporaryDirectory() as tmp:
        database_url = f"sqlite://{Path(tmp) / 'fanout.db'}"
        runstate(database_url, "migrate")
        token = runstate(database_url, "token", "create", "bench")
        command = [sys.executable, "-m", "runstate", "--database-url", database_url, "serve"]
        ports = [free_port() for _ in range(count)]
        servers = [
            subprocess.Popen(
                [*command, "--port", str(port)],
                env={**os.environ, **UNLIMITED, **env},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for port in ports
        ]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        try:
            for url in urls:
                for _ in range(100):
                    try:
                        httpx.get(f"{url}/healthz", timeout=1)
                        break
                    except httpx.TransportError:
                        time.sleep(0.1)
            yield urls, token, [server.pid for server in servers]
        finally:
            for server in servers:
                server.terminate()
                server.wait()


async def raw_redis(watchers: int, pace: float) -> dict[str, Any]:
    """The baseline of the paced round: redis-py alone, ``watchers`` subscribers on
    connections of their own, a publisher at ``pace`` messages a second, the same
    number of messages as the round's writes."""
    last = 1 + 2 * STEPS
    subscribers = []
    for _ in range(watchers):
        pubsub = Redis.from_url(REDIS_URL).pubsub()
        await pubsub.subscribe("bench:raw")
        subscribers.append(pubsub)
    got: list[list[tuple[int, float]]] = [[] for _ in subscribers]
    committed: dict[int, float] = {}

    async def read(pubsub: Any, into: list[tuple[int, float]]) -> None:
        while not into or into[-1][0] < last:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5)
            if message is not None:
                into.append((int(message["data"]), time.perf_counter()))

    cpu = time.process_time()
    readers = [asyncio.create_task(read(p, g)) for p, g in zip(subscribers, got, strict=True)]
    publisher = Redis.from_url(REDIS_URL)
    began = time.perf_counter()
    for seq in range(2, last + 1):
        await asyncio.sleep(max(0.0, began + (seq - 2) / pace - time.perf_counter()))
        committed[seq] = time.perf_counter()
        await publisher.publish("bench:raw", str(seq))
    await asyncio.wait_for(asyncio.gather(*readers), 120)
    cpu = time.process_time() - cpu
    for pubsub in subscribers:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    await publisher.aclose()
    return {
        "rate": (last - 1) / (time.perf_counter() - began),
        "delays": sorted(t - committed[seq] for g in got for seq, t in g),
        "wrong": sum([seq for seq, _ in g] != list(range(2, last + 1)) for g in got),
        "cpu": cpu,
    }


def delays(result: dict[str, Any]) -> str:
    found = result["delays"]
    p50 = statistics.median(found) * 1000
    p99 = found[int(0.99 * (len(found) - 1))] * 1000
    return (
        f"commit to receipt p50 {p50:.1f} ms, p99 {p99:.1f} ms; watchers with a missing or"
        f" misordered event: {result['wrong']} (must be 0); this process's CPU"
        f" {result['cpu']:.1f} s"
    )


def main() -> None:
    print(
        f"fan-out benchmark: {WATCHERS} watchers in this process, {2 * STEPS} writes a round,"
        f" SQLite, load average {os.getloadavg()[0]:.2f}"
    )
    with serving(1) as (urls, token, _):
        alone = asyncio.run(round_(urls, token, 0))
        watched = asyncio.run(round_(urls, token, WATCHERS))
    print(
        f"1 server: writes/s alone {alone['rate']:.1f}, with {WATCHERS} watchers"
        f" {watched['rate']:.1f}: ratio {watched['rate'] / alone['rate']:.2f}x (target 1.0x)"
    )
    print(f"  {delays(watched)}")
    with serving(2, RUNSTATE_REDIS_URL=REDIS_URL) as (urls, token, _):
        paced = asyncio.run(round_(urls, token, WATCHERS, pace=PACE))
    print(
        f"2 servers + Redis, writer at {PACE:.0f}/s, {WATCHERS // 2} watchers on each:"
        f" writer kept {paced['rate']:.1f}/s (target {PACE:.0f})"
    )
    print(f"  {delays(paced)}")
    raw = asyncio.run(raw_redis(WATCHERS, PACE))
    print(f"raw redis-py, {WATCHERS} subscribers, {PACE:.0f} messages/s, in this process:")
    print(f"  {delays(raw)}")
    p99 = paced["delays"][int(0.99 * (len(paced["delays"]) - 1))]
    raw_p99 = raw["delays"][int(0.99 * (len(raw["delays"]) - 1))]
    print(f"  runstate p99 / redis-py p99: {p99 / raw_p99:.1f}x (target <= 3x)")


if __name__ == "__main__":
    main()
