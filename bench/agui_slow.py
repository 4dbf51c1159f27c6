"""What AG-UI readers that stop reading cost the server, and what one tool report
costs its watchers. One ``runstate serve`` on SQLite and a task of about 6 MB
(BENCH_AGUI_TOOLS tool states, 100, each with a 60 KB result):

1. BENCH_AGUI_IDLE (50, the per-user connection cap) runs of the task opened on
   sockets that never read (a 4 KB receive buffer): the server's resident memory
   before, once it has settled with the runs open, and 10 s after they close;
2. ten runs of the task, read to the end, while one more tool report is written:
   the bytes of that report's frames all ten watchers received together.

Run with ``python -m bench.agui_slow``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from typing import Any

import httpx

from bench.fanout import Graph, new_task, serving
from bench.memory import rss_kb

TOOLS = int(os.environ.get("BENCH_AGUI_TOOLS", "100"))
IDLE = int(os.environ.get("BENCH_AGUI_IDLE", "50"))
WATCHERS = 10
RESULT_CHARS = 60_000
REPORT = (
    "mutation($t: ID!, $n: String!, $r: JSON) { recordToolCall(input: {taskId: $t,"
    " toolName: $n, outcome: SUCCESS, result: $r}) { __typename } }"
)


async def big_task(api: Graph) -> tuple[str, str]:
    """A one-step task holding ``TOOLS`` tool states of about 60 KB each; its id and
    its session's."""
    task_id = await new_task(api, steps=1)
    for i in range(TOOLS):
        await api(REPORT, t=task_id, n=f"tool-{i:03}", r={"blob": "x" * RESULT_CHARS})
    found = await api("query($t: ID!) { task(id: $t) { ... on Task { sessionId } } }", t=task_id)
    return task_id, str(found["task"]["sessionId"])


def request(url: str, token: str, task_id: str, session_id: str) -> bytes:
    host = url.removeprefix("http://")
    body = json.dumps({"threadId": session_id, "runId": "r", "messages": []}).encode()
    return (
        f"POST /agui/tasks/{task_id} HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def settled_rss(pid: int, within: float = 60.0) -> int:
    """The server's RSS (KB) once it has stopped moving for two seconds."""
    deadline = time.monotonic() + within
    last, since = rss_kb(pid), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = rss_kb(pid)
        if abs(now - last) > 2048:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= 2.0:
            return now
    return rss_kb(pid)


def idle_readers(url: str, token: str, task_id: str, session_id: str, pid: int) -> dict[str, Any]:
    """RSS before, with ``IDLE`` runs open and unread, and 10 s after they close."""
    host, _, port = url.removeprefix("http://").partition(":")
    before = settled_rss(pid)
    sockets = []
    for _ in range(IDLE):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((host, int(port)))
        s.sendall(request(url, token, task_id, session_id))
        sockets.append(s)
    held = settled_rss(pid)
    for s in sockets:
        s.close()
    time.sleep(10)
    after = rss_kb(pid)
    return {"before": before, "held": held, "after": after}


async def watched_report(url: str, token: str, api: Graph, task_id: str, session_id: str) -> int:
    """Bytes of one tool report's frames received by ``WATCHERS`` runs together."""
    body = {"threadId": session_id, "runId": "r", "messages": []}
    received = [0] * WATCHERS
    opened = [asyncio.Event() for _ in range(WATCHERS)]
    done = [asyncio.Event() for _ in range(WATCHERS)]
    seq = [0]

    async def watch(i: int, client: httpx.AsyncClient) -> None:
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        async with client.stream("POST", f"/agui/tasks/{task_id}", json=body, headers=headers) as r:
            pending = b""
            async for chunk in r.aiter_bytes():
                pending += chunk
                *blocks, pending = pending.split(b"\n\n")
                for block in blocks:
                    if b"data: " not in block:
                        continue  # a comment (: keepalive)
                    data = json.loads(block.partition(b"data: ")[2])
                    if data["type"] == "STATE_SNAPSHOT":
                        opened[i].set()
                    at = data.get("metadata", {}).get("runstate", {}).get("seq")
                    if seq[0] and at == seq[0]:
                        received[i] += len(block) + 2
                        done[i].set()
                        return

    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        readers = [asyncio.create_task(watch(i, client)) for i in range(WATCHERS)]
        for event in opened:
            await asyncio.wait_for(event.wait(), 120)
        found = await api("query($t: ID!) { task(id: $t) { ... on Task { eventSeq } } }", t=task_id)
        seq[0] = int(found["task"]["eventSeq"]) + 1
        await api(REPORT, t=task_id, n="tool-000", r={"blob": "y" * RESULT_CHARS})
        for event in done:
            await asyncio.wait_for(event.wait(), 120)
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    return sum(received)


async def main() -> None:
    with serving(1) as (urls, token, pids):
        api = Graph(urls[0], token)
        task_id, session_id = await big_task(api)
        sized = await api(
            "query($t: ID!) { task(id: $t) { ... on Task { storedBytes } } }", t=task_id
        )
        print(f"AG-UI slow readers: a task of {sized['task']['storedBytes'] / 1e6:.1f} MB stored")
        rss = await asyncio.to_thread(idle_readers, urls[0], token, task_id, session_id, pids[0])
        print(
            f"  {IDLE} runs never read: RSS {rss['before'] / 1024:.0f} MB before,"
            f" {rss['held'] / 1024:.0f} MB with them open,"
            f" {rss['after'] / 1024:.0f} MB 10 s after they closed"
        )
        total = await watched_report(urls[0], token, api, task_id, session_id)
        print(f"  one tool report to {WATCHERS} watchers: {total / 1e6:.2f} MB of frames")
        await api.http.aclose()


if __name__ == "__main__":
    asyncio.run(main())
