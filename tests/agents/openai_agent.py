"""An OpenAI Agents SDK process on a RunstateSession, for the cross-process tests.

    python -m tests.agents.openai_agent URL TOKEN SESSION_ID add WRITER BATCHES
    python -m tests.agents.openai_agent URL TOKEN SESSION_ID resume RAN_FILE

``add``: waits for a line on stdin (so that several start together), then adds
BATCHES batches of three items ``{"w": WRITER, "b": n, "i": 0..2}`` and prints
``{"added": BATCHES}``. ``resume``: waits for a line on stdin, asks the session
for its decided run (``load_run_state``) and, when it gets one, runs it to its
end with a scripted model; the approved tool appends a line to RAN_FILE. Prints
``{"resumed": true, "output": ...}`` or ``{"resumed": false}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message

from runstate.integrations.openai_agents import RunstateSession

set_tracing_disabled(True)  # no trace export (it needs OPENAI_API_KEY), as the docs do


def say(**line: object) -> None:
    print(json.dumps(line), flush=True)


def mailer(ran: Path, model: ScriptedModel) -> Agent[None]:
    """The tests' agent: one tool that needs a person's approval, which records
    each run of it in ``ran``."""

    @function_tool(needs_approval=True)
    def send_mail(to: str) -> str:
        """Send an email."""
        with ran.open("a") as log:
            log.write(f"{to}\n")
        return f"sent to {to}"

    return Agent(name="mailer", model=model, tools=[send_mail])


async def add(session: RunstateSession, writer: int, batches: int) -> None:
    for n in range(batches):
        await session.add_items([{"w": writer, "b": n, "i": i} for i in range(3)])  # type: ignore[misc]
    say(added=batches)


async def resume(session: RunstateSession, ran: Path) -> None:
    agent = mailer(ran, ScriptedModel([[assistant_message("mail handled")]]))
    state = await session.load_run_state(agent)
    if state is None:
        say(resumed=False)
        return
    result = await Runner.run(agent, state, session=session)
    await session.finish_run(output=str(result.final_output))
    say(resumed=True, output=result.final_output)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("session_id")
    parser.add_argument("mode", choices=["add", "resume"])
    parser.add_argument("rest", nargs="*")
    args = parser.parse_args()
    async with RunstateSession(args.session_id, url=args.url, token=args.token) as session:
        say(ready=True)
        sys.stdin.readline()
        if args.mode == "add":
            await add(session, int(args.rest[0]), int(args.rest[1]))
        else:
            await resume(session, Path(args.rest[0]))


if __name__ == "__main__":
    asyncio.run(main())
