"""Recovery after a crash: the resume plan and the decision on a step in doubt."""

from __future__ import annotations

from dataclasses import dataclass

from runstate.enums import StepStatus, TaskEventKind, TaskStatus
from runstate.services import validation
from runstate.services.errors import InvalidTransitionError
from runstate.services.taskwrite import Change, Draft, Unchanged, versioned, write_task
from runstate.services.views import TaskView


@dataclass(frozen=True)
class ResumePlanView:
    """Where to go on after a crash."""

    task: TaskView
    resume_from: int | None
    needs_decision: bool


def plan_of(task: TaskView) -> ResumePlanView:
    """The plan a task's state implies: its first unfinished step, and whether that
    step waits for a person's decision."""
    index = task.current_step
    if index >= task.total_steps:
        return ResumePlanView(task, None, False)
    step = task.steps[index]
    in_doubt = task.status is TaskStatus.AWAITING_DECISION and (
        step.status is StepStatus.RUNNING and not step.idempotent
    )
    return ResumePlanView(task, index, in_doubt)


async def resume_task(
    user_id: str,
    task_id: str,
    *,
    expected_version: int | None = None,
    fencing_token: int | None = None,
) -> ResumePlanView:
    """Make a crashed task ready to go on, in one write (semantics.md, "Resume").

    The first unfinished step decides: PENDING resumes there; RUNNING and
    idempotent is reset to PENDING (STEP_RESET); RUNNING and not idempotent puts
    the task in AWAITING_DECISION; FAILED is reset to PENDING with its attempts
    kept. The task becomes RUNNING unless it awaits a decision; with nothing left
    it is COMPLETED. A task already in that state is left as it is (no event).
    """

    async def apply(draft: Draft) -> Change:
        if draft.status is TaskStatus.CANCELLED:
            raise InvalidTransitionError("task", draft.status, TaskStatus.RUNNING)
        unfinished = next((s for s in draft.steps if s.status not in _DONE), None)
        if unfinished is None:
            if not draft.steps or draft.status is TaskStatus.COMPLETED:
                raise Unchanged
            draft.move_task(TaskStatus.COMPLETED, jump=True)
            return Change(TaskEventKind.TASK_STATUS_CHANGED)
        if unfinished.status is StepStatus.RUNNING and not unfinished.idempotent:
            if draft.status is TaskStatus.AWAITING_DECISION:
                raise Unchanged
            draft.move_task(TaskStatus.AWAITING_DECISION, jump=True)
            return Change(TaskEventKind.TASK_STATUS_CHANGED, unfinished.position)
        reset = unfinished.status in (StepStatus.RUNNING, StepStatus.FAILED)
        if reset:
            draft.move_step(unfinished, StepStatus.PENDING)
        if draft.status is not TaskStatus.RUNNING:
            draft.move_task(TaskStatus.RUNNING, jump=True)
        elif not reset:
            raise Unchanged
        kind = TaskEventKind.STEP_RESET if reset else TaskEventKind.TASK_STATUS_CHANGED
        return Change(kind, unfinished.position if reset else None)

    view = await write_task(user_id, task_id, apply, versioned(expected_version, fencing_token))
    return plan_of(view)


_DONE = (StepStatus.SUCCESS, StepStatus.SKIPPED)


async def decide_step(
    user_id: str,
    task_id: str,
    step_index: int,
    retry: bool,
    *,
    expected_version: int,
    fencing_token: int | None = None,
) -> TaskView:
    """RETRY resets a step to PENDING (STEP_RESET); SKIP marks it SKIPPED (STEP_SKIPPED).

    A task that awaited the decision returns to RUNNING (or COMPLETED when the
    skipped step was the last one left). The version check means two people
    deciding at once cannot both win.
    """
    validation.non_negative(step_index, "stepIndex")

    async def apply(draft: Draft) -> Change:
        draft.refuse_if_final()
        step = draft.step(step_index)
        draft.move_step(step, StepStatus.PENDING if retry else StepStatus.SKIPPED)
        if draft.status in (TaskStatus.AWAITING_DECISION, TaskStatus.FAILED):
            draft.move_task(TaskStatus.RUNNING)
        draft.complete_if_done()
        kind = TaskEventKind.STEP_RESET if retry else TaskEventKind.STEP_SKIPPED
        return Change(kind, step_index)

    return await write_task(user_id, task_id, apply, versioned(expected_version, fencing_token))
