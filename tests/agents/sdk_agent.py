"""An agent written with the SDK, for crash tests.

    python -m tests.agents.sdk_agent URL TOKEN TASK_ID EFFECTS [--pause-at ACTION]
        [--decision RETRY|SKIP] [--parallel]

It runs the task's remaining steps with ``EveryNSteps(2)``, appending each
action to EFFECTS when it performs it, and blocks on stdin right after beginning
the --pause-at step so that a test can kill it there. With --parallel it begins
its first two steps together (writing every step, ``EveryStep``) and performs
both before pausing, as an agent does when its model asks for two tool calls at
once. Without --decision, a step in
doubt ends it with {"event": "needs-decision", "steps": [...]}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from runstate.client import EveryNSteps, EveryStep, NeedsDecision, Runstate


def agent_arguments() -> argparse.ArgumentParser:
    """The arguments every SDK test agent takes first: URL TOKEN TASK_ID EFFECTS."""
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("task_id")
    parser.add_argument("effects", type=Path)
    return parser


async def main() -> None:
    parser = agent_arguments()
    parser.add_argument("--pause-at")
    parser.add_argument("--decision")
    parser.add_argument("--parallel", action="store_true")
    args = parser.parse_args()
    async with Runstate(args.url, args.token) as rs:
        try:
            await work(rs, args)
        except NeedsDecision:
            task = await rs.task(args.task_id)
            in_doubt = [s.index for s in task.steps or () if s.status == "IN_DOUBT"]
            print(json.dumps({"event": "needs-decision", "steps": in_doubt}), flush=True)
            return
    print(json.dumps({"event": "finished"}), flush=True)


async def work(rs: Runstate, args: argparse.Namespace) -> None:
    async with rs.run(
        args.task_id,
        holder=f"sdk-agent-{os.getpid()}",
        policy=EveryStep() if args.parallel else EveryNSteps(2),
        lease_ttl=2,
        decision=args.decision,
    ) as run:
        if args.parallel:
            both = run.remaining[:2]
            for step in both:
                await run.begin(step.index)
            for step in both:
                with args.effects.open("a") as effects:
                    effects.write(step.action + "\n")
            print(json.dumps({"event": "began", "actions": [s.action for s in both]}), flush=True)
            await asyncio.to_thread(sys.stdin.readline)
        for step in run.remaining:
            await run.begin(step.index)
            print(json.dumps({"event": "began", "action": step.action}), flush=True)
            if step.action == args.pause_at:
                await asyncio.to_thread(sys.stdin.readline)
            with args.effects.open("a") as effects:
                effects.write(step.action + "\n")
            await run.succeed(step.index, {"done": step.action})


if __name__ == "__main__":
    asyncio.run(main())
