"""Another user's latency while one user sends the heaviest reads it can.

The hostile user holds a 15 MB task (250 step outputs of 60,000 characters) and
eight curl processes (a C client: its CPU stays out of the server's) send, each in
a loop, 15 aliases of ``task(id: "fat") { ... on Task { steps { output } } }``:
225 MB of answer each. Meanwhile another user reads a small task, one request at
a time, and its latencies are recorded. Run three times, side by side: with the
default limits (the estimate refuses the read before it runs, ``schema.bounds``);
with them and the heaviest read they let through (2 aliases: 30 MB, paid by its
estimate from the rate budget); and with them off (the rate limit off,
``RUNSTATE_MAX_RESPONSE_BYTES`` at 1 GiB). Printed: the other user's p50, p99 and
worst latency, the hostile answers by HTTP status (a refusal is a 200 with its
error, RESPONSE_TOO_LARGE or RATE_LIMITED), and the server's peak memory (VmHWM);
the figures go to ``bench/results/hostile.json``.
Run with ``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.fanout import free_port, runstate, wait_answering

SECONDS = float(os.environ.get("BENCH_HOSTILE_SECONDS", "20"))
HOSTILE = 8
ALIASES = 15
STEPS = 250
OUTPUT = "x" * 60_000
RESULTS = Path(__file__).parent / "results" / "hostile.json"
UNBOUNDED = {"RUNSTATE_RATE_LIMIT": "false", "RUNSTATE_MAX_RESPONSE_BYTES": str(1 << 30)}


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def call(http: httpx.Client, query: str, **variables: object) -> dict[str, Any]:
    body = http.post("/graphql", json={"query": query, "variables": variables}).json()
    assert "errors" not in body, body
    return body["data"]  # type: ignore[no-any-return]


def fat_task(http: httpx.Client) -> None:
    """The 15 MB task ``fat``, in 17 checkpoints."""
    session = call(http, "mutation { startSession(input: {}) { ... on AgentSession { id } } }")
    plan = [{"action": f"step-{i}"} for i in range(STEPS)]
    created = call(
        http,
        "mutation($i: CreateTaskInput!) { createTask(input: $i) { ... on Task { version } } }",
        i={"id": "fat", "sessionId": session["startSession"]["id"], "goal": "g", "steps": plan},
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


def hostile_loop(url: str, token: str, body: Path, until: float, statuses: Counter[str]) -> None:
    """curl sending the hostile read again and again until ``until``."""
    while time.monotonic() < until:
        done = subprocess.run(
            [
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
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
            text=True,
            check=False,
        )
        statuses[done.stdout or "failed"] += 1


def scenario(
    name: str, aliases: int = ALIASES, env: dict[str, str] | None = None
) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        database_url = f"sqlite://{Path(tmp) / 'hostile.db'}"
        runstate(database_url, "migrate")
        hostile = runstate(database_url, "token", "create", "hostile")
        victim = runstate(database_url, "token", "create", "victim")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runstate",
                "--database-url",
                database_url,
                "serve",
                "--port",
                str(port),
            ],
            env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_answering(url)
            with httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {hostile}"}, timeout=60
            ) as h:
                fat_task(h)
            reads = " ".join(
                f'a{i}: task(id: "fat") {{ ... on Task {{ steps {{ output }} }} }}'
                for i in range(aliases)
            )
            body = Path(tmp) / "hostile.json"
            body.write_text(json.dumps({"query": "{ " + reads + " }"}))
            small = '{ task(id: "mine") { ... on Task { version } } }'
            with httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {victim}"}, timeout=120
            ) as v:
                session = call(
                    v, "mutation { startSession(input: {}) { ... on AgentSession { id } } }"
                )
                call(
                    v,
                    "mutation($i: CreateTaskInput!) { createTask(input: $i) { __typename } }",
                    i={
                        "id": "mine",
                        "sessionId": session["startSession"]["id"],
                        "goal": "g",
                        "steps": [],
                    },
                )
                statuses: Counter[str] = Counter()
                until = time.monotonic() + SECONDS
                loops = [
                    threading.Thread(
                        target=hostile_loop, args=(url, hostile, body, until, statuses)
                    )
                    for _ in range(HOSTILE)
                ]
                for loop in loops:
                    loop.start()
                latencies = []
                while time.monotonic() < until:
                    began = time.perf_counter()
                    call(v, small)
                    latencies.append(time.perf_counter() - began)
                    time.sleep(0.02)
                for loop in loops:
                    loop.join()
            latencies.sort()
            figures = {
                "scenario": name,
                "other_user_p50_ms": round(statistics.median(latencies) * 1000, 1),
                "other_user_p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 1),
                "other_user_worst_ms": round(latencies[-1] * 1000, 1),
                "other_user_reads": len(latencies),
                "hostile_answers": dict(statuses),
                "server_peak_mb": round(peak_rss_mb(server.pid)),
            }
        finally:
            server.terminate()
            server.wait()
    print(json.dumps(figures), flush=True)
    return figures


def main() -> None:
    bounded = scenario("limits on (defaults)")
    heaviest = scenario("limits on, the heaviest read they let through (2 aliases, 30 MB)", 2)
    unbounded = scenario("limits off", env=UNBOUNDED)
    RESULTS.write_text(json.dumps([bounded, heaviest, unbounded], indent=2))
    ratio = unbounded["other_user_p99_ms"] / bounded["other_user_p99_ms"]  # type: ignore[operator]
    print(
        f"hostile reads: another user's p99 {bounded['other_user_p99_ms']} ms with the limits,"
        f" {unbounded['other_user_p99_ms']} ms without ({ratio:.0f}x); peak memory"
        f" {bounded['server_peak_mb']} MB against {unbounded['server_peak_mb']} MB"
    )


if __name__ == "__main__":
    main()
