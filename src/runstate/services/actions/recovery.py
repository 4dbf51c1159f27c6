"""Recovery after a crash: the resume plan and the decisions on steps in doubt."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runstate.basics.enums import StepDecision, StepStatus, TaskEventKind, TaskStatus
from runstate.models import Step, box
from runstate.services.domain import validation
from runstate.services.domain.errors import InvalidTransitionError
from runstate.services.domain.moves import DECISION_MOVES, FINISHED_STEPS, RESUME_MOVES
from runstate.services.domain.views import ResumePlanView, StepView, TaskView, Written
from runstate.services.read.convert import step_view
from runstate.services.write.engine import Change, Draft, versioned, write_task
from runstate.services.write.group_commit import Unchanged
from runstate.services.write.house import House


def plan_of(task: TaskView, steps: Sequence[StepView]) -> ResumePlanView:
    """The plan a task's steps imply: the steps in doubt, and while there are none,
    the first PENDING step (None when nothing is left to run)."""
    in_doubt = tuple(s.index for s in steps if s.status is StepStatus.IN_DOUBT)
    pending = next((s.index for s in steps if s.status is StepStatus.PENDING), None)
    return ResumePlanView(task, None if in_doubt else pending, in_doubt)


async def resume_task(
    house: House,
    user_id: str,
    task_id: str,
    *,
    expected_version: int | None = None,
    fencing_token: int | None = None,
) -> Written[ResumePlanView]:
    """Make a crashed task ready to go on, in one write (semantics.md, "Resume").

    Every step is examined, since agents run steps in parallel: each RUNNING step
    that is idempotent is reset to PENDING, each one that is not becomes IN_DOUBT,
    and each FAILED step is reset to PENDING (attempts kept). While any step is
    IN_DOUBT the task is AWAITING_DECISION; else it is RUNNING, or COMPLETED when
    nothing is left. A task already in that state is left as it is (no event).
    The event is STEP_RESET when a step was reset, else TASK_STATUS_CHANGED; its
    stepIndex names the step when only one changed.
    """
    seen: list[Step] = []  # every step, as the write left them

    async def apply(draft: Draft) -> Change:
        if draft.status is TaskStatus.CANCELLED:
            raise InvalidTransitionError("task", draft.status, TaskStatus.RUNNING)
        steps = await draft.all_steps()
        seen.extend(steps)
        reset: list[int] = []
        for step in steps:
            if step.status is StepStatus.RUNNING and not step.idempotent:
                draft.move_step(step, StepStatus.IN_DOUBT, moves=RESUME_MOVES)
            elif step.status in (StepStatus.RUNNING, StepStatus.FAILED):
                draft.move_step(step, StepStatus.PENDING, moves=RESUME_MOVES)
                reset.append(step.position)
        if any(s.status is StepStatus.IN_DOUBT for s in steps):
            draft.move_task(TaskStatus.AWAITING_DECISION, jump=True)
        elif steps and all(s.status in FINISHED_STEPS for s in steps):
            draft.move_task(TaskStatus.COMPLETED, jump=True)
        elif steps:
            draft.move_task(TaskStatus.RUNNING, jump=True)
        if not draft.changed and draft.status is draft.task.status:
            raise Unchanged
        kind = TaskEventKind.STEP_RESET if reset else TaskEventKind.TASK_STATUS_CHANGED
        only = next(iter(draft.changed)) if len(draft.changed) == 1 else None
        return Change(kind, only)

    guard = versioned(expected_version, fencing_token)
    written = await write_task(house, user_id, task_id, apply, guard)
    return written.giving(plan_of(written.value, [step_view(s) for s in seen]))


async def decide_step(
    house: House,
    user_id: str,
    task_id: str,
    step_index: int,
    decision: StepDecision,
    *,
    expected_version: int,
    output: Any = None,
    note: str | None = None,
    fencing_token: int | None = None,
) -> Written[TaskView]:
    """A person's word on a step: RETRY (PENDING, STEP_RESET), SKIP (SKIPPED,
    STEP_SKIPPED) or, for a step IN_DOUBT, COMPLETE (SUCCESS with ``output``,
    STEP_SUCCEEDED). The event keeps who decided (its actor) and ``note``, why.

    A task AWAITING_DECISION returns to RUNNING only when no step is IN_DOUBT any
    more (or COMPLETED when nothing is left); a FAILED task returns to RUNNING. The
    version check means two people deciding at once cannot both win. The step is
    judged first: deciding on a finished step says so, not that its task is final.
    """
    validation.non_negative(step_index, "stepIndex")
    house.limits.json_payload(output, "output")
    reason = validation.note(note)

    async def apply(draft: Draft) -> Change:
        step = await draft.step(step_index)
        if decision is StepDecision.COMPLETE and step.status is not StepStatus.IN_DOUBT:
            raise InvalidTransitionError("step", step.status, StepStatus.SUCCESS)
        draft.move_step(step, _DECIDED[decision], moves=DECISION_MOVES)
        draft.refuse_if_final()  # after the step's own check: a refusal writes nothing
        if decision is StepDecision.COMPLETE:
            step.output = box(output)
        waiting = draft.status is TaskStatus.AWAITING_DECISION
        if draft.status is TaskStatus.FAILED or (
            waiting and not await draft.others_in_doubt(step_index)
        ):
            draft.move_task(TaskStatus.RUNNING)
        return Change(_DECISION_EVENTS[decision], step_index, note=reason)

    guard = versioned(expected_version, fencing_token, step=step_index)
    return await write_task(house, user_id, task_id, apply, guard)


_DECIDED = {
    StepDecision.RETRY: StepStatus.PENDING,
    StepDecision.SKIP: StepStatus.SKIPPED,
    StepDecision.COMPLETE: StepStatus.SUCCESS,
}
_DECISION_EVENTS = {
    StepDecision.RETRY: TaskEventKind.STEP_RESET,
    StepDecision.SKIP: TaskEventKind.STEP_SKIPPED,
    StepDecision.COMPLETE: TaskEventKind.STEP_SUCCEEDED,
}
