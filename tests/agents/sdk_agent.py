"""An agent written with the SDK, for crash tests.

    python -m tests.agents.sdk_agent URL TOKEN TASK_ID EFFECTS [--pause-at ACTION]
        [--decision RETRY|SKIP]

It runs the task's remaining steps with ``EveryNSteps(2)``, appending each
action to EFFECTS when it performs it, and blocks on stdin right after beginning
the --pause-at step so that a test can kill it there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from runstate.client import EveryNSteps, Runstate


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("task_id")
    parser.add_argument("effects", type=Path)
    parser.add_argument("--pause-at")
    parser.add_argument("--decision")
    args = parser.parse_args()
    async with (
        Runstate(args.url, args.token) as rs,
        rs.run(
            args.task_id,
            holder=f"sdk-agent-{args.decision or 'first'}",
            policy=EveryNSteps(2),
            lease_ttl=2,
            decision=args.decision,
        ) as run,
    ):
        for step in run.remaining:
            await run.begin(step.index)
            print(json.dumps({"event": "began", "action": step.action}), flush=True)
            if step.action == args.pause_at:
                await asyncio.to_thread(sys.stdin.readline)
            with args.effects.open("a") as effects:
                effects.write(step.action + "\n")
            await run.succeed(step.index, {"done": step.action})
    print(json.dumps({"event": "finished"}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
