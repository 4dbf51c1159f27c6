"""The SDK's client: ``Runstate``, the GraphQL calls of ``calls.Calls`` with the
worker loops that drive a task through a ``TaskRunner``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from runstate.client.calls import Calls
from runstate.client.exceptions import BudgetExceeded, NeedsDecision, TaskInterrupted
from runstate.client.policies import CheckpointPolicy
from runstate.client.records import Lock
from runstate.client.runner import Durability, TaskRunner

log = logging.getLogger(__name__)


class Runstate(Calls):
    """A connection to a runstate server for one caller (its token): the calls of
    ``Calls`` (with their retries and rate-limit waits), and the worker loops that
    drive a task through a ``TaskRunner`` (``run``, ``work``, ``serve``).

    Use it as ``async with Runstate(url, token) as rs: ...``.
    """

    async def work(
        self,
        holder: str,
        handle: Callable[[TaskRunner], Awaitable[None]],
        *,
        session_id: str | None = None,
        policy: CheckpointPolicy | None = None,
        lease_ttl: int = 30,
        decision: str | None = None,
        durability: Durability = "sync",
        idle_seconds: float = 1.0,
        stalled_for_seconds: int = 0,
        stop: asyncio.Event | None = None,
    ) -> None:
        """A worker's loop: claim a task, resume it, ``await handle(run)`` with its
        runner, and again, until ``stop`` is set. With nothing to claim it looks
        again every ``idle_seconds``. A pool of such workers finishes the tasks of a
        worker that died, with no person involved (but for steps in doubt, which
        ``decision`` answers, or leaves to a person); a dead worker's task once its
        lease lapsed ``stalled_for_seconds`` ago (``claimTask``'s
        ``stalledForSeconds``)."""

        async def drive(lock: Lock) -> None:
            runner = self.run(
                lock.task_id,
                holder=holder,
                policy=policy,
                lease_ttl=lease_ttl,
                decision=decision,
                durability=durability,
            )
            await _driven(runner, handle)

        await self._claiming(
            holder,
            lease_ttl,
            drive,
            session_id=session_id,
            stalled_for_seconds=stalled_for_seconds,
            idle_seconds=idle_seconds,
            stop=stop,
        )

    async def serve(
        self,
        session_id: str,
        handle: Callable[[Any, TaskRunner], Awaitable[None]],
        *,
        holder: str,
        policy: CheckpointPolicy | None = None,
        lease_ttl: int = 30,
        decision: str | None = None,
        durability: Durability = "sync",
        idle_seconds: float = 1.0,
        stop: asyncio.Event | None = None,
    ) -> None:
        """Serve a session's submissions in ledger order, until ``stop`` is set: claim
        the task whose turn it is (``claimTask`` with the session), enter a runner on
        it and ``await handle(input, run)`` with its submission's input (``None`` for
        a task made with ``create_task`` in that session, outside the ledger), then
        the next. With nothing to claim it looks again every ``idle_seconds``.

        A submission interrupted while it runs (INTERRUPT or ROLLBACK) stops at its
        runner's next ``begin``, which raises ``TaskInterrupted``: ``serve`` lets it
        out of ``handle``, leaves the runner (what is pending written, the lease let
        go, which ends the task CANCELLED), logs one line and serves the submission
        that interrupted it. Several processes may serve one session: the ledger
        hands each task to one of them, one task at a time."""

        async def answer(run: TaskRunner) -> None:
            submission = run.submission
            await handle(None if submission is None else submission.input, run)

        await self.work(
            holder,
            answer,
            session_id=session_id,
            policy=policy,
            lease_ttl=lease_ttl,
            decision=decision,
            durability=durability,
            idle_seconds=idle_seconds,
            stop=stop,
        )

    async def _claiming(
        self,
        holder: str,
        lease_ttl: int,
        drive: Callable[[Lock], Awaitable[None]],
        *,
        session_id: str | None,
        idle_seconds: float,
        stop: asyncio.Event | None,
        stalled_for_seconds: int = 0,
    ) -> None:
        """Claim a task and ``await drive(lock)``, again and again until ``stop`` is
        set; with nothing to claim, look again every ``idle_seconds``."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            lock = await self.claim(
                holder, lease_ttl, session_id=session_id, stalled_for_seconds=stalled_for_seconds
            )
            if lock is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), idle_seconds)
                continue
            await drive(lock)

    def run(
        self,
        task_id: str,
        *,
        holder: str,
        policy: CheckpointPolicy | None = None,
        lease_ttl: int = 30,
        decision: str | None = None,
        durability: Durability = "sync",
    ) -> TaskRunner:
        """A ``TaskRunner`` for this task: ``async with rs.run(task_id, holder=...) as run``.

        ``decision`` answers a step left in doubt by a crash: "RETRY", "SKIP", ``WAIT``
        (until a person decides elsewhere), or None to raise ``NeedsDecision``.
        ``durability="async"`` sends the writes of idempotent steps in the background
        while the next step runs (see ``TaskRunner``).
        """
        return TaskRunner(
            self,
            task_id,
            holder=holder,
            policy=policy,
            lease_ttl=lease_ttl,
            decision=decision,
            durability=durability,
        )


async def _driven(runner: TaskRunner, handle: Callable[[TaskRunner], Awaitable[None]]) -> None:
    """``handle`` in ``runner``; the ways a task stops that a worker loop goes on
    from (a decision awaited, a budget spent, an interrupt) logged, not raised."""
    try:
        async with runner as run:
            await handle(run)
    except NeedsDecision as waiting:
        log.info("task %s waits for a person's decision", waiting)
    except BudgetExceeded as stopped:  # the runner said where; claims pass it over
        log.info("task %s stopped at its budget: %s", runner.task_id, stopped)
    except TaskInterrupted as interrupted:  # the lease let go: the task ends CANCELLED
        log.info("task %s stopped: %s", runner.task_id, interrupted)
