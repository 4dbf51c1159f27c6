"""An agent that serves a session's ledger with the SDK (``Runstate.serve``), for
the tests of interrupts.

    python -m tests.agents.ledger_agent URL TOKEN SESSION_ID --last INPUT
        [--pause-at ACTION]

For each step of each submission it runs, in ledger order, it prints
{"event": "began", "input": ..., "action": ...} and, once the step succeeded,
"done". Right after beginning the --pause-at step it blocks on stdin, so that a
test can submit an INTERRUPT while the step runs. It stops once the submission
whose input is --last is done, and prints {"event": "finished"}. The SDK's log
lines (``runstate``, INFO) go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from typing import Any

from runstate.client import Runstate, TaskRunner


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("session_id")
    parser.add_argument("--last", required=True)
    parser.add_argument("--pause-at")
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    logging.getLogger("runstate").setLevel(logging.INFO)
    stop = asyncio.Event()

    async def answer(text: Any, run: TaskRunner) -> None:
        for step in run.remaining:
            await run.begin(step.index)
            say(event="began", input=text, action=step.action)
            if step.action == args.pause_at:
                await asyncio.to_thread(sys.stdin.readline)
            await run.succeed(step.index, {"done": step.action})
            say(event="done", input=text, action=step.action)
        if text == args.last:
            stop.set()

    async with Runstate(args.url, args.token) as rs:
        await rs.serve(
            args.session_id,
            answer,
            holder=f"ledger-agent-{os.getpid()}",
            lease_ttl=5,
            idle_seconds=0.1,
            stop=stop,
        )
    say(event="finished")


if __name__ == "__main__":
    asyncio.run(main())
