"""A server process's cyclic collector, tuned before it serves (``memory``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runstate.memory import SERVING_THRESHOLDS

PROBE = """
import gc, json, sys
import uvicorn
from runstate import app, cli

def collector():
    return {"thresholds": gc.get_threshold(), "frozen": gc.get_freeze_count()}

seen = {"before": collector()}
def run(target, **options):
    seen["serving"] = collector()
uvicorn.run = run
if sys.argv[1] == "serve":
    cli.main(["serve", "--port", "0"])
else:  # a worker of `runstate serve --workers N` builds its app so
    app.from_environment()
    seen["serving"] = collector()
print(json.dumps(seen))
"""


@pytest.mark.parametrize("entry", ["serve", "worker"])
def test_a_server_process_freezes_startup_and_collects_generation_1_less(
    entry: str, tmp_path: Path
) -> None:
    """Guards ``memory.tune_for_serving`` and its calls in ``runstate serve`` (one
    process) and ``app.from_environment`` (each of ``--workers N``): once the app
    is built and before it serves, what startup made is frozen out of the
    collector, and generation 1 waits for 100 of generation 0's collections.
    uvicorn's run is replaced in the probe process only, to look before serving."""
    env = {**os.environ, "RUNSTATE_DATABASE_URL": f"sqlite://{tmp_path / 'gc.db'}"}
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, entry],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    seen = json.loads(probe.stdout.splitlines()[-1])
    assert (seen["before"]["thresholds"], seen["before"]["frozen"]) == ([700, 10, 10], 0)
    assert seen["serving"]["thresholds"] == list(SERVING_THRESHOLDS)
    assert seen["serving"]["frozen"] > 10_000  # modules, the schema, the app
