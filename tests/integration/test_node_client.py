"""The Node program of ``docs/clients.md`` ("The recipe as a Node 20 program") runs
as the page gives it: its ``npm install`` line, then ``follow.mjs`` put together from
the four blocks the page marks ``<!-- follow.mjs N/4 -->``, run with ``node`` against
a real server. Guards the page against an example that fails on Node 20 as written
(it once passed graphql-ws a ``WebSocket`` that Node 20 does not have, with no
install line and no imports), and against pins that no longer install together.

npm's packages are installed once per install line, under pytest's cache directory
(``.pytest_cache/d/node-client``, ignored by git). Node is not something runstate
needs, so without ``node`` or ``npm``, or when npm cannot reach its registry, these
tests skip loudly, under CI=true too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import queue
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from tests.support import TASK, Api, Server, create_token, ended, mutate, sqlite_server

CLIENTS_DOC = Path(__file__).parent.parent.parent / "docs" / "clients.md"

NETWORK_FAILURE = re.compile(
    r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH"
    r"|socket hang up|network|fetch failed",
    re.IGNORECASE,
)
"""What npm says when it cannot reach its registry (not a package or version error)."""


def marked_block(text: str, marker: str, language: str) -> str:
    """The fenced ``language`` block right after ``<!-- marker -->`` in ``text``."""
    pattern = rf"^<!-- {re.escape(marker)} -->\n```{language}\n(.*?)^```$"
    found = re.findall(pattern, text, flags=re.DOTALL | re.MULTILINE)
    assert len(found) == 1, f"docs/clients.md has {len(found)} blocks marked {marker!r}"
    block: str = found[0]
    return block


def npm_install_line(text: str) -> list[str]:
    """The arguments of the page's ``npm install`` line."""
    lines = marked_block(text, "npm install", "sh").splitlines()
    installs = [line for line in lines if line.startswith("npm install ")]
    assert len(installs) == 1, lines
    return shlex.split(installs[0])


def follow_program(text: str) -> str:
    """``follow.mjs`` as the page tells a reader to put it together: its four marked
    blocks in the order of their numbers."""
    parts = re.findall(r"^<!-- follow\.mjs (\d+)/(\d+) -->\n", text, flags=re.MULTILINE)
    assert sorted(parts) == [(str(n), "4") for n in range(1, 5)], parts
    return "\n".join(marked_block(text, f"follow.mjs {n}/4", "js") for n in range(1, 5))


def skip_loudly(reason: str) -> NoReturn:
    """Skip with a reason no one reading the summary can miss."""
    pytest.skip(f"SKIPPED LOUDLY: {reason}")


def installed(request: pytest.FixtureRequest, install: list[str]) -> Path:
    """A directory holding what ``install`` installs: made once per install line
    under pytest's cache (a temporary directory without one), and reused after."""
    key = hashlib.sha256(shlex.join(install).encode()).hexdigest()[:16]
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        root = Path(cache.mkdir("node-client"))
    else:
        root = request.getfixturevalue("tmp_path_factory").mktemp("node-client")
    directory = root / key
    stamp = directory / ".installed"
    if stamp.exists():
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    try:
        done = subprocess.run(
            [*install, "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.TimeoutExpired:
        skip_loudly(f"{shlex.join(install)} took over 10 minutes: npm's registry is unreachable")
    if done.returncode != 0:
        said = done.stdout + done.stderr
        if NETWORK_FAILURE.search(said):
            codes = [
                line for line in said.splitlines() if re.match(r"npm (error|ERR!) code ", line)
            ]
            skip_loudly(
                f"npm could not reach its registry for {shlex.join(install)}"
                f" ({'; '.join(codes) or said.strip().splitlines()[-1]})"
            )
        pytest.fail(f"{shlex.join(install)} failed:\n{said}")
    stamp.write_text(shlex.join(install) + "\n")
    return directory


class NodeProcess:
    """``node <script> ...`` in a subprocess (``follow.mjs`` unless named), its stdout
    read line by line in a thread (no line read ahead is lost) with deadlines."""

    def __init__(self, directory: Path, *args: str, script: str = "follow.mjs") -> None:
        self.script = script
        self.said = ""
        """What it wrote to stderr, once ``rest`` has read it."""
        self.process = subprocess.Popen(
            ["node", script, *args],
            cwd=directory,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with contextlib.suppress(ValueError, OSError):  # the pipe closed under us: done
            for line in self.process.stdout:
                self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def next_line(self, within: float = 60) -> str:
        """The next line printed; fail if the program exits or stays silent first."""
        deadline = time.monotonic() + within
        try:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"{self.script} printed nothing for {within}s") from None
        if line is None:
            raise AssertionError(f"{self.script} exited ({self.process.wait()}): {self.stderr()}")
        return line

    def rest(self, within: float = 120) -> list[str]:
        """Every line still to come, once the program has ended well."""
        lines = []
        deadline = time.monotonic() + within
        while (line := self.lines.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
            lines.append(line)
        self.said = self.stderr()
        assert self.process.returncode == 0, self.said
        return lines

    def stderr(self) -> str:
        """What the program wrote to stderr (waits for it to end)."""
        assert self.process.stderr is not None
        self.process.wait(timeout=30)
        return self.process.stderr.read()

    def stop(self) -> None:
        """End the program as Ctrl-C would, and close its pipes."""
        ended(self.process)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def page_installed(request: pytest.FixtureRequest, page: Path, text: str) -> Path:
    """Where the ``npm install`` line of ``page`` (its ``text``) ran; skipped loudly
    without Node and npm."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        skip_loudly(
            f"{' and '.join(missing)} not found: the Node program of docs/{page.name} is"
            " not run here (Node is not a requirement of runstate)"
        )
    return installed(request, npm_install_line(text))


@pytest.fixture(scope="module")
def program(request: pytest.FixtureRequest) -> Path:
    """The directory where the page's ``npm install`` ran, with ``follow.mjs`` and
    ``possible-types.json`` in it, as the page says to lay them out."""
    text = CLIENTS_DOC.read_text()
    directory = page_installed(request, CLIENTS_DOC, text)
    (directory / "follow.mjs").write_text(follow_program(text))
    types = subprocess.run(
        [sys.executable, "-m", "runstate", "export-schema", "--possible-types"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    (directory / "possible-types.json").write_text(types.stdout)
    return directory


@contextlib.contextmanager
def server_and_caller(
    tmp_path_factory: pytest.TempPathFactory, name: str, user: str
) -> Iterator[tuple[Server, Api]]:
    """A server on SQLite, and a caller whose token a program is given too."""
    with sqlite_server(tmp_path_factory, name) as server:
        api = Api(server.url, create_token(server.database_url, user))
        try:
            yield server, api
        finally:
            api.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Api]]:
    """A server on SQLite, and a caller whose token the program is given too."""
    with server_and_caller(tmp_path_factory, "node_client", "me") as both:
        yield both


def node_major() -> int:
    done = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True)
    return int(done.stdout.strip().lstrip("v").split(".")[0])


def test_the_node_program_of_the_clients_page_follows_a_task_live(
    program: Path, served: tuple[Server, Api]
) -> None:
    """Guards ``docs/clients.md``'s Node program as written (its install line, its
    imports, ``ws`` as graphql-ws's WebSocket, the recipe): it prints the task's
    SNAPSHOT at its eventSeq, then each write as it commits, over its WebSocket,
    exactly one line each."""
    server, api = served
    mutate(api, "startSession", "StartSessionInput", "__typename", id="node")
    created = mutate(
        api,
        "createTask",
        "CreateTaskInput",
        TASK,
        sessionId="node",
        id="trip",
        goal="Book a trip",
        steps=[{"action": "search flights"}, {"action": "book", "idempotent": False}],
    )
    assert created["version"] == 1
    node = NodeProcess(program, server.url, api.token, "trip")
    try:
        assert node.next_line() == "1 SNAPSHOT"
        ref = {"taskId": "trip", "stepIndex": 0}
        started = mutate(api, "startStep", "StepRefInput", TASK, **ref, expectedVersion=1)
        assert node.next_line() == "2 STEP_STARTED"
        done = mutate(
            api,
            "completeStep",
            "CompleteStepInput",
            TASK,
            **ref,
            expectedVersion=started["version"],
            output={"flights": 3},
        )
        assert done["status"] == "RUNNING"
        assert node.next_line() == "3 STEP_SUCCEEDED"
        assert node.process.poll() is None, "it follows until stopped"
    finally:
        node.stop()


def test_the_node_program_says_which_task_it_cannot_find(
    program: Path, served: tuple[Server, Api]
) -> None:
    """Guards the program's first read: a task that does not exist is told in one
    line on stderr from the NotFound's ``code`` and ``message``, read through the
    ``Problem`` interface (which needs the page's ``possibleTypes``), and the
    program exits 1 instead of following nothing."""
    server, api = served
    done = subprocess.run(
        ["node", "follow.mjs", server.url, api.token, "nowhere"],
        cwd=program,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "NOT_FOUND: task 'nowhere' not found\n"


def test_without_the_ws_import_the_program_fails_on_node_20(
    program: Path, served: tuple[Server, Api]
) -> None:
    """Control: the same program without its ``import WebSocket from "ws"`` line
    (the page as it once was) fails on Node 20, before it prints anything; so the
    test above passes because of the line, not in spite of its absence."""
    if node_major() >= 22:
        pytest.skip("Node 22 and later have a WebSocket of their own: no control there")
    server, api = served
    script = (program / "follow.mjs").read_text()
    line = 'import WebSocket from "ws"; // Node 20 has none; in a browser, leave this line out\n'
    assert script.count(line) == 1
    broken = program / "follow-without-ws.mjs"
    broken.write_text(script.replace(line, ""))
    try:
        done = subprocess.run(
            ["node", broken.name, server.url, api.token, "trip"],
            cwd=program,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        broken.unlink()
    assert (done.returncode, done.stdout) == (1, "")
    assert "ReferenceError: WebSocket is not defined" in done.stderr


def test_the_page_pins_what_the_program_imports_as_the_client_tests_do() -> None:
    """Control: every package ``follow.mjs`` imports is pinned on the page's install
    line, at the version ``tests/clients/package-lock.json`` holds (the page names
    those versions as the ones its Apollo recipe is tested with)."""
    text = CLIENTS_DOC.read_text()
    pinned = dict(spec.rsplit("@", 1) for spec in npm_install_line(text)[2:])
    imported = re.findall(r'^import .* from "([^"]+)";', follow_program(text), flags=re.M)
    packages = {
        "/".join(name.split("/")[:2]) if name.startswith("@") else name.split("/")[0]
        for name in imported
        if not name.startswith("node:")
    }
    assert packages == {"@apollo/client", "graphql-ws", "ws"}
    assert packages <= set(pinned), pinned
    lock = json.loads((CLIENTS_DOC.parent.parent / "tests/clients/package-lock.json").read_text())
    tested = {name: lock["packages"][f"node_modules/{name}"]["version"] for name in pinned}
    assert tested == pinned
