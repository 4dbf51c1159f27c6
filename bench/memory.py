"""Server memory per idle subscriber: ``runstate serve`` on SQLite, taskProgress
subscriptions opened from this process (one WebSocket each), the server's resident
memory read from /proc. First WARM subscribers, kept open: their share includes
what the first subscriptions allocate once (modules loaded on first use, caches,
the allocator's first arenas). Then SUBSCRIBERS more: what each further one costs
(target: 50 KB a subscriber or less). Then all close, and the memory 15 s later.
Run with ``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

from bench.fanout import Graph, new_task, serving

SUBSCRIBERS = int(os.environ.get("BENCH_SUBSCRIBERS", "1000"))
WARM = 100
TARGET_KB = 50


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


async def measure(url: str, token: str, pid: int) -> tuple[int, int, int, int]:
    """Resident KB: at the start, with WARM open, with SUBSCRIBERS more, after closing."""
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

    start = rss_kb(pid)
    sockets = await hundreds(WARM)
    warm = rss_kb(pid)
    sockets += await hundreds(SUBSCRIBERS)
    opened = rss_kb(pid)
    await asyncio.gather(*(s.close() for s in sockets))
    await asyncio.sleep(15)  # the server gives memory back on its next connection check
    return start, warm, opened, rss_kb(pid)


def main() -> None:
    with serving(1) as (urls, token, pids):
        start, warm, opened, after = asyncio.run(measure(urls[0], token, pids[0]))
    first = (warm - start) / WARM
    per = (opened - warm) / SUBSCRIBERS
    print(
        f"memory: the first {WARM} idle subscribers took the server from {start / 1024:.0f}"
        f" to {warm / 1024:.0f} MB ({first:.0f} KB each, one-time allocations included);"
        f" {SUBSCRIBERS} more to {opened / 1024:.0f} MB: {per:.0f} KB each (target <="
        f" {TARGET_KB} KB); {after / 1024:.0f} MB 15 s after all closed"
    )


if __name__ == "__main__":
    main()
