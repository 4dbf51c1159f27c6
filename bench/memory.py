"""Server memory per idle subscriber: ``runstate serve`` on SQLite, SUBSCRIBERS
taskProgress subscriptions opened from this process (one WebSocket each), the
server's resident memory read from /proc before, with them open, and 15 s after
they closed (target: 50 KB a subscriber or less). Run with ``make bench``; never
part of ``make test``.
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


async def measure(url: str, token: str, pid: int) -> tuple[int, int, int]:
    api = Graph(url, token)
    task_id = await new_task(api)
    await api.http.aclose()
    before = rss_kb(pid)
    ws_url = url.replace("http", "ws", 1) + "/graphql"
    sockets: list[ClientConnection] = []
    for _ in range(0, SUBSCRIBERS, 100):
        sockets += await asyncio.gather(*(subscribe(ws_url, token, task_id) for _ in range(100)))
    opened = rss_kb(pid)
    await asyncio.gather(*(s.close() for s in sockets))
    await asyncio.sleep(15)  # the server gives memory back on its next connection check
    return before, opened, rss_kb(pid)


def main() -> None:
    with serving(1) as (urls, token, pids):
        before, opened, after = asyncio.run(measure(urls[0], token, pids[0]))
    per = (opened - before) / SUBSCRIBERS
    print(
        f"memory: {SUBSCRIBERS} idle subscribers took the server from {before / 1024:.0f} to"
        f" {opened / 1024:.0f} MB: {per:.0f} KB each (target <= {TARGET_KB} KB);"
        f" {after / 1024:.0f} MB 15 s after they closed"
    )


if __name__ == "__main__":
    main()
