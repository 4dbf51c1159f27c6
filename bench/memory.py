"""Server memory per idle subscriber: ``runstate serve`` on SQLite, taskProgress
subscriptions opened from this process (one WebSocket each), the server's resident
memory read from /proc. First WARM subscribers, kept open: their share includes
what the first subscriptions allocate once (modules loaded on first use, caches,
the allocator's first arenas). Then more, up to each count of BENCH_SUBSCRIBERS
(1,000 and 10,000) past the first WARM: what each further one costs (target: 30
KB a subscriber or less), and with the most open, the server's CPU over IDLE
seconds with nothing written (target: under 5% of a core). Then all close, and
the memory 15 s later. Run with ``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

from bench.fanout import Graph, cpu_seconds, new_task, serving

SUBSCRIBERS = [int(n) for n in os.environ.get("BENCH_SUBSCRIBERS", "1000,10000").split(",")]
WARM = 100
TARGET_KB = 30
IDLE = 10.0


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def subscribe(url: str, token: str, task_id: str) -> ClientConnection:
    socket = await connect(url, subprotocols=[Subprotocol("graphql-transport-ws")])
    init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
    await socket.send(json.dumps(init))
    await socket.recv()
    query = "subscription($id: ID!) { taskProgress(taskId: $id) { seq kind } }"
    payload = {"query": query, "variables": {"id": task_id}}
    await socket.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))
    await socket.recv()  # the SNAPSHOT
    return socket


async def measure(url: str, token: str, pid: int) -> dict[str, Any]:
    """Resident KB at the start, with WARM open, with each count of SUBSCRIBERS more,
    and after closing; the server's CPU seconds over IDLE with the most open."""
    api = Graph(url, token)
    task_id = await new_task(api)
    await api.http.aclose()
    ws_url = url.replace("http", "ws", 1) + "/graphql"

    async def hundreds(count: int) -> list[ClientConnection]:
        sockets: list[ClientConnection] = []
        for _ in range(0, count, 100):
            sockets += await asyncio.gather(
                *(subscribe(ws_url, token, task_id) for _ in range(100))
            )
        return sockets

    found: dict[str, Any] = {"start": rss_kb(pid)}
    sockets = await hundreds(WARM)
    found["warm"] = rss_kb(pid)
    opened: dict[int, int] = {}
    for count in SUBSCRIBERS:
        sockets += await hundreds(count - (len(sockets) - WARM))
        opened[count] = rss_kb(pid)
    found["opened"] = opened
    began = cpu_seconds(pid)
    await asyncio.sleep(IDLE)
    found["idle_cpu"] = (cpu_seconds(pid) - began) / IDLE
    await asyncio.gather(*(s.close() for s in sockets))
    await asyncio.sleep(15)  # the server gives memory back on its next connection check
    found["after"] = rss_kb(pid)
    return found


def main() -> None:
    with serving(1) as (urls, token, pids):
        found = asyncio.run(measure(urls[0], token, pids[0]))
    start, warm = found["start"], found["warm"]
    first = (warm - start) / WARM
    print(
        f"memory: the first {WARM} idle subscribers took the server from {start / 1024:.0f}"
        f" to {warm / 1024:.0f} MB ({first:.0f} KB each, one-time allocations included)"
    )
    for count, rss in found["opened"].items():
        print(
            f"  {count:,} more: {rss / 1024:.0f} MB, {(rss - warm) / count:.0f} KB each"
            f" (target <= {TARGET_KB} KB)"
        )
    print(
        f"  idle CPU with {SUBSCRIBERS[-1]:,} open, {IDLE:.0f} s: {100 * found['idle_cpu']:.1f}%"
        f" of a core (target < 5%); {found['after'] / 1024:.0f} MB 15 s after all closed"
    )


if __name__ == "__main__":
    main()
