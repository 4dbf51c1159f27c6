"""Recovery after a crash: the resume plan and the decision on a step in doubt."""

from __future__ import annotations

from dataclasses import dataclass

from runstate.enums import StepStatus, TaskEventKind, TaskStatus
from runstate.models import Step
from runstate.services import validation
from runstate.services.errors import InvalidTransitionError
from runstate.services.loading import step_view
from runstate.services.taskwrite import Change, Draft, Unchanged, versioned, write_task
from runstate.services.views import StepView, TaskView


@dataclass(frozen=True)
class ResumePlanView:
    """Where to go on after a crash."""

    task: TaskView
    resume_from: int | None
    needs_decision: bool


def plan_of(task: TaskView, step: StepView | None = None) -> ResumePlanView:
    """The plan a task's state implies: its first unfinished step (``step``, when the
    view's steps are not loaded), and whether that step waits for a person's decision."""
    index = task.current_step
    if index >= task.total_steps:
        return ResumePlanView(task, None, False)
    if task.steps is not None:
        step = task.steps[index]
    assert step is not None, "the step at current_step comes with the view or beside it"
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

    current: list[Step] = []  # the first unfinished step, as the write left it

    async def apply(draft: Draft) -> Change:
        if draft.status is TaskStatus.CANCELLED:
            raise InvalidTransitionError("task", draft.status, TaskStatus.RUNNING)
        index = draft.task.current_step
        unfinished = await draft.step(index) if index < draft.total else None
        if unfinished is not None:
            current.append(unfinished)
        if unfinished is None:
            if draft.total == 0 or draft.status is TaskStatus.COMPLETED:
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
    return plan_of(view, step_view(current[0]) if current and view.steps is None else None)


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
        step = await draft.step(step_index)
        draft.move_step(step, StepStatus.PENDING if retry else StepStatus.SKIPPED)
        if draft.status in (TaskStatus.AWAITING_DECISION, TaskStatus.FAILED):
            draft.move_task(TaskStatus.RUNNING)
        kind = TaskEventKind.STEP_RESET if retry else TaskEventKind.STEP_SKIPPED
        return Change(kind, step_index)

    guard = versioned(expected_version, fencing_token, step=step_index)
    return await write_task(user_id, task_id, apply, guard)
