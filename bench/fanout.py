"""Does watching slow the writer, and how close is fan-out to raw Redis?
``runstate serve`` processes on one SQLite file, writers doing startStep +
completeStep over HTTP, and WebSocket watchers. For each count of BENCH_WATCHERS
(100 and 1,000), watchers of one task in three rounds:

1. one server, the writer as fast as it can, nobody watching;
2. the same with the watchers: the writer's rate against round 1 (target: about
   1.0x);
3. the scene of issue 8: two servers sharing Redis (127.0.0.1:6379), the writer
   on the first at 20 events/s, half the watchers on each server: the rate the
   writer kept (target: 19/s).

Then the many-task round: BENCH_MANY (5,000) watchers of BENCH_MANY_TASKS (50)
tasks on two servers, each task written at 2 events/s by a writer on either
server; p99 and the servers' CPU time beside Redis's own in the baseline.

For each watched round: the delay to receipt (median, 99th percentile) from the
moment the writer had its answer, and from the moment it sent the write (which
counts the write's own time), and the watchers that missed an event or saw one
out of order (must be 0). Then the
baseline, in the same run: raw Redis pub/sub (redis-py publishers) with as many
subscribers, each on a connection of its own, at the same pace; the ratio of the
99th percentiles from the answer (target: 1.5x at 100 watchers, 2x at 1,000),
and from the send (raw Redis's from its PUBLISH's send; printed as "from send:
runstate p99 / raw Redis p99", target 3x at 100 watchers, 1.5x at 1,000). The watchers,
runstate's and Redis's alike, are ``bench/watchers.c``, a C program on epoll
(compiled with gcc on first use), in BENCH_CLIENTS processes (2) apart from the
writers: a Python client parsing 20,000 messages a second takes more CPU than the
servers it measures. Their CPU time is printed, so that it is known not to be
the bottleneck. Run with ``make bench``; never part of ``make test``.
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
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

STEPS = int(os.environ.get("BENCH_STEPS", "100"))
PACE = 20.0
KEPT = 19.0
"""The rate the paced writer must keep with 1,000 watchers (events a second)."""
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


class Wire:
    """A GraphQL-over-HTTP caller that costs next to nothing: one HTTP/1.1
    keep-alive connection, each request written whole and its answer read by its
    Content-Length (runstate's answers carry one). ``Graph`` (httpx) spends about
    3 ms of CPU a write, as much as a server delivering one event to 50 watchers;
    on two cores a writer's CPU comes out of the servers' it measures, at the very
    moment each event is delivered, and raw Redis's publisher costs a tenth of it."""

    def __init__(self, url: str, token: str) -> None:
        host, _, port = url.removeprefix("http://").partition(":")
        self.address = (host, int(port))
        self.head = (
            f"POST /graphql HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}"
            "\r\nContent-Type: application/json\r\nContent-Length: "
        ).encode()
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def __call__(self, query: str, **variables: Any) -> dict[str, Any]:
        if self.streams is None:
            self.streams = await asyncio.open_connection(*self.address)
        reader, writer = self.streams
        body = json.dumps({"query": query, "variables": variables}).encode()
        writer.write(b"%s%d\r\n\r\n%s" % (self.head, len(body), body))
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 "), head
        length = next(
            int(line.partition(b":")[2])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        answer: dict[str, Any] = json.loads(await reader.readexactly(length))
        assert "errors" not in answer, answer
        return answer["data"]  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            await self.streams[1].wait_closed()


async def new_task(api: Graph | Wire, steps: int = STEPS) -> str:
    """A new session with a task of ``steps`` steps; the task's id."""
    session = await api("mutation { startSession(input: {}) { ... on AgentSession { id } } }")
    plan = [{"action": f"step-{i}"} for i in range(steps)]
    task = await api(
        "mutation($input: CreateTaskInput!) { createTask(input: $input) { ... on Task { id } } }",
        input={"sessionId": session["startSession"]["id"], "goal": "bench", "steps": plan},
    )
    return str(task["createTask"]["id"])


Committed = dict[tuple[str, int], float]
"""Commit times by (task id or channel, seq), on ``time.perf_counter``'s clock: when
the writer had its answer (or, for a write's send time, when it sent it)."""


async def write(
    api: Graph | Wire,
    task_id: str,
    committed: Committed,
    pace: float | None,
    steps: int = STEPS,
    offset: float = 0.0,
    sent: Committed | None = None,
) -> float:
    """Every step started and completed, ``pace`` writes a second at most (the
    first ``offset`` seconds from now); the writes per second achieved. Each
    write's answer time goes in ``committed``, its send time in ``sent``."""
    version, seq = 1, 1
    began = time.perf_counter() + offset
    for index in range(steps):
        for name, kind in (("startStep", "StepRefInput"), ("completeStep", "CompleteStepInput")):
            if pace is not None:  # the writer's own schedule, as an agent at 20 events/s
                await asyncio.sleep(max(0.0, began + (seq - 1) / pace - time.perf_counter()))
            sending = time.perf_counter()
            data = await api(
                STEP.format(name=name, kind=kind),
                input={"taskId": task_id, "stepIndex": index, "expectedVersion": version},
            )
            version = data[name]["version"]
            seq += 1
            committed[task_id, seq] = time.perf_counter()
            if sent is not None:
                sent[task_id, seq] = sending
    return 2 * steps / (time.perf_counter() - began)


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


Writer = Callable[[Committed, Committed], Awaitable[float]]
"""Writes every event, noting each one's commit time (the answer) and send time;
returns its rate (of one task's writer, on average over the tasks)."""

CLIENTS = int(os.environ.get("BENCH_CLIENTS", "2"))
"""Processes the watchers run in (each sets its own up one by one: two halve that)."""


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far (user and system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def watched(
    kind: str,
    count: int,
    targets: list[str],
    token: str,
    urls: list[str],
    writer: Writer,
    steps: int = STEPS,
    servers: Sequence[int] = (),
) -> dict[str, Any]:
    """``count`` watchers in CLIENTS processes of ``bench/watchers.c`` (``runstate``
    WebSockets spread over ``urls``, or ``redis`` subscribers), each of one of
    ``targets`` (task ids or channels; every target has watchers on every url),
    ready before ``writer`` starts; the writer's rate, each receipt's delay after
    its commit, the watchers that missed or misordered an event, the client
    processes' CPU seconds and, while the writer ran, those of the ``servers``
    (pids). The receipt times are on the monotonic clock of ``time.perf_counter``,
    the writer's too."""
    binary = str(watchers_binary())
    last = 1 + 2 * steps
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
            ",".join(targets),
            SUBSCRIBE,
            stdout=asyncio.subprocess.PIPE,
        )
        for first in range(0, count, share)
    ]
    for process in processes:
        assert process.stdout is not None
        assert await process.stdout.readline() == b"ready\n"
    committed: Committed = {}
    sent: Committed = {}
    before = sum(cpu_seconds(pid) for pid in servers)
    rate = await writer(committed, sent)
    server_cpu = sum(cpu_seconds(pid) for pid in servers) - before
    reports = [json.loads((await p.communicate())[0]) for p in processes]
    got = [g for report in reports for g in report["got"]]
    spread = max(1, len(urls))
    watching = [targets[(i // spread) % len(targets)] for i in range(len(got))]
    return {
        "rate": rate,
        "delays": sorted(
            t - committed[target, seq]
            for g, target in zip(got, watching, strict=True)
            for seq, t in g
        ),
        "from_send": sorted(
            t - sent[target, seq] for g, target in zip(got, watching, strict=True) for seq, t in g
        ),
        "wrong": sum([seq for seq, _ in g] != list(range(2, last + 1)) for g in got),
        "cpu": sum(r["cpu"] for r in reports),
        "server_cpu": server_cpu,
        "clients": len(processes),
    }


async def round_(
    urls: list[str],
    token: str,
    count: int,
    pace: float | None = None,
    tasks: int = 1,
    steps: int = STEPS,
    servers: Sequence[int] = (),
) -> dict[str, Any]:
    """One round: ``count`` watchers of ``tasks`` tasks spread over ``urls``, the
    writer of task i on ``urls[i % len(urls)]`` (a connection each), the paced writers' schedules
    spread evenly over one interval (agents do not write in step)."""
    apis = [Wire(urls[i % len(urls)], token) for i in range(tasks)]
    task_ids = [await new_task(apis[0], steps) for _ in range(tasks)]

    async def writers(committed: Committed, sent: Committed) -> float:
        rates = await asyncio.gather(
            *(
                write(apis[i], task_id, committed, pace, steps, i / tasks / (pace or 1), sent)
                for i, task_id in enumerate(task_ids)
            )
        )
        return statistics.mean(rates)

    try:
        return await watched("runstate", count, task_ids, token, urls, writers, steps, servers)
    finally:
        for api in apis:
            await api.aclose()


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


async def raw_redis(
    count: int, pace: float, channels: int = 1, steps: int = STEPS
) -> dict[str, Any]:
    """The baseline of a paced round: redis-py alone, ``count`` subscribers of
    ``channels`` channels on connections of their own in the same client processes,
    a publisher of each channel at ``pace`` messages a second, as many messages as
    the round's writes; the CPU time of the Redis server is its "server_cpu"."""
    publisher = Redis.from_url(REDIS_URL)
    names = [f"bench:raw:{i}" for i in range(channels)]
    redis_pid = int((await publisher.info("server"))["process_id"])

    async def publish(name: str, offset: float, committed: Committed, sent: Committed) -> float:
        began = time.perf_counter() + offset
        for seq in range(2, 2 * steps + 2):
            await asyncio.sleep(max(0.0, began + (seq - 2) / pace - time.perf_counter()))
            sent[name, seq] = committed[name, seq] = time.perf_counter()  # PUBLISH's send
            await publisher.publish(name, str(seq))
        return 2 * steps / (time.perf_counter() - began)

    async def publishers(committed: Committed, sent: Committed) -> float:
        schedules = (publish(n, i / channels / pace, committed, sent) for i, n in enumerate(names))
        return statistics.mean(await asyncio.gather(*schedules))

    try:
        return await watched("redis", count, names, "-", [], publishers, steps, [redis_pid])
    finally:
        await publisher.aclose()


def p99(result: dict[str, Any], since: str = "delays") -> float:
    """The 99th percentile delay, from the writer's answer (``delays``) or from its
    send (``from_send``)."""
    found = result[since]
    return float(found[int(0.99 * (len(found) - 1))])


def delays(result: dict[str, Any]) -> str:
    p50 = statistics.median(result["delays"]) * 1000
    sent = statistics.median(result["from_send"]) * 1000
    return (
        f"commit to receipt p50 {p50:.1f} ms, p99 {p99(result) * 1000:.1f} ms; from the"
        f" write's send p50 {sent:.1f} ms, p99 {p99(result, 'from_send') * 1000:.1f} ms;"
        f" watchers with a missing or misordered event: {result['wrong']} (must be 0); CPU"
        f" of the {result['clients']} client processes {result['cpu']:.1f} s"
    )


COUNTS = [int(n) for n in os.environ.get("BENCH_WATCHERS", "100,1000").split(",")]
"""The watcher counts of the one-task rounds."""
TARGETS = {100: 1.5}
"""The p99 ratio to raw Redis each count must keep (2x for any other count),
measured from the writer's answer."""
SEND_TARGETS = {100: 3.0, 1000: 1.5}
"""The same from the write's send, which counts the write's own time: raw Redis's
from its PUBLISH's send."""
MANY = int(os.environ.get("BENCH_MANY", "5000"))
"""Watchers of the many-task round (0: none), ``MANY_TASKS`` tasks, 2 events/s each."""
MANY_TASKS = int(os.environ.get("BENCH_MANY_TASKS", "50"))
MANY_STEPS = 20
MANY_PACE = 2.0


def one_task(count: int) -> None:
    """The rounds of ``count`` watchers of one task (see the module's docstring)."""
    with serving(1) as (urls, token, _):
        alone = asyncio.run(round_(urls, token, 0))
        watched = asyncio.run(round_(urls, token, count))
    print(
        f"{count} watchers, 1 server: writes/s alone {alone['rate']:.1f}, watched"
        f" {watched['rate']:.1f}: ratio {watched['rate'] / alone['rate']:.2f}x (target 1.0x)"
    )
    print(f"  {delays(watched)}")
    with serving(2, RUNSTATE_REDIS_URL=REDIS_URL) as (urls, token, _):
        paced = asyncio.run(round_(urls, token, count, pace=PACE))
    print(
        f"{count} watchers, 2 servers + Redis, writer at {PACE:.0f}/s, {count // 2} watchers on"
        f" each: writer kept {paced['rate']:.1f}/s (target {KEPT:.0f})"
    )
    print(f"  {delays(paced)}")
    raw = asyncio.run(raw_redis(count, PACE))
    print(f"  raw Redis pub/sub, {count} subscribers, {PACE:.0f} messages/s, same clients:")
    print(f"    {delays(raw)}")
    target = TARGETS.get(count, 2.0)
    print(f"  runstate p99 / raw Redis p99: {p99(paced) / p99(raw):.1f}x (target <= {target}x)")
    ratio = p99(paced, "from_send") / p99(raw, "from_send")
    sending = SEND_TARGETS.get(count, 1.5)
    print(f"  from send: runstate p99 / raw Redis p99: {ratio:.1f}x (target <= {sending}x)")


def many_tasks(count: int, tasks: int) -> None:
    """``count`` watchers of ``tasks`` tasks on two servers, each task written at
    ``MANY_PACE`` events a second (its writer on either server), against raw Redis
    with as many channels; p99 and server CPU (runstate's two, Redis's) side by side."""
    with serving(2, RUNSTATE_REDIS_URL=REDIS_URL) as (urls, token, pids):
        paced = asyncio.run(round_(urls, token, count, MANY_PACE, tasks, MANY_STEPS, servers=pids))
    raw = asyncio.run(raw_redis(count, MANY_PACE, tasks, MANY_STEPS))
    print(
        f"{count} watchers of {tasks} tasks, 2 servers + Redis, each task at"
        f" {MANY_PACE:.0f} events/s: writers kept {paced['rate']:.2f}/s each"
    )
    print(f"  {delays(paced)}; servers' CPU {paced['server_cpu']:.1f} s")
    print(f"  raw Redis pub/sub, {tasks} channels, same subscribers and pace:")
    print(f"    {delays(raw)}; Redis's CPU {raw['server_cpu']:.1f} s")
    print(f"  runstate p99 / raw Redis p99: {p99(paced) / p99(raw):.1f}x (reported)")


def main() -> None:
    print(
        f"fan-out benchmark: {', '.join(map(str, COUNTS))} watchers of one task in {CLIENTS}"
        f" client processes, {2 * STEPS} writes a round, SQLite,"
        f" load average {os.getloadavg()[0]:.2f}"
    )
    for count in COUNTS:
        one_task(count)
    if MANY:
        many_tasks(MANY, MANY_TASKS)


if __name__ == "__main__":
    main()
