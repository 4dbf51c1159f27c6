"""``runstate demo``: the server, a signed-in dashboard link, and a simulated agent.

The agent books a trip, step by step at a pace a person can follow, through the
SDK: a flaky hotel API rate-limits it once, and the first agent process is
killed while "book flight" is running. A pool of two workers (the SDK's ``work``
loop, in one process for the whole demo) claims the task once its lease lapses
and resumes it; since booking a flight is not safe to repeat, it waits for a
person to decide in the dashboard, then finishes. Then the next trip starts.

The pool also runs whatever else needs a worker, such as a fork made from the
dashboard's history (PLANNED); what an earlier demo run left was ended as this
one started (``runstate demo``: ``services.lifecycle.leftovers``), so it is no
one's to run. Each trip is created leased to its first agent (``createTask``'s
lease, one write), so the pool does not take it before its crash.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from runstate.client import (
    WAIT,
    EveryStep,
    Runstate,
    RunstateError,
    SessionBusy,
    SpendReport,
    Submission,
    TaskRunner,
)

PLAN: list[str | dict[str, Any]] = [
    "search flights",
    "search hotels",
    "compare options",
    {"action": "book flight", "idempotent": False},
    {"action": "book hotel", "idempotent": False},
    {"action": "send confirmation", "idempotent": False},
]
CITIES = ["Lisbon", "Kyoto", "Valparaíso", "Tallinn", "Oaxaca"]
TRAVELLERS = ["Ana", "Kenji", "Rosa", "Mart", "Lupe", "Idris", "Nora"]
"""Seven travellers for five cities: 35 trips before a name comes again."""
CRASH_AT = "book flight"
FIRST_TRIP_WAIT = 120.0
"""Seconds the first trip waits for the dashboard to open before it starts anyway."""
PAUSE = 1.5
"""Seconds a simulated step or tool call takes: slow enough to watch."""


async def _tool(run: TaskRunner, name: str, result: Any) -> Any:
    await run.tool(name, "CALLING")
    await asyncio.sleep(PAUSE)
    await run.tool(name, "SUCCESS", result=result)
    return result


async def search_flights(run: TaskRunner) -> Any:
    return await _tool(run, "flight-search", {"options": 3, "cheapest": "TP 1351, 214 EUR"})


async def search_hotels(run: TaskRunner) -> Any:
    await run.tool("hotel-api", "CALLING")
    await asyncio.sleep(PAUSE)
    state = await run.tool("hotel-api", "RATE_LIMITED", retry_after_seconds=4)
    if state.rate_limit_reset_at is not None:
        await asyncio.sleep(4)  # the tool said when it may be called again
    return await _tool(run, "hotel-api", {"options": 5, "best": "Casa Amora, 96 EUR/night"})


async def compare_options(run: TaskRunner) -> Any:
    await asyncio.sleep(2 * PAUSE)
    return {"flight": "TP 1351", "hotel": "Casa Amora", "total": "598 EUR"}


async def book_flight(run: TaskRunner) -> Any:
    return await _tool(run, "payments", {"charged": "214 EUR", "pnr": "X7K2QM"})


async def book_hotel(run: TaskRunner) -> Any:
    return await _tool(run, "payments", {"charged": "384 EUR", "booking": "CA-88213"})


async def send_confirmation(run: TaskRunner) -> Any:
    return await _tool(run, "mailer", {"to": "traveller@example.com", "sent": True})


ACTIONS: dict[str, Callable[[TaskRunner], Awaitable[Any]]] = {
    "search flights": search_flights,
    "search hotels": search_hotels,
    "compare options": compare_options,
    "book flight": book_flight,
    "book hotel": book_hotel,
    "send confirmation": send_confirmation,
}


MODEL = "gpt-4o"
SPENT = {
    "search flights": SpendReport(900, 120, 3_450, MODEL),
    "search hotels": SpendReport(1_100, 160, 4_350, MODEL),
    "compare options": SpendReport(2_400, 380, 9_800, MODEL),
    "send confirmation": SpendReport(1_300, 420, 7_450, MODEL),
}
"""What the agent's model calls spend per step, as a real agent would report them
(prices of gpt-4o: 2.50 and 10 USD per million input and output tokens)."""
BUDGET = {"max_cost_micros": 50_000}
"""Each trip's budget, 0.05 USD: its spend shows against it in the dashboard."""

LEASE_TTL = 5
STARTUP_TTL = 60
"""The lease the demo holds for a trip's first agent while that process starts."""
POOL = 2
"""Workers in the pool: one may wait for a person's decision while another runs a fork."""
STALLED_FOR = 6
"""Seconds a crashed trip stays stalled before the pool takes it over: long enough
for a person watching to see that its agent is gone."""


async def work(run: TaskRunner, crash_at: str | None = None) -> None:
    """Run the task's remaining steps; at ``crash_at`` say so and wait to be killed."""
    for step in run.remaining:
        await run.begin(step.index)
        if step.action == crash_at:
            print("crash-point", flush=True)
            await asyncio.Event().wait()  # killed here by the demo
        output = await ACTIONS[step.action](run)
        await run.succeed(step.index, output, spend=SPENT.get(step.action))


async def agent(url: str, token: str, task_id: str, holder: str, crash_at: str) -> None:
    """The first agent process of a trip: takes over the lease the demo holds for it
    (``holder``) and runs the trip until ``crash_at``."""
    async with (
        Runstate(url, token) as rs,
        rs.run(task_id, holder=holder, policy=EveryStep(), lease_ttl=LEASE_TTL) as run,
    ):
        await work(run, crash_at)


async def pool(url: str, token: str) -> None:
    """The pool: ``POOL`` workers claiming the demo's tasks that need one (the oldest
    first: a trip whose agent died, a fork), each to its end, for as long as the demo
    runs. A step left in doubt by a crash waits for a person."""

    async def handle(run: TaskRunner) -> None:
        await work(run)

    async with Runstate(url, token) as rs:
        await asyncio.gather(
            *(
                rs.work(
                    f"worker-{os.getpid()}-{n}",
                    handle,
                    policy=EveryStep(),
                    lease_ttl=LEASE_TTL,
                    decision=WAIT,
                    idle_seconds=1.0,
                    stalled_for_seconds=STALLED_FOR,
                )
                for n in range(1, POOL + 1)
            )
        )


async def _spawn(url: str, token: str, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runstate.demo.trips",
        url,
        *args,
        env={**os.environ, "RUNSTATE_DEMO_TOKEN": token},
        stdin=asyncio.subprocess.PIPE,  # closed when the demo ends, however it ends
        stdout=asyncio.subprocess.PIPE,
        # Out of the terminal's process group: Ctrl-C reaches the demo alone, which
        # stops its agents itself, so no agent prints a KeyboardInterrupt traceback
        # (one still starting up could not even catch it).
        start_new_session=True,
    )


async def trips(url: str, token: str, session_id: str, opened: asyncio.Event) -> None:
    """Book trip after trip in the session ``session_id``, each with one crash and one
    decision for a person, the first once ``opened`` (the dashboard is open) or
    after ``FIRST_TRIP_WAIT``; after the first, a traveller's inputs to a session
    of their own show what the ledger's policies do (``inbox``); the pool runs for
    as long as the demo does."""
    agents: list[asyncio.subprocess.Process] = []
    try:
        async with Runstate(url, token) as rs:
            session = await rs.start_session(session_id, ttl_seconds=7 * 24 * 3600)
            agents.append(await _spawn(url, token, "--pool"))
            await first_trip_when(opened)
            for number in range(1, 10_000):
                city = CITIES[(number - 1) % len(CITIES)]
                traveller = TRAVELLERS[(number - 1) % len(TRAVELLERS)]
                goal = f"Book a trip to {city} for {traveller}"
                holder = f"agent-{number}"
                # Created leased to the agent, held for it until it starts (it takes
                # the lease over, at LEASE_TTL): a PLANNED task with no live lease is
                # the pool's to claim, the moment it exists.
                task = await rs.create_task(
                    session.id, goal, PLAN, holder=holder, lease_ttl=STARTUP_TTL, budget=BUDGET
                )
                first = await _spawn(url, token, task.id, holder, "--crash-at", CRASH_AT)
                agents.append(first)
                assert first.stdout is not None
                if await first.stdout.readline() == b"crash-point\n":  # booking the flight
                    # os.kill, not Process.kill: that polls the child first, and an
                    # agent that has just ended would be reaped behind asyncio's
                    # child watcher, which then logs "Unknown child process".
                    with contextlib.suppress(ProcessLookupError):  # ended already
                        os.kill(first.pid, signal.SIGKILL)
                    print(
                        f"{holder} killed (SIGKILL) during '{CRASH_AT}' of \"{goal}\": its"
                        f" lease lapses within {LEASE_TTL} s, and the pool takes the trip"
                        f" over {STALLED_FOR} s later",
                        flush=True,
                    )
                await first.wait()  # killed, or ended on its own (its stderr says why)
                agents.remove(first)
                await _until_finished(rs, task.id)  # the pool takes it over
                if number == 1:
                    await inbox(rs, f"{session.id}-inbox", base=url, token=token)
                await asyncio.sleep(15)
    finally:
        # The demo is stopping: so are its agents. Closing an agent's stdin ends it
        # (``_exit_with_parent``), with no signal to race its reaping (above).
        for process in agents:
            if process.stdin is not None:
                process.stdin.close()
        for process in agents:
            await process.wait()


INBOX_PLAN = ["search flights", "compare options"]
"""The plan of each input the traveller sends to the inbox session: the pool's
workers run it as they run a trip's steps."""


async def inbox(rs: Runstate, session_id: str, *, base: str, token: str) -> None:
    """A traveller's inputs to one session arriving while the first still runs:
    what each admission policy does with one, told in the terminal, the pool
    serving the ledger in its order (``submitInput``, docs/semantics.md)."""
    session = await rs.start_session(session_id, ttl_seconds=7 * 24 * 3600)
    print(
        "\nA traveller now sends several inputs to one session while the first still"
        f" runs. Its ledger: {base}/#token={token}&session={session.id}",
        flush=True,
    )

    async def send(text: str, policy: str) -> Submission | None:
        try:
            return await rs.submit(session.id, text, INBOX_PLAN, input=text, policy=policy)
        except SessionBusy as busy:
            print(
                f'  {policy:<9} "{text}": refused, the session is busy with input'
                f" #{busy.active.seq}; nothing was written",
                flush=True,
            )
            return None

    first = await send("Plan a weekend in Porto", "ENQUEUE")
    assert first is not None
    assert first.task_id is not None
    print(f'  ENQUEUE   "{first.input}": #{first.seq}, {first.status}, runs at once', flush=True)
    async for event in rs.watch(first.task_id):
        if event.status == "RUNNING":
            break  # the pool has it under way
    later = await send("Also find a restaurant", "ENQUEUE")
    assert later is not None
    assert later.task_id is not None
    print(f'  ENQUEUE   "{later.input}": #{later.seq}, QUEUED behind #{first.seq}', flush=True)
    await send("What is the weather there?", "REJECT")
    instead = await send("Make it Lisbon instead", "INTERRUPT")
    assert instead is not None
    assert instead.task_id is not None
    print(
        f'  INTERRUPT "{instead.input}": #{instead.seq}; #{first.seq} stops at its next step'
        f" (what it did is kept), #{instead.seq} runs next, ahead of #{later.seq}",
        flush=True,
    )
    for task_id in (instead.task_id, later.task_id):  # in the ledger's order
        await _until_finished(rs, task_id)
    ended = await rs.submissions(session.id)
    told = ", ".join(f"#{s.seq} {s.status}" for s in ended)
    print(f"  the ledger: {told}\n", flush=True)


async def first_trip_when(opened: asyncio.Event) -> None:
    """Wait for the dashboard to open, or ``FIRST_TRIP_WAIT`` seconds; then say in
    the terminal that the first trip starts unwatched, so that trips starting in a
    terminal where no page was opened are not a surprise."""
    try:
        await asyncio.wait_for(opened.wait(), FIRST_TRIP_WAIT)
    except TimeoutError:
        print(
            "runstate: no page has opened, so the first trip starts now"
            " (open the link above to watch it)",
            flush=True,
        )


async def _until_finished(rs: Runstate, task_id: str) -> None:
    """Follow the task until it is COMPLETED, FAILED or CANCELLED."""
    async for event in rs.watch(task_id):
        if event.status in ("COMPLETED", "FAILED", "CANCELLED"):
            return


def _exit_with_parent() -> None:
    """End this agent when the demo that spawned it ends (its stdin pipe closes),
    even if the demo was killed and could not stop it."""
    sys.stdin.read()
    os._exit(0)


def main() -> None:
    """The processes the demo spawns: ``python -m runstate.demo.trips URL TASK_ID HOLDER
    --crash-at ACTION`` (a trip's first agent) or ``python -m runstate.demo.trips URL
    --pool``."""
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    parser = argparse.ArgumentParser(prog="runstate.demo.trips")
    parser.add_argument("url")
    parser.add_argument("task_id", nargs="?")
    parser.add_argument("holder", nargs="?")
    parser.add_argument("--crash-at")
    parser.add_argument("--pool", action="store_true", help="be the pool of workers")
    args = parser.parse_args()
    token = os.environ["RUNSTATE_DEMO_TOKEN"]
    try:
        if args.pool:
            asyncio.run(pool(args.url, token))
        else:
            asyncio.run(agent(args.url, token, args.task_id, args.holder, args.crash_at))
    except RunstateError as error:  # one line, as the demo itself says why it stopped
        name = "the pool" if args.pool else args.holder
        sys.exit(f"runstate demo: {name} stopped: {type(error).__name__}: {error}")


if __name__ == "__main__":
    main()
