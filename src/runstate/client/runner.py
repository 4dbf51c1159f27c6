"""``TaskRunner``: drive one task with a lease, its version and a checkpoint policy.

    async with rs.run(task_id, holder="worker-1", policy=EveryNSteps(5)) as run:
        for step in run.remaining:
            await run.begin(step.index)
            output = await do_the_work(step)
            await run.succeed(step.index, output)

On entry it acquires the task's lease (waiting while another holder has it),
renews it in the background, and resumes the task. It carries the task's version
and the fencing token into every write. If the lease is lost (taken over after a
pause, or released elsewhere), every later call raises ``LeaseLost``.

With ``durability="async"`` the writes of idempotent steps are sent in the
background, in order, while the next step runs (as LangGraph's
``durability="async"``): a process killed meanwhile loses only idempotent steps,
run again on resume. A step that is not idempotent starts only once everything
before it is committed, and its success is committed before ``succeed`` returns;
a failure, a tool report, ``flush`` and leaving the runner wait for the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from runstate.basics.enums import StepStatus, ToolStatus
from runstate.client.exceptions import (
    BudgetExceeded,
    LeaseLost,
    LockHeld,
    LockNotHeld,
    NeedsDecision,
    NotFound,
    ProblemError,
    ServerError,
    ServerUnavailable,
    StaleFencingToken,
    TaskInterrupted,
    VersionConflict,
)
from runstate.client.policies import CheckpointPolicy, EveryStep
from runstate.client.queued import Queued, Write
from runstate.client.records import FINISHED, SpendReport, Step, Submission, Task, ToolState

if TYPE_CHECKING:
    from runstate.client.calls import Calls

log = logging.getLogger(__name__)

WAIT = "WAIT"
"""``decision=WAIT``: let a person decide (e.g. in the dashboard) and go on after."""

Durability = Literal["sync", "async"]


class TaskRunner:
    """Drives one task for one worker; use ``Runstate.run``."""

    def __init__(
        self,
        api: Calls,
        task_id: str,
        *,
        holder: str,
        policy: CheckpointPolicy | None = None,
        lease_ttl: int = 30,
        decision: str | None = None,
        lease_wait: float = 60.0,
        durability: Durability = "sync",
    ) -> None:
        if durability not in ("sync", "async"):
            raise ValueError(f'durability must be "sync" or "async", not {durability!r}')
        self.api = api
        self.task_id = task_id
        self.holder = holder
        self.policy = policy or EveryStep()
        self.lease_ttl = lease_ttl
        self.decision = decision
        self.lease_wait = lease_wait
        self.durability = durability
        self.fencing_token = 0
        self.task: Task | None = None
        self.lost = asyncio.Event()
        self._pending: list[dict[str, Any]] = []
        self._completed_since_flush = 0
        self._renewer: asyncio.Task[None] | None = None
        self._queued: Queued | None = None

    # -- entering and leaving

    async def __aenter__(self) -> TaskRunner:
        while True:
            await self._acquire()
            plan = await self._guard(
                self.api.resume(self.task_id, fencing_token=self.fencing_token)
            )
            self.task = plan.task
            if not plan.needs_decision:
                break
            if self.decision is None:
                await self._release()
                raise NeedsDecision(self.task_id, plan.steps_in_doubt[0])
            if self.decision == WAIT:
                await self._release()
                self._say_waiting(plan.steps_in_doubt)
                await self._await_decision()
                continue
            status = StepStatus.PENDING if self.decision == "RETRY" else StepStatus.SKIPPED
            for index in plan.steps_in_doubt:  # one decision per step in doubt
                head = await self._guard(
                    self.api.decide(
                        self.task_id,
                        index,
                        self.decision,
                        self.version,
                        fencing_token=self.fencing_token,
                    )
                )
                self._wrote(head, {index: {"status": status}})
            break
        self._renewer = asyncio.create_task(self._renew(), name=f"renew-{self.task_id}")
        if self.durability == "async":
            self._queued = Queued(self._send, f"writes-{self.task_id}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if isinstance(exc[1], BudgetExceeded):
            self._say_over_budget(exc[1])
        try:
            if not self.lost.is_set():
                await self.flush()
        finally:
            if self._queued is not None:
                await self._queued.close()
            if self._renewer is not None:
                self._renewer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._renewer
            if not self.lost.is_set():
                with contextlib.suppress(ServerUnavailable, ServerError):  # it lapses
                    await self._release()

    async def _acquire(self) -> None:
        deadline = time.monotonic() + self.lease_wait
        while True:
            try:
                lock = await self.api.acquire_lock(self.task_id, self.holder, self.lease_ttl)
            except LockHeld:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(min(1.0, self.lease_ttl / 4))  # the holder's lease must lapse
                continue
            self.fencing_token = lock.fencing_token
            self.lost.clear()
            return

    async def _release(self) -> None:
        """Give the lease up; none to give up when it lapsed, or when the task is gone
        (a ROLLBACK removed it once it stopped)."""
        with contextlib.suppress(LockNotHeld, NotFound):
            await self.api.release_lock(self.task_id, self.holder)

    def _say_waiting(self, steps: tuple[int, ...]) -> None:
        """One line, on stderr with no logging set up (Python's last-resort handler
        shows warnings): which steps wait for a person, and where to decide."""
        task = self._task
        named = ", ".join(f'{i} "{task.steps[i].action}"' if task.steps else str(i) for i in steps)
        log.warning(
            "runstate: task %s waits for a person to decide step %s: %s",
            self.task_id,
            named,
            self.api.dashboard_link(self.task_id),
        )

    def _say_over_budget(self, refused: BudgetExceeded) -> None:
        """One line when a budget stops the runner: what was spent of which budget,
        and where to raise it. The runner leaves as ever (its pending writes written,
        its lease given up), so the task resumes where it stopped once raised."""
        whose = "its" if refused.scope == "TASK" else "its session's"
        log.warning(
            "runstate: task %s stopped: %s budget is spent (%s); raise it to go on: %s",
            self.task_id,
            whose,
            refused.message,
            self.api.dashboard_link(self.task_id),
        )

    async def _await_decision(self) -> None:
        """Follow the task until nobody needs to decide any more."""
        async for event in self.api.watch(self.task_id):
            if event.status != "AWAITING_DECISION":
                return

    async def _renew(self) -> None:
        """Renew the lease every third of its ttl. A refusal ends it at once. When the
        server cannot be reached, keep trying, but stop the runner (``lost``) a sixth
        of the ttl before the lease would lapse, so that no write of this runner can
        land after another worker could have taken the task over."""
        valid_until = time.monotonic() + self.lease_ttl
        margin = self.lease_ttl / 6
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            asked = time.monotonic()
            budget = valid_until - margin - asked
            try:
                if budget <= 0:
                    raise TimeoutError("no renewal in time")
                await asyncio.wait_for(
                    self.api.renew_lock(self.task_id, self.holder, self.lease_ttl), budget
                )
                valid_until = asked + self.lease_ttl
            except ProblemError as error:
                log.warning("lease on %s lost: %s", self.task_id, error)
                self.lost.set()
                return
            except (ServerUnavailable, ServerError, TimeoutError) as error:
                if time.monotonic() >= valid_until - margin:
                    log.warning("lease on %s given up: no renewal (%s)", self.task_id, error)
                    self.lost.set()
                    return

    async def _guard(self, call: Any) -> Any:
        try:
            return await call
        except (StaleFencingToken, LockNotHeld) as error:
            self.lost.set()
            raise LeaseLost(str(error)) from error

    # -- the work

    @property
    def version(self) -> int:
        """The task's version as this runner last wrote or read it."""
        return self._task.version

    @property
    def _task(self) -> Task:
        if self.task is None:
            raise RuntimeError("use the runner as `async with rs.run(...) as run:`")
        return self.task

    def _wrote(self, head: Task, changed: dict[int, dict[str, Any]]) -> None:
        """Take a write's answer (the task's head) with the step changes it made."""
        self.task = self._task.updated(head, changed)

    @property
    def submission(self) -> Submission | None:
        """The submission the task carries out, as it stood when the runner entered
        (its ``input``, ``seq``); None for a task outside any ledger."""
        return self._task.submission

    @property
    def remaining(self) -> list[Step]:
        """Steps not yet finished (SUCCESS or SKIPPED), in order, as of the last write."""
        return [s for s in self._task.steps or () if s.status not in FINISHED]

    def _check(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(f"the lease on {self.task_id} was lost")

    def _idempotent(self, index: int) -> bool:
        return (self._task.steps or ())[index].idempotent

    async def _write(
        self,
        patches: list[dict[str, Any]],
        call: Callable[[], Awaitable[Task]],
        *,
        wait: bool,
    ) -> None:
        """Make one versioned write of these step changes: now, or with
        ``durability="async"`` and not ``wait``, queued behind the writes before it.
        ``call`` is made when the write is sent, so it carries the version the write
        before it answered."""
        write = Write(patches, call)
        if self._queued is not None and not wait:
            self._queued.put(write)
            return
        await self._settled()
        await self._send([write])

    async def _send(self, batch: list[Write]) -> None:
        """Send one write as its own call, or several that waited together as one
        checkpoint (a step's changes merged: RUNNING then SUCCESS is SUCCESS)."""
        merged: dict[int, dict[str, Any]] = {}
        for write in batch:
            for patch in write.patches:
                merged.setdefault(patch["index"], {}).update(patch)
        if len(batch) == 1:
            call = batch[0].call
        else:
            patches = list(merged.values())

            async def call() -> Task:
                return await self.api.checkpoint(
                    self.task_id, self.version, patches, fencing_token=self.fencing_token
                )

        try:
            head = await self._guard(call())
        except VersionConflict:
            if not await self._asked_to_stop():
                raise
            head = await self._guard(call())  # at the version the request to stop left
        changed = {i: {k: v for k, v in p.items() if k != "index"} for i, p in merged.items()}
        self._wrote(head, changed)

    async def _asked_to_stop(self) -> bool:
        """Whether the task was asked to stop (an INTERRUPT or ROLLBACK of its
        submission), read after a write met another version: that request is a
        write of its own, which moved the version. If so the runner takes the
        task's version as it now stands, for its write to be sent again: the end of
        a step is accepted (it happened; the task then ends CANCELLED), a start
        refused with ``TaskInterrupted``."""
        current = await self.api.task(self.task_id)
        if not current.interrupt_requested:
            return False
        self.task = replace(self._task, version=current.version, interrupt_requested=True)
        return True

    async def _settled(self) -> None:
        """Wait until every queued write is committed (``durability="async"``)."""
        if self._queued is not None:
            await self._queued.drain()

    async def begin(self, index: int) -> None:
        """Mark a step RUNNING. Written at once for EveryStep and for any step that is
        not idempotent (with whatever is pending), so a crash inside it is noticed.

        Raises ``TaskInterrupted`` once the task's submission was asked to stop:
        the server's answer to the start, or, when a write's answer already said so
        (the write that finished the step before ended the task CANCELLED), the
        runner's own, without sending the start."""
        self._check()
        await self._refuse_if_interrupted()
        if self.policy.every_step:
            await self._write(
                [{"index": index, "status": StepStatus.RUNNING}],
                lambda: self.api.start_step(
                    self.task_id, index, self.version, fencing_token=self.fencing_token
                ),
                wait=not self._idempotent(index),
            )
        elif not self._idempotent(index):
            start = {"index": index, "status": StepStatus.RUNNING}
            self._pending.append(start)
            try:
                await self._checkpoint(wait=True)
            except (TaskInterrupted, BudgetExceeded):
                # The start was refused, and with it what was pending: leaving the
                # runner writes the steps that finished before it, without it.
                self._pending.remove(start)
                raise

    async def _refuse_if_interrupted(self) -> None:
        """Raise ``TaskInterrupted`` when the last answer said the task was asked to
        stop, with its submission as it stands now (INTERRUPTED, or ROLLED_BACK)."""
        task = self._task
        if task.interrupt_requested and task.submission is not None:
            submission = await self.api.submission(task.submission.id)
            by = f" by submission {submission.displaced_by!r}" if submission.displaced_by else ""
            message = (
                f"submission {submission.seq} of session {submission.session_id!r} was"
                f" interrupted{by}: its task starts no new work"
            )
            raise TaskInterrupted({"message": message}, submission)

    async def succeed(self, index: int, output: Any = None, **reported: Any) -> None:
        """Record a step's success, with whatever else it reports (``reported``: step
        fields by their Python names, ``spend=SpendReport(...)`` what it spent since
        its last report); written now or later, as the policy says."""
        self._check()
        patch = {"index": index, "status": StepStatus.SUCCESS, "output": output, **reported}
        if self.policy.every_step:
            await self._write(
                [patch],
                lambda: self.api.complete_step(
                    self.task_id,
                    index,
                    self.version,
                    output,
                    fencing_token=self.fencing_token,
                    **reported,
                ),
                wait=not self._idempotent(index),
            )
            return
        self._pending.append(patch)
        self._completed_since_flush += 1
        if self.policy.due(self._completed_since_flush):
            await self._checkpoint(wait=False)

    async def fail(self, index: int, error: str, **reported: Any) -> None:
        """Record a step's failure, with whatever else it reports (``spend`` too),
        and write it, with anything pending, at once."""
        self._check()
        patch = {"index": index, "status": StepStatus.FAILED, "error": error, **reported}
        if self.policy.every_step:
            await self._write(
                [patch],
                lambda: self.api.fail_step(
                    self.task_id,
                    index,
                    self.version,
                    error,
                    fencing_token=self.fencing_token,
                    **reported,
                ),
                wait=True,
            )
            return
        self._pending.append(patch)
        await self._checkpoint(wait=True)

    async def tool(self, tool_name: str, outcome: str, **report: Any) -> ToolState:
        """Report a tool call under the lease, after the writes queued before it (so
        the task's log keeps the agent's order); a tool limit hit is a key point."""
        self._check()
        await self._settled()
        state: ToolState = await self._guard(
            self.api.record_tool_call(
                self.task_id, tool_name, outcome, fencing_token=self.fencing_token, **report
            )
        )
        if self.policy.key_points and (
            outcome == "RATE_LIMITED" or state.status is ToolStatus.FAILED
        ):
            await self.flush()
        return state

    async def spend(
        self,
        index: int,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_micros: int = 0,
        model: str | None = None,
    ) -> None:
        """Report what a step that has started spent (a step that makes several model
        calls reports each), under the lease, after the writes queued before it. It
        needs no version and leaves the task's alone; a spend past a budget is
        recorded all the same (it has happened): the next ``begin`` is refused."""
        self._check()
        await self._settled()
        report = SpendReport(input_tokens, output_tokens, cost_micros, model)
        head = await self._guard(
            self.api.record_spend(self.task_id, index, report, fencing_token=self.fencing_token)
        )
        self._wrote(head, {})

    async def flush(self) -> None:
        """Write every pending step change in one checkpoint, and wait until it and
        every write queued before it are committed."""
        self._check()
        await self._checkpoint(wait=True)
        await self._settled()

    async def _checkpoint(self, *, wait: bool) -> None:
        """Write the pending step changes in one ``checkpointTask``."""
        if not self._pending:
            return
        pending = self._pending.copy()
        await self._write(
            pending,
            lambda: self.api.checkpoint(
                self.task_id, self.version, pending, fencing_token=self.fencing_token
            ),
            wait=wait,
        )
        self._pending = []
        self._completed_since_flush = 0
