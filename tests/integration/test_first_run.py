"""A newcomer's first minutes: `make run` in a fresh clone says what it does while it
installs, then prints the link; Ctrl-C stops everything with one line; a busy port
is one line that suggests --port."""

from __future__ import annotations

import os
import queue
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support import free_port, wait_until

REPO = Path(__file__).parents[2]


class Output:
    """The lines a process prints (stderr merged into stdout), read as they come."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        assert process.stdout is not None
        stream = process.stdout

        def pump() -> None:
            with stream:
                for line in stream:
                    self._queue.put(line)
            self._queue.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def next_line(self, timeout: float) -> str:
        """The next line, failing after ``timeout`` seconds or at the end."""
        try:
            line = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout} s; so far: {self.lines}") from None
        assert line is not None, f"the process ended; it printed: {self.lines}"
        self.lines.append(line)
        return line

    def until(self, text: str, timeout: float) -> str:
        """Read up to the first line holding ``text``; that line."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.next_line(max(deadline - time.monotonic(), 0.01))
            if text in line:
                return line

    def rest(self, timeout: float) -> list[str]:
        """Every line left once the process has ended."""
        deadline = time.monotonic() + timeout
        while (line := self._queue.get(timeout=max(deadline - time.monotonic(), 0.01))) is not None:
            self.lines.append(line)
        return self.lines


def family(pid: int) -> set[int]:
    """Process ``pid`` and every live process descended from it (zombies not counted)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended while looked at
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found = {pid} if pid in parents else set()
    while grown := {child for child, parent in parents.items() if parent in found} - found:
        found |= grown
    return found


def read_banner(output: Output) -> None:
    """Read the rest of the demo's banner, which ends with a blank line."""
    output.until("Ctrl-C stops everything", 10)
    assert output.next_line(10) == "\n"


MAKE_VARIABLES = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")
"""What `make test` passes down to its commands; a terminal has none of them."""


def start(command: list[str], cwd: Path, **env: str) -> tuple[subprocess.Popen[str], Output]:
    """``command`` in its own process group, as a terminal runs it."""
    terminal = {k: v for k, v in os.environ.items() if k not in MAKE_VARIABLES}
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env={**terminal, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    return process, Output(process)


def stop(process: subprocess.Popen[str]) -> None:
    """Kill what is left of ``process``'s group (after a failed check) and reap it."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def ctrl_c(process: subprocess.Popen[str], output: Output) -> list[str]:
    """Press Ctrl-C (SIGINT to the process group, as a terminal does); every line
    printed after it, once the process and all it started have ended."""
    before = len(output.lines)
    started = family(process.pid)
    os.killpg(process.pid, signal.SIGINT)
    process.wait(timeout=60)
    after = output.rest(timeout=10)[before:]
    wait_until(lambda: not started & family(1), 10, "every process it started to end")
    return after


def test_ctrl_c_stops_the_demo_and_its_agents_with_one_line(tmp_path: Path) -> None:
    """Guards the agents' own process group (``demo._spawn``): in the terminal's,
    each agent prints a KeyboardInterrupt traceback of some 50 lines."""
    demo, output = start(
        [sys.executable, "-m", "runstate", "demo", "--port", str(free_port())],
        tmp_path,
        RUNSTATE_DATABASE_URL=f"sqlite://{tmp_path / 'demo.db'}",
    )
    try:
        output.until("#token=", 60)
        read_banner(output)
        wait_until(lambda: len(family(demo.pid)) >= 2, 30, "the demo to start an agent")
        assert ctrl_c(demo, output) == ["runstate: stopped\n"]
        assert demo.returncode == 0
        assert not any("Traceback" in line for line in output.lines), output.lines
    finally:
        stop(demo)


@pytest.mark.parametrize("command", ["serve", "demo"])
def test_a_busy_port_is_one_line_that_suggests_another(tmp_path: Path, command: str) -> None:
    """Guards ``cli._require_free_port``: without it uvicorn logs the bind error,
    then a traceback of some 37 lines."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "runstate", command, "--port", str(port)],
            env={**os.environ, "RUNSTATE_DATABASE_URL": f"sqlite://{tmp_path / 'x.db'}"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"runstate: port {port} on 127.0.0.1 is in use; choose another with --port {port + 1}\n"
    )


def test_a_busy_port_under_make_run_suggests_its_port_variable() -> None:
    """Guards the hint under ``make run``, which rejects --port: it names PORT."""
    project = Path(__file__).parent.parent.parent
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        terminal = {k: v for k, v in os.environ.items() if k not in MAKE_VARIABLES}
        result = subprocess.run(
            ["make", "-s", "run", f"PORT={port}"],
            cwd=project,
            env=terminal,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == (
        f"runstate: port {port} on 127.0.0.1 is in use;"
        f" choose another with make run PORT={port + 1}"
    )


def test_make_run_in_a_fresh_clone_shows_progress_then_the_link(tmp_path: Path) -> None:
    """`make run PORT=...` in a fresh clone (no .venv): its first line comes before
    the install does its work, pip's progress shows while it installs, the link
    follows, and Ctrl-C ends it all in one line. Guards the Makefile's run target:
    silent installs, the test and lint tools it once installed (checked absent),
    and PORT; and ``serve_with_demo``'s line for a link of one's own, which names
    the clone's ``.venv/bin/runstate`` and runs as printed there (seen failing:
    the demo printed its own link alone).

    Not timed: the order of the lines shows the first came while it installs (it
    precedes the install's own lines, which precede the link), where a deadline of
    10 s once stood for it; the waits are deadlines for a stuck install."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    port = free_port()
    run, output = start(
        ["make", "run", f"PORT={port}", f"PYTHON={sys.executable}"],
        clone,
        RUNSTATE_DATABASE_URL=f"sqlite://{tmp_path / 'first.db'}",
    )
    try:
        first = output.next_line(timeout=600)
        assert first.startswith("runstate: setting up"), first
        link = output.until("#token=", 600).strip()
        assert link.startswith(f"http://127.0.0.1:{port}/#token=rs_")
        # The line for a link of one's own names the clone's script (whole: the
        # command names its database, so it is for any folder) and runs elsewhere.
        assert output.next_line(10) == "\n"
        database = f"sqlite://{tmp_path / 'first.db'}"
        command = (
            f"{clone}/.venv/bin/runstate --database-url {database} token link me"
            f" --url http://127.0.0.1:{port}"
        )
        assert output.next_line(10) == (
            f"As yourself instead, a signed-in link to its dashboard: {command};"
            " `token create me` instead of `token link me` prints a token for the API.\n"
        )
        own = subprocess.run(
            shlex.split(command), cwd=tmp_path, capture_output=True, text=True, check=True
        ).stdout.strip()
        assert own.startswith(f"http://127.0.0.1:{port}/#token=rs_")
        installing = output.lines[1:-1]
        progress = ("Collecting ", "Successfully installed ")
        assert any(line.startswith(progress) for line in installing), output.lines
        read_banner(output)
        installed = clone / ".venv" / "bin"
        assert (installed / "runstate").exists()
        assert not (installed / "pytest").exists(), "make run installs only what running needs"
        assert not (installed / "mypy").exists()
        assert ctrl_c(run, output) == ["runstate: stopped\n"]
        assert not any("Traceback" in line for line in output.lines), output.lines
    finally:
        stop(run)


def test_a_non_editable_install_leaves_the_clone_clean(tmp_path: Path) -> None:
    """Guards ``.gitignore`` against what ``pip install .`` (not ``-e``) leaves in a
    clone: setuptools' ``build/`` (and the egg-info) must not show in ``git
    status``, where they could be committed. Seen failing without ``build/`` in
    it (``?? build/``)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    install = ["install", "--quiet", "--disable-pip-version-check", "--no-deps"]
    subprocess.run(
        [sys.executable, "-m", "pip", *install, "--target", str(tmp_path / "site"), str(clone)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert (clone / "build").is_dir(), "the install built in the clone, as pip install . does"
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True, check=True
    )
    assert status.stdout == ""
