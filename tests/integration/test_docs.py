"""The Python in ``docs/sdk.md`` and the README runs as pasted: each block is saved
as a file and run, in the order of the page (for the SDK's: first calls, the agent
loop, a session served input by input, then watching the loop's task), against a
real server with a token of the reader's own. Guards the pages against snippets
that are fragments or no longer work (the SDK page's first snippet once was a
SyntaxError in a file, and its watcher once came before the task it watches)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Server, create_token

ROOT = Path(__file__).parent.parent.parent
SDK_DOC = ROOT / "docs" / "sdk.md"
README = ROOT / "README.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.DOTALL | re.MULTILINE)


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    tmp = tmp_path_factory.mktemp("docs")
    url = f"sqlite://{tmp / 'docs.db'}"
    token = create_token(url, "me")
    server = Server(url, tmp / "server.log").start()
    try:
        yield server, token
    finally:
        server.stop()


def run_block(code: str, path: Path, server: Server, token: str) -> str:
    path.write_text(code)
    env = {**os.environ, "RUNSTATE_URL": server.url, "RUNSTATE_TOKEN": token}
    done = subprocess.run(
        [sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_python_block_of_the_sdk_guide_runs(
    reader: tuple[Server, str], tmp_path: Path
) -> None:
    server, token = reader
    first, loop, inputs, watch = python_blocks(SDK_DOC.read_text())

    created = run_block(first, tmp_path / "first.py", server, token)
    assert re.fullmatch(rf"created \S+ PLANNED at {re.escape(server.url)}/#task=\S+\n", created)

    ran = run_block(loop, tmp_path / "weekend.py", server, token)
    assert ran == f"follow it at {server.url}/#task=weekend-1\ndone: COMPLETED\n"
    again = run_block(loop, tmp_path / "weekend.py", server, token)
    assert again == ran, "run again, the same id resumes the finished task"

    served = run_block(inputs, tmp_path / "inputs.py", server, token)
    assert served == (
        "busy with submission 1\n1 hello COMPLETED\n2 what is the weather? COMPLETED\n"
        "3 thanks COMPLETED\n"
    )

    watched = run_block(watch, tmp_path / "watch.py", server, token).splitlines()
    assert len(watched) == 1, "a finished task: its snapshot, and the loop ends"
    assert re.fullmatch(r"\d+ SNAPSHOT None 3 of 3", watched[0])


def test_the_doc_has_the_blocks_this_test_runs() -> None:
    """Control: a block added to the guide is run here too, or this fails."""
    assert len(python_blocks(SDK_DOC.read_text())) == 4


def test_the_readmes_own_agent_runs_to_its_end(reader: tuple[Server, str], tmp_path: Path) -> None:
    """The README's "Your own agent" is a whole program: it prints its
    task's page, runs both steps, and prints COMPLETED; run again, it resumes the
    finished task and says the same."""
    server, token = reader
    (agent,) = python_blocks(README.read_text())
    expected = f"watch it at {server.url}/#task=first-weekend\nCOMPLETED\n"
    assert run_block(agent, tmp_path / "first.py", server, token) == expected
    assert run_block(agent, tmp_path / "first.py", server, token) == expected
