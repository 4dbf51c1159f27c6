"""The Node program of ``docs/agui.md`` ("Watching a task from Node") runs as the page
gives it: its ``npm install`` line, then ``watch.mjs`` put together from the two blocks
marked ``<!-- watch.mjs N/2 -->``, with ``@ag-ui/client``'s own ``HttpAgent``, against
a real server. It follows a task to its end through a connection cut mid-run, ending
with the state GraphQL answers, and answers a step in doubt with ``runAgent({resume})``.

npm's packages are installed once per install line under pytest's cache, as for
``docs/clients.md`` (``test_node_client``); without ``node`` or ``npm``, or when npm
cannot reach its registry, these tests skip loudly.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agui_client import state_now
from tests.integration.test_agui import decisions, in_doubt
from tests.integration.test_api import new_task
from tests.integration.test_node_client import (
    NodeProcess,
    marked_block,
    page_installed,
    server_and_caller,
)
from tests.integration.test_progress import drive
from tests.support import Api, Server

AGUI_DOC = Path(__file__).parent.parent.parent / "docs" / "agui.md"


def watch_program(text: str) -> str:
    """``watch.mjs`` as the page tells a reader to put it together."""
    parts = re.findall(r"^<!-- watch\.mjs (\d+)/(\d+) -->\n", text, flags=re.MULTILINE)
    assert sorted(parts) == [("1", "2"), ("2", "2")], parts
    return "\n".join(marked_block(text, f"watch.mjs {n}/2", "js") for n in (1, 2))


@pytest.fixture(scope="module")
def program(request: pytest.FixtureRequest) -> Path:
    """The directory where the page's ``npm install`` ran, with ``watch.mjs`` in it."""
    text = AGUI_DOC.read_text()
    directory = page_installed(request, AGUI_DOC, text)
    (directory / "watch.mjs").write_text(watch_program(text))
    return directory


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Api]]:
    """A server on SQLite, and a caller whose token the program is given too."""
    with server_and_caller(tmp_path_factory, "agui_node", "watcher") as both:
        yield both


class CuttingProxy:
    """A TCP proxy in front of the server that cuts the first AG-UI stream through
    it after ``frames`` frames (both sockets closed mid-body, as a lost network
    does), and counts the requests that came back with ``Last-Event-ID``."""

    def __init__(self, target: int, frames: int) -> None:
        self.target = target
        self.frames = frames
        self.cuts = 0
        self.resumed = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target))
                threading.Thread(target=self._up, args=(client, upstream), daemon=True).start()
                threading.Thread(target=self._down, args=(upstream, client), daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if b"last-event-id:" in data.lower():
                    with self.lock:
                        self.resumed += 1
                upstream.sendall(data)
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)

    def _down(self, upstream: socket.socket, client: socket.socket) -> None:
        seen = 0
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                seen += data.count(b"data: ")
                with self.lock:
                    cut = self.cuts == 0 and seen >= self.frames
                    if cut:
                        self.cuts += 1
                if cut:
                    client.sendall(data[: data.find(b"data: ")])  # the frame breaks off
                    for end in (client, upstream):
                        with contextlib.suppress(OSError):
                            end.shutdown(socket.SHUT_RDWR)
                        end.close()
                    return
                client.sendall(data)
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.listener.close()


def watch(directory: Path, *args: str) -> NodeProcess:
    """``node watch.mjs ...``, its lines read as they come."""
    return NodeProcess(directory, *args, script="watch.mjs")


def rest(program_run: NodeProcess) -> list[str]:
    """The program's other lines, once it has ended well with no state refused."""
    lines = program_run.rest()
    assert "Failed to apply state patch" not in program_run.said, program_run.said
    return lines


def test_watch_follows_a_task_through_a_cut_to_graphqls_state(
    program: Path, served: tuple[Server, Api]
) -> None:
    """Guards the page's program and the resume it relies on: ``HttpAgent`` with the
    reconnecting ``fetch`` follows a three-step task whose stream is cut after its
    fifth frame; it resumes with ``Last-Event-ID`` once, prints every step started
    and finished once, and ends with ``task(id) { ...AguiState }`` as its state.
    Without the reconnecting ``fetch`` the same program fails at the cut
    ("TypeError: terminated")."""
    server, api = served
    task = new_task(api, steps=3)
    proxy = CuttingProxy(server.port, frames=5)
    program_run = watch(program, proxy.url, api.token, task["id"], task["sessionId"])
    try:
        assert program_run.next_line() == "run started"
        drive(api, task["id"], 3)
        lines = rest(program_run)
    finally:
        program_run.stop()
        proxy.close()
    assert (proxy.cuts, proxy.resumed) == (1, 1)
    steps = [line for line in lines if line.startswith(("started", "finished"))]
    assert steps == [
        f"{verb} {n}:step-{n}{'' if verb == 'started' else ': SUCCESS'}"
        for n in range(3)
        for verb in ("started", "finished")
    ]
    assert "run ended: success" in lines
    (state,) = [line.removeprefix("state: ") for line in lines if line.startswith("state: ")]
    assert json.loads(state) == state_now(api, task["id"])


def test_watch_answers_a_step_in_doubt_and_the_run_succeeds(
    program: Path, served: tuple[Server, Api]
) -> None:
    """Guards interrupts with AG-UI's own client: the run ends on the question,
    ``runAgent({resume})`` answers it (the decision written once, with the note),
    and the new run ends in success."""
    server, api = served
    task = in_doubt(api, ("charge",))
    program_run = watch(program, server.url, api.token, task["id"], task["sessionId"], "COMPLETE")
    try:
        assert program_run.next_line() == "run started"
        lines = rest(program_run)
    finally:
        program_run.stop()
    assert lines[0] == "run ended: interrupt", lines
    assert lines[1].startswith("asked: Step 0 (charge) was running when its agent stopped")
    assert lines[2:4] == ["run started", "run ended: success"]
    (decided,) = decisions(api, task["id"])
    assert (decided["kind"], decided["note"]) == ("STEP_SUCCEEDED", "answered from watch.mjs")
