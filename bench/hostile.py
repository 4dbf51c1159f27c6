"""Another user's latency while one user sends the heaviest work it can.

One server process on SQLite. Meanwhile another user reads a small task, one
request at a time, and its latencies are recorded. The hostile user:

- **heavy reads**: holds a 15 MB task (250 step outputs of 60,000 characters),
  and eight curl processes (a C client: its CPU stays out of the server's) send,
  each in a loop, aliases of ``task(id: "fat") { ... on Task { steps { output } } }``:
  15 (225 MB of answer, refused before it runs by its estimate, ``schema.bounds``),
  2 (30 MB, the heaviest the limits let through, paid by its estimate), and 15
  with the limits off (the rate limit off, ``RUNSTATE_MAX_RESPONSE_BYTES`` 1 GiB);
- **refusals**: the same 30 MB read on a budget of 10 points a second (100 at
  most): refused for its estimate nearly every time; counted, the refusals the
  server answered (each parsed, validated and estimated with a database read);
- **replays**: ``REPLAYS`` subscriptions to ``taskProgress(afterSeq: 0)`` of a
  task of ``REPLAY_EVENTS`` events, opened at once from this process.

Printed: the other user's p50, p99 and worst latency, the hostile answers by
HTTP status (a refusal for an estimate is a 200 with its error), replayed events,
and the server's peak memory (VmHWM); the figures go to
``bench/results/hostile.json``. Run with ``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from bench.fanout import free_port, runstate, wait_answering

SECONDS = float(os.environ.get("BENCH_HOSTILE_SECONDS", "20"))
HOSTILE = 8
ALIASES = 15
STEPS = 250
OUTPUT = "x" * 60_000
REPLAYS = int(os.environ.get("BENCH_HOSTILE_REPLAYS", "100"))
REPLAY_EVENTS = int(os.environ.get("BENCH_HOSTILE_REPLAY_EVENTS", "10000"))
RESULTS = Path(__file__).parent / "results" / "hostile.json"
UNBOUNDED = {"RUNSTATE_RATE_LIMIT": "false", "RUNSTATE_MAX_RESPONSE_BYTES": str(1 << 30)}
TIGHT = {"RUNSTATE_RATE_PER_SECOND": "10", "RUNSTATE_RATE_BURST": "100"}
"""The budget of the refusals: 10 points a second."""


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def call(http: httpx.Client, query: str, **variables: object) -> dict[str, Any]:
    body = http.post("/graphql", json={"query": query, "variables": variables}).json()
    assert "errors" not in body, body
    return body["data"]  # type: ignore[no-any-return]


def session_of(http: httpx.Client) -> str:
    started = call(http, "mutation { startSession(input: {}) { ... on AgentSession { id } } }")
    return str(started["startSession"]["id"])


def fat_task(http: httpx.Client) -> None:
    """The 15 MB task ``fat``, in 17 checkpoints."""
    plan = [{"action": f"step-{i}"} for i in range(STEPS)]
    created = call(
        http,
        "mutation($i: CreateTaskInput!) { createTask(input: $i) { ... on Task { version } } }",
        i={"id": "fat", "sessionId": session_of(http), "goal": "g", "steps": plan},
    )
    version = created["createTask"]["version"]
    for start in range(0, STEPS, 15):
        patches = [
            {"index": i, "status": "SUCCESS", "output": OUTPUT}
            for i in range(start, min(start + 15, STEPS))
        ]
        done = call(
            http,
            "mutation($i: CheckpointTaskInput!) { checkpointTask(input: $i) {"
            " ... on Task { version } } }",
            i={"taskId": "fat", "expectedVersion": version, "steps": patches},
        )
        version = done["checkpointTask"]["version"]


def long_task(http: httpx.Client) -> None:
    """The task ``long``, of ``REPLAY_EVENTS`` events (tool reports, 8 writers)."""
    call(
        http,
        "mutation($i: CreateTaskInput!) { createTask(input: $i) { __typename } }",
        i={"id": "long", "sessionId": session_of(http), "goal": "g", "steps": [{"action": "a"}]},
    )
    report = (
        'mutation($n: String!) { recordToolCall(input: {taskId: "long", toolName: $n,'
        " outcome: SUCCESS}) { __typename } }"
    )
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: call(http, report, n=f"t{i % 50}"), range(REPLAY_EVENTS - 1)))


@contextlib.contextmanager
def server(database_url: str, env: dict[str, str]) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``runstate serve`` on the database with ``env``: its URL and process."""
    port = free_port()
    command = [sys.executable, "-m", "runstate", "--database-url", database_url, "serve"]
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_answering(url)
        yield url, process
    finally:
        process.terminate()
        process.wait()


def hostile_loop(url: str, token: str, body: Path, until: float, statuses: Counter[str]) -> None:
    """curl sending the hostile read again and again until ``until``; each answer
    counted by status, a 200 refused for its estimate as ``200 refused``."""
    while time.monotonic() < until:
        done = subprocess.run(
            [
                "curl",
                "-s",
                "-w",
                "\n%{http_code}",
                "-H",
                f"Authorization: Bearer {token}",
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                f"@{body}",
                "--max-time",
                "120",
                f"{url}/graphql",
            ],
            capture_output=True,
            check=False,
        )
        head, _, status = done.stdout.rpartition(b"\n")
        refused = status == b"200" and b'"RATE_LIMITED"' in head[:4096]
        statuses[(status.decode() or "failed") + (" refused" if refused else "")] += 1


async def replaying(url: str, token: str, until: float) -> int:
    """``REPLAYS`` subscriptions replaying ``long`` from its start (20 a socket, the
    most a socket may run), each until it has every event or ``until``: the events
    they got in all."""
    query = 'subscription { taskProgress(taskId: "long", afterSeq: 0) { seq } }'

    async def socket(count: int) -> int:
        got = 0
        ws_url = url.replace("http://", "ws://") + "/graphql"
        async with connect(ws_url, subprotocols=[Subprotocol("graphql-transport-ws")]) as ws:
            init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
            await ws.send(json.dumps(init))
            await ws.recv()
            for n in range(count):
                subscribe = {"id": str(n), "type": "subscribe", "payload": {"query": query}}
                await ws.send(json.dumps(subscribe))
            while got < count * REPLAY_EVENTS and time.monotonic() < until:
                with contextlib.suppress(TimeoutError):
                    message = json.loads(await asyncio.wait_for(ws.recv(), 1))
                    if message.get("type") == "next":
                        got += 1
        return got

    counts = [min(20, REPLAYS - start) for start in range(0, REPLAYS, 20)]
    return sum(await asyncio.gather(*(socket(count) for count in counts)))


def measured(
    name: str,
    env: dict[str, str],
    build: Callable[[httpx.Client], None],
    load: Callable[[str, str, Path, float], dict[str, Any]],
    pause: float = 0.02,
) -> dict[str, Any]:
    """The other user's latencies for ``SECONDS`` while ``load`` runs, on a server
    with ``env`` whose hostile user's data ``build`` made (on a server without
    limits, so that building costs no budget); the other user pauses ``pause``
    seconds between its reads."""
    with tempfile.TemporaryDirectory() as tmp:
        database_url = f"sqlite://{Path(tmp) / 'hostile.db'}"
        runstate(database_url, "migrate")
        hostile = runstate(database_url, "token", "create", "hostile")
        victim = runstate(database_url, "token", "create", "victim")
        with (
            server(database_url, UNBOUNDED) as (url, _),
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {hostile}"}) as h,
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {victim}"}) as v,
        ):
            h.timeout = v.timeout = httpx.Timeout(120)
            build(h)
            call(
                v,
                "mutation($i: CreateTaskInput!) { createTask(input: $i) { __typename } }",
                i={"id": "mine", "sessionId": session_of(v), "goal": "g", "steps": []},
            )
        with server(database_url, env) as (url, process):
            until = time.monotonic() + SECONDS
            figures: dict[str, Any] = {}
            loader = threading.Thread(
                target=lambda: figures.update(load(url, hostile, Path(tmp), until))
            )
            loader.start()
            latencies = []
            small = '{ task(id: "mine") { ... on Task { version } } }'
            with httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {victim}"}, timeout=120
            ) as v:
                while time.monotonic() < until:
                    began = time.perf_counter()
                    call(v, small)
                    latencies.append(time.perf_counter() - began)
                    time.sleep(pause)
            loader.join()
            peak = peak_rss_mb(process.pid)
    latencies.sort()
    result = {
        "scenario": name,
        "other_user_p50_ms": round(statistics.median(latencies) * 1000, 1),
        "other_user_p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 1),
        "other_user_worst_ms": round(latencies[-1] * 1000, 1),
        "other_user_reads": len(latencies),
        **figures,
        "server_peak_mb": round(peak),
    }
    print(json.dumps(result), flush=True)
    return result


def reads(aliases: int) -> Callable[[str, str, Path, float], dict[str, Any]]:
    """``HOSTILE`` curl loops of ``aliases`` reads of ``fat``."""

    def load(url: str, token: str, tmp: Path, until: float) -> dict[str, Any]:
        fields = " ".join(
            f'a{i}: task(id: "fat") {{ ... on Task {{ steps {{ output }} }} }}'
            for i in range(aliases)
        )
        body = tmp / "hostile.json"
        body.write_text(json.dumps({"query": "{ " + fields + " }"}))
        statuses: Counter[str] = Counter()
        loops = [
            threading.Thread(target=hostile_loop, args=(url, token, body, until, statuses))
            for _ in range(HOSTILE)
        ]
        for loop in loops:
            loop.start()
        for loop in loops:
            loop.join()
        return {"hostile_answers": dict(statuses)}

    return load


def replays(url: str, token: str, tmp: Path, until: float) -> dict[str, Any]:
    return {"replayed_events": asyncio.run(replaying(url, token, until))}


SCENARIOS: dict[str, Callable[[], dict[str, Any]]] = {
    "bounded": lambda: measured("limits on (defaults)", {}, fat_task, reads(ALIASES)),
    "heaviest": lambda: measured(
        "limits on, the heaviest read they let through (2 aliases, 30 MB)",
        {},
        fat_task,
        reads(2),
    ),
    "off": lambda: measured("limits off", UNBOUNDED, fat_task, reads(ALIASES)),
    "refusals": lambda: measured(
        "refusals: the 30 MB read on a budget of 10 points a second",
        TIGHT,
        fat_task,
        reads(2),
        pause=0.2,  # the other user's budget is 10 points a second too
    ),
    "replays": lambda: measured(
        f"replays: {REPLAYS} taskProgress(afterSeq: 0) of {REPLAY_EVENTS} events",
        {},
        long_task,
        replays,
    ),
}
"""Each scenario by name; ``BENCH_HOSTILE_SCENARIOS`` (comma-separated) picks some."""


def main() -> None:
    picked = os.environ.get("BENCH_HOSTILE_SCENARIOS") or ",".join(SCENARIOS)
    results = {name: SCENARIOS[name]() for name in picked.split(",")}
    RESULTS.write_text(json.dumps(list(results.values()), indent=2))
    if {"bounded", "off"} <= results.keys():
        bounded, unbounded = results["bounded"], results["off"]
        ratio = unbounded["other_user_p99_ms"] / bounded["other_user_p99_ms"]
        print(
            f"hostile reads: another user's p99 {bounded['other_user_p99_ms']} ms with the"
            f" limits, {unbounded['other_user_p99_ms']} ms without ({ratio:.0f}x)"
        )


if __name__ == "__main__":
    main()
