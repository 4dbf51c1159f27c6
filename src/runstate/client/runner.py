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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from gql.transport.exceptions import TransportError

from runstate.client.errors import (
    LeaseLost,
    LockHeld,
    LockNotHeld,
    NeedsDecision,
    ProblemError,
    ServerUnavailable,
    StaleFencingToken,
)
from runstate.client.models import FINISHED, Step, Task, ToolState
from runstate.client.policies import CheckpointPolicy, EveryStep
from runstate.enums import StepStatus, ToolStatus

if TYPE_CHECKING:
    from runstate.client.calls import Calls

log = logging.getLogger(__name__)

WAIT = "WAIT"
"""``decision=WAIT``: let a person decide (e.g. in the dashboard) and go on after."""


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
    ) -> None:
        self.api = api
        self.task_id = task_id
        self.holder = holder
        self.policy = policy or EveryStep()
        self.lease_ttl = lease_ttl
        self.decision = decision
        self.lease_wait = lease_wait
        self.fencing_token = 0
        self.task: Task | None = None
        self.lost = asyncio.Event()
        self._pending: list[dict[str, Any]] = []
        self._completed_since_flush = 0
        self._renewer: asyncio.Task[None] | None = None

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
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        try:
            if not self.lost.is_set():
                await self.flush()
        finally:
            if not self.lost.is_set():
                with contextlib.suppress(ServerUnavailable, TransportError, OSError):  # it lapses
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
        with contextlib.suppress(LockNotHeld):
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
            except (ServerUnavailable, TransportError, OSError, TimeoutError) as error:
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
    def remaining(self) -> list[Step]:
        """Steps not yet finished (SUCCESS or SKIPPED), in order, as of the last write."""
        return [s for s in self._task.steps or () if s.status not in FINISHED]

    def _check(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(f"the lease on {self.task_id} was lost")

    async def begin(self, index: int) -> None:
        """Mark a step RUNNING. Written at once for EveryStep and for any step that is
        not idempotent (with whatever is pending), so a crash inside it is noticed."""
        self._check()
        step = (self._task.steps or ())[index]
        if self.policy.every_step:
            head = await self._guard(
                self.api.start_step(
                    self.task_id, index, self.version, fencing_token=self.fencing_token
                )
            )
            self._wrote(head, {index: {"status": StepStatus.RUNNING}})
        elif not step.idempotent:
            self._pending.append({"index": index, "status": StepStatus.RUNNING})
            await self.flush()

    async def succeed(self, index: int, output: Any = None) -> None:
        """Record a step's success; written now or later, as the policy says."""
        self._check()
        if self.policy.every_step:
            head = await self._guard(
                self.api.complete_step(
                    self.task_id, index, self.version, output, fencing_token=self.fencing_token
                )
            )
            self._wrote(head, {index: {"status": StepStatus.SUCCESS, "output": output}})
            return
        self._pending.append({"index": index, "status": StepStatus.SUCCESS, "output": output})
        self._completed_since_flush += 1
        if self.policy.due(self._completed_since_flush):
            await self.flush()

    async def fail(self, index: int, error: str) -> None:
        """Record a step's failure and write it, with anything pending, at once."""
        self._check()
        if self.policy.every_step:
            head = await self._guard(
                self.api.fail_step(
                    self.task_id, index, self.version, error, fencing_token=self.fencing_token
                )
            )
            self._wrote(head, {index: {"status": StepStatus.FAILED, "error": error}})
            return
        self._pending.append({"index": index, "status": StepStatus.FAILED, "error": error})
        await self.flush()

    async def tool(self, tool_name: str, outcome: str, **report: Any) -> ToolState:
        """Report a tool call under the lease; a tool limit hit is a key point."""
        self._check()
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

    async def flush(self) -> None:
        """Write every pending step change in one checkpoint."""
        self._check()
        if not self._pending:
            return
        head = await self._guard(
            self.api.checkpoint(
                self.task_id, self.version, self._pending, fencing_token=self.fencing_token
            )
        )
        changed = {p["index"]: {k: v for k, v in p.items() if k != "index"} for p in self._pending}
        self._wrote(head, changed)
        self._pending = []
        self._completed_since_flush = 0
