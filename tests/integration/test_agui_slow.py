"""AG-UI runs of large tasks against a real server: clients that stop reading do not
take the server's memory (``RUNSTATE_AGUI_BUFFER_BYTES``), and still get every
byte once they read; a replay past ``RUNSTATE_MAX_RESPONSE_BYTES`` comes in pages,
each resumed from the last frame of the one before.
"""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agui_client import Answer, parse, post, replayed, run_input, state_now, valid
from tests.integration.test_api import new_task
from tests.integration.test_progress import drive
from tests.support import Api, Server, create_token, database, server_on, wait_until

RESULT = "x" * 60_000
REPORT = (
    "mutation($t: ID!, $n: String!, $r: JSON) { recordToolCall(input: {taskId: $t,"
    " toolName: $n, outcome: SUCCESS, result: $r}) { __typename } }"
)


def large_task(api: Api, tools: int) -> dict[str, Any]:
    """A one-step task, completed, holding ``tools`` tool states of about 60 KB."""
    task = new_task(api, steps=1)
    for i in range(tools):
        assert api(REPORT, t=task["id"], n=f"tool-{i:03}", r={"blob": RESULT})
    version = api("query($t: ID!) { task(id: $t) { ... on Task { version } } }", t=task["id"])
    drive(api, task["id"], 1, version=version["task"]["version"])
    return task


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def request(server: Server, token: str, task: dict[str, Any]) -> bytes:
    body = json.dumps(run_input(task["sessionId"])).encode()
    return (
        f"POST /agui/tasks/{task['id']} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def unchunked(raw: bytes) -> bytes:
    """An HTTP/1.1 answer's body, its chunked transfer coding undone."""
    at = raw.index(b"\r\n\r\n") + 4
    body: list[bytes] = []
    while True:
        end = raw.index(b"\r\n", at)
        length = int(raw[at:end], 16)
        if length == 0:
            return b"".join(body)
        body.append(raw[end + 2 : end + 2 + length])
        at = end + 4 + length


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def budgeted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A server whose AG-UI streams may hold 4 MiB together."""
    env = {"RUNSTATE_AGUI_BUFFER_BYTES": str(4 * 1_048_576)}
    with server_on(request.param, tmp_path_factory, "agui-budget", **env) as srv:
        yield srv


def test_clients_that_do_not_read_hold_little_and_then_get_every_byte(budgeted: Server) -> None:
    """Guards the per-process budget of AG-UI streams: twenty runs of a 6 MB task
    whose clients read nothing (a 4 KB receive buffer each) grow the server by
    less than 100 MB (each held its whole opening, some 20 MB, so that fifty took
    a gigabyte); when they do read, each gets the run whole, byte for byte the
    bytes of a run read at once, its state the task's."""
    with Api(budgeted.url, create_token(budgeted.database_url, "idle")) as api:
        task = large_task(api, tools=100)
        assert budgeted.process is not None
        pid = budgeted.process.pid
        before = rss_kb(pid)
        clients = []
        for _ in range(20):
            client = socket.socket()
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            client.connect(("127.0.0.1", budgeted.port))
            client.sendall(request(budgeted, api.token, task))
            clients.append(client)
        try:
            wait_until(
                lambda: all(select.select([c], [], [], 0)[0] for c in clients),
                60,
                "every run to begin",
            )
            samples = [rss_kb(pid)]

            def settled() -> bool:
                samples.append(rss_kb(pid))
                return abs(samples[-1] - samples[-2]) < 1024

            wait_until(settled, 60, "the server's memory to settle", interval=0.5)
            grown = (max(samples) - before) / 1024
            assert grown < 100, f"the server grew by {grown:.0f} MB"
            raws = []
            for client in clients:
                received = []
                while chunk := client.recv(1 << 20):
                    received.append(chunk)
                raws.append(unchunked(b"".join(received)))
        finally:
            for client in clients:
                client.close()
        whole = Answer(200, httpx.Headers())
        parse(raws[0].decode(), whole)
        valid(whole)
        assert whole.types[-1] == "RUN_FINISHED"
        assert replayed(whole.frames)[0] == state_now(api, task["id"])
        assert all(raw == raws[0] for raw in raws)


def frame_bytes(answer: Answer) -> int:
    """The bytes of the answer's frames on the wire."""
    return sum(len(f"id: {f.id}\ndata: {f.text}\n\n".encode()) for f in answer.frames)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def pager(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server, str]]:
    """Two processes on one database, the first with a 300 KB answer limit, and a
    token."""
    tmp = tmp_path_factory.mktemp(f"agui-pages-{request.param}")
    with database(request.param, tmp) as url:
        limited = Server(url, tmp / "limited.log", RUNSTATE_MAX_RESPONSE_BYTES="300000")
        with limited, Server(url, tmp / "free.log") as free:
            yield limited, free, create_token(url, "pager")


async def test_a_replay_past_the_answer_limit_comes_in_pages(
    pager: tuple[Server, Server, str],
) -> None:
    """Guards the answer limit on replays: with ``RUNSTATE_MAX_RESPONSE_BYTES`` at
    300 KB, a resume whose replay holds about 600 KB of frames stops after a page
    of at most 300 KB with a ``: page full`` comment and no terminal frame; each
    resume from the last frame of a page goes on, and the pages together are,
    frame for frame, the replay another process without the limit sends in one
    answer (it was one answer of any size: a resume from seq 1 sent 1.2 GB)."""
    limited, free, token = pager
    with Api(free.url, token) as api:
        task = large_task(api, tools=10)
        body = run_input(task["sessionId"])
        opened = await post(free.url, token, task["id"], body, cut_after=1)
        epoch = opened.frames[0].event["metadata"]["runstate"]["epoch"]
        start = f"{epoch}:1:1:1"  # a run opened at seq 1, its snapshot held
        whole = await post(free.url, token, task["id"], body, last_event_id=start)
        assert whole.types[-1] == "RUN_FINISHED"
        pages: list[Answer] = []
        cursor = start
        while not pages or pages[-1].types[-1] != "RUN_FINISHED":
            assert len(pages) < 10, "the pages never end"
            page = await post(limited.url, token, task["id"], body, last_event_id=cursor)
            assert page.status == 200
            pages.append(page)
            cursor = str(page.frames[-1].id)
    assert len(pages) >= 2
    for page in pages[:-1]:
        assert page.comments == [": page full: resume from the last frame"]
        assert page.types[-1] != "RUN_FINISHED"
        assert frame_bytes(page) <= 300_000
    assert [f for page in pages for f in page.frames] == whole.frames
