"""An agent written with the SDK that writes every step with ``durability="async"``,
for the tests of the runner's queued writes.

    python -m tests.agents.queued_agent URL TOKEN TASK_ID EFFECTS [--pause-after ACTION]

For each remaining step it prints {"event": "beginning", "action": ...}, begins
the step, prints "began", appends the action to EFFECTS (performing it), succeeds
and prints "done". After the "done" of --pause-after it blocks on stdin, so that a
test can act on the server before the agent goes on.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from runstate.client import EveryStep, Runstate
from tests.agents.sdk_agent import agent_arguments


def say(event: str, action: str) -> None:
    print(json.dumps({"event": event, "action": action}), flush=True)


async def main() -> None:
    parser = agent_arguments()
    parser.add_argument("--pause-after")
    args = parser.parse_args()
    async with (
        Runstate(args.url, args.token) as rs,
        rs.run(
            args.task_id,
            holder=f"queued-agent-{os.getpid()}",
            policy=EveryStep(),
            lease_ttl=3,
            durability="async",
        ) as run,
    ):
        for step in run.remaining:
            say("beginning", step.action)
            await run.begin(step.index)
            say("began", step.action)
            with args.effects.open("a") as effects:
                effects.write(step.action + "\n")
            await run.succeed(step.index, {"done": step.action})
            say("done", step.action)
            if step.action == args.pause_after:
                await asyncio.to_thread(sys.stdin.readline)
    print(json.dumps({"event": "finished"}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
