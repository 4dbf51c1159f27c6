"""The Python in ``docs/openai-agents.md`` runs as pasted, against a real server with
a token of the reader's own: the conversation example as a file, and the
approvals example while a person (this test, over GraphQL) approves the call it
waits on. Guards the page against examples that no longer work."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.integration.test_docs import python_blocks, reader, run_block
from tests.support import Api, Server, wait_until

__all__ = ["reader"]  # the server and token of the SDK guide's test, as a fixture here

DOC = Path(__file__).parent.parent.parent / "docs" / "openai-agents.md"


def test_the_conversation_example_runs(reader: tuple[Server, str], tmp_path: Path) -> None:
    """The first example, twice: the second turn saw the first both times (the
    example clears the session it reuses)."""
    server, token = reader
    conversation = python_blocks(DOC.read_text())[0]
    for _ in range(2):
        said = run_block(conversation, tmp_path / "guide.py", server, token)
        assert said == "California\n3 items sent to the model\n4 items kept by runstate\n"


def test_the_examples_print_nothing_on_stderr_without_a_model_key(
    reader: tuple[Server, str], tmp_path: Path
) -> None:
    """Guards the examples turning the Agents SDK's tracing off: without
    ``OPENAI_API_KEY`` its exporter prints "OPENAI_API_KEY is not set, skipping
    trace export" after every run, which a reader takes for a failure. Seen failing
    with ``set_tracing_disabled(True)`` left out of the example."""
    server, token = reader
    script = tmp_path / "quiet.py"
    script.write_text(python_blocks(DOC.read_text())[0])
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env |= {"RUNSTATE_URL": server.url, "RUNSTATE_TOKEN": token}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_the_approvals_example_runs_the_tool_once_approved(
    reader: tuple[Server, str], tmp_path: Path
) -> None:
    """The second example: it stops at the approval and prints the task's link; a
    person approves the step (decideStep RETRY); the example resumes and the tool
    runs once."""
    server, token = reader
    script = tmp_path / "mail.py"
    script.write_text(python_blocks(DOC.read_text())[1])
    env = {**os.environ, "RUNSTATE_URL": server.url, "RUNSTATE_TOKEN": token}
    with subprocess.Popen(
        [sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True
    ) as example:
        assert example.stdout is not None
        first = example.stdout.readline()
        found = re.fullmatch(rf"waiting for a person: {re.escape(server.url)}/#task=(\S+)\n", first)
        assert found, first
        with Api(server.url, token) as person:
            task = (
                f'task(id: "{found.group(1)}") {{ ... on Task {{ version steps {{ status }} }} }}'
            )

            def waiting() -> bool:
                steps = person(f"{{ {task} }}")["task"]["steps"]
                return bool(steps[1]["status"] == "IN_DOUBT")

            wait_until(waiting, 30, "the approval step in doubt")
            version = person(f"{{ {task} }}")["task"]["version"]
            decided = person(
                "mutation($i: DecideStepInput!) { decideStep(input: $i) { __typename } }",
                i={"taskId": found.group(1), "stepIndex": 1, "decision": "RETRY",
                   "expectedVersion": version, "note": "fine"},
            )  # fmt: skip
            assert decided["decideStep"]["__typename"] == "Task"
        rest, _ = example.communicate(timeout=60)
    assert example.returncode == 0
    assert rest == "mail sent to bob\nBob has the report.\n"


def test_the_doc_has_the_blocks_this_test_runs() -> None:
    """Control: a Python block added to the page is run here too, or this fails."""
    assert len(python_blocks(DOC.read_text())) == 2
