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
baseline, in the same run: raw Redis pub/sub (a redis-py publisher) with as many
subscribers, each on a connection of its own, at the same pace; the ratio of the
99th percentiles (target: 3x or less). The watchers, runstate's and Redis's
alike, are ``bench/watchers.c``, a C program on epoll (compiled with gcc on
first use), in BENCH_CLIENTS processes (2) apart from the writer: a Python
client parsing 20,000 messages a second takes more CPU than the servers it
measures. Their CPU time is printed, so that it is known not to be the
bottleneck. ``BENCH_WATCHERS=1000`` for the large round. Run with ``make bench``;
never part of ``make test``.
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
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

WATCHERS = int(os.environ.get("BENCH_WATCHERS", "100"))
STEPS = int(os.environ.get("BENCH_STEPS", "100"))
PACE = 20.0
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
REDIS_ADDRESS = REDIS_URL.removeprefix("redis://").partition("/")[0]
"""Where ``bench/watchers.c`` subscribes to Redis (host:port, IPv4)."""
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


WATCHERS_C = Path(__file__).parent / "watchers.c"
BUILT = Path(__file__).parent / ".build" / "watchers"


def watchers_binary() -> Path:
    """``bench/watchers.c`` compiled (again when the source is newer): the watchers,
    a C program on epoll, so that their cost is next to nothing beside the server's."""
    if not BUILT.exists() or BUILT.stat().st_mtime < WATCHERS_C.stat().st_mtime:
        BUILT.parent.mkdir(exist_ok=True)
        command = ["gcc", "-O2", "-Wall", "-o", str(BUILT), str(WATCHERS_C)]
        subprocess.run(command, check=True)
    return BUILT


Writer = Callable[[dict[int, float]], Awaitable[float]]
"""Writes every event, noting each one's commit time by seq; returns its rate."""

CLIENTS = int(os.environ.get("BENCH_CLIENTS", "2"))
"""Processes the watchers run in (each sets its own up one by one: two halve that)."""


async def watched(
    kind: str, count: int, target: str, token: str, urls: list[str], writer: Writer
) -> dict[str, Any]:
    """``count`` watchers in CLIENTS processes of ``bench/watchers.c`` (``runstate``
    WebSockets of task ``target`` spread over ``urls``, or ``redis`` subscribers of
    channel ``target``), ready before ``writer`` starts; the writer's rate, each
    receipt's delay after its commit, the watchers that missed or misordered an
    event, and the client processes' CPU seconds. The receipt times are on the
    monotonic clock of ``time.perf_counter``, the writer's too."""
    binary = str(watchers_binary())
    last = 1 + 2 * STEPS
    share = max(1, -(-count // CLIENTS))
    addresses = ",".join(url.removeprefix("http://") for url in urls) or REDIS_ADDRESS
    processes = [
        await asyncio.create_subprocess_exec(
            binary,
            kind,
            str(min(share, count - first)),
            str(first),
            str(last),
            addresses,
            token,
            target,
            SUBSCRIBE,
            stdout=asyncio.subprocess.PIPE,
        )
        for first in range(0, count, share)
    ]
    for process in processes:
        assert process.stdout is not None
        assert await process.stdout.readline() == b"ready\n"
    committed: dict[int, float] = {}
    rate = await writer(committed)
    reports = [json.loads((await p.communicate())[0]) for p in processes]
    got = [g for report in reports for g in report["got"]]
    return {
        "rate": rate,
        "delays": sorted(t - committed[seq] for g in got for seq, t in g),
        "wrong": sum([seq for seq, _ in g] != list(range(2, last + 1)) for g in got),
        "cpu": sum(r["cpu"] for r in reports),
        "clients": len(processes),
    }


async def round_(
    urls: list[str], token: str, count: int, pace: float | None = None
) -> dict[str, Any]:
    """One round: the writer on ``urls[0]``, ``count`` watchers spread over ``urls``."""
    api = Graph(urls[0], token)
    task_id = await new_task(api)
    try:
        return await watched(
            "runstate", count, task_id, token, urls, lambda c: write(api, task_id, c, pace)
        )
    finally:
        await api.http.aclose()


UNLIMITED = {
    "RUNSTATE_RATE_LIMIT": "false",
    "RUNSTATE_MAX_CONNECTIONS": "100000",
}
"""One bench user drives every watcher and the writer: the per-user limits, which
would refuse that, are not what is measured."""


def wait_answering(url: str) -> None:
    """Poll a server's /healthz for up to ten seconds, until it answers."""
    for _ in range(100):
        try:
            httpx.get(f"{url}/healthz", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)


@contextmanager
def serving(
    count: int, database_url: str | None = None, workers: int = 1, **env: str
) -> Iterator[tuple[list[str], str, list[int]]]:
    """``count`` servers on one database (a fresh SQLite file unless given), each
    of ``workers`` processes (``--workers``, with Redis past one), a token for them,
    their pids (a server of several workers: its parent's)."""
    with tempfile.TemporaryDirectory() as tmp:
        database_url = database_url or f"sqlite://{Path(tmp) / 'fanout.db'}"
        runstate(database_url, "migrate")
        token = runstate(database_url, "token", "create", "bench")
        command = [sys.executable, "-m", "runstate", "--database-url", database_url, "serve"]
        if workers > 1:
            command += ["--workers", str(workers)]
            env = {"RUNSTATE_REDIS_URL": REDIS_URL, **env}
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
                wait_answering(url)
            yield urls, token, [server.pid for server in servers]
        finally:
            for server in servers:
                server.terminate()
                server.wait()


async def raw_redis(count: int, pace: float) -> dict[str, Any]:
    """The baseline of the paced round: redis-py alone, ``count`` subscribers on
    connections of their own in the same client processes, a publisher at ``pace``
    messages a second, as many messages as the round's writes."""
    publisher = Redis.from_url(REDIS_URL)

    async def publish(committed: dict[int, float]) -> float:
        began = time.perf_counter()
        for seq in range(2, 2 * STEPS + 2):
            await asyncio.sleep(max(0.0, began + (seq - 2) / pace - time.perf_counter()))
            committed[seq] = time.perf_counter()
            await publisher.publish("bench:raw", str(seq))
        return 2 * STEPS / (time.perf_counter() - began)

    try:
        return await watched("redis", count, "bench:raw", "-", [], publish)
    finally:
        await publisher.aclose()


def delays(result: dict[str, Any]) -> str:
    found = result["delays"]
    p50 = statistics.median(found) * 1000
    p99 = found[int(0.99 * (len(found) - 1))] * 1000
    return (
        f"commit to receipt p50 {p50:.1f} ms, p99 {p99:.1f} ms; watchers with a missing or"
        f" misordered event: {result['wrong']} (must be 0); CPU of the"
        f" {result['clients']} client processes {result['cpu']:.1f} s"
    )


def main() -> None:
    print(
        f"fan-out benchmark: {WATCHERS} watchers in {CLIENTS} client processes,"
        f" {2 * STEPS} writes a round,"
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
    print(f"raw Redis pub/sub, {WATCHERS} subscribers, {PACE:.0f} messages/s, same clients:")
    print(f"  {delays(raw)}")
    p99 = paced["delays"][int(0.99 * (len(paced["delays"]) - 1))]
    raw_p99 = raw["delays"][int(0.99 * (len(raw["delays"]) - 1))]
    print(f"  runstate p99 / raw Redis p99: {p99 / raw_p99:.1f}x (target <= 3x)")


if __name__ == "__main__":
    main()
