"""Task operations of the API: create, plan, step moves, checkpoints and status."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from tortoise.exceptions import IntegrityError
from tortoise.transactions import in_transaction

from runstate.enums import SessionStatus, StepStatus, TaskEventKind, TaskStatus
from runstate.models import Session, Step, Task, box
from runstate.services import progress, validation
from runstate.services.clock import utcnow
from runstate.services.errors import InvalidInputError, InvalidTransitionError, UnmatchedWriteError
from runstate.services.loading import task_views
from runstate.services.queries import get_task
from runstate.services.sessions import get_session
from runstate.services.taskwrite import (
    Change,
    Draft,
    StepPatch,
    log_event,
    versioned,
    write_task,
)
from runstate.services.validation import StepPlan
from runstate.services.views import TaskView

_OPEN_SESSION = (SessionStatus.ACTIVE, SessionStatus.PAUSED)


async def create_task(
    user_id: str,
    session_id: str,
    *,
    goal: str,
    steps: Sequence[StepPlan],
    task_id: str | None = None,
) -> TaskView:
    """Create a PLANNED task with its plan; an existing client-chosen id returns that task.

    The first statement marks the session active (a write, so SQLite takes the lock
    at once); the task, its steps and its TASK_CREATED event (seq 1) follow.
    """
    public_id = validation.object_id(task_id)
    validation.goal(goal)
    validation.step_plans(steps)
    now = utcnow()
    try:
        async with in_transaction() as conn:
            touched = (
                await Session.filter(
                    user_id=user_id,
                    public_id=session_id,
                    status__in=_OPEN_SESSION,
                    expires_at__gt=now,
                )
                .using_db(conn)
                .update(last_active_at=now)
            )
            if not touched:
                raise UnmatchedWriteError
            session = (
                await Session.filter(user_id=user_id, public_id=session_id).using_db(conn).get()
            )
            session.expires_at = now + timedelta(seconds=session.ttl_seconds)
            await session.save(using_db=conn, update_fields=["expires_at"])
            task = await Task.create(
                public_id=public_id,
                user_id=user_id,
                session_id=session.id,
                goal=goal,
                status=TaskStatus.PLANNED,
                version=1,
                current_step=0,
                total_steps=len(steps),
                event_seq=1,
                lock_token=0,
                created_at=now,
                updated_at=now,
                using_db=conn,
            )
            await Step.bulk_create(
                [_new_step(task.id, i, plan) for i, plan in enumerate(steps)], using_db=conn
            )
            (view,) = await task_views([task], now, conn)
            event = await log_event(conn, view, TaskEventKind.TASK_CREATED, now)
    except IntegrityError:
        return await get_task(user_id, public_id)
    except UnmatchedWriteError:
        if task_id is not None and await Task.exists(user_id=user_id, public_id=task_id):
            return await get_task(user_id, task_id)
        session_view = await get_session(user_id, session_id)  # NotFound, SessionExpired
        raise InvalidInputError(
            "sessionId", f"session is {session_view.status}; it takes no new tasks"
        ) from None
    progress.announce(event)
    return view


def _new_step(task_pk: int, position: int, plan: StepPlan) -> Step:
    return Step(
        task_id=task_pk,
        position=position,
        action=plan.action,
        input=box(plan.input),
        status=StepStatus.PENDING,
        idempotent=plan.idempotent,
        attempts=0,
    )


async def add_steps(
    user_id: str,
    task_id: str,
    steps: Sequence[StepPlan],
    *,
    expected_version: int,
    fencing_token: int | None = None,
) -> TaskView:
    """Append steps to the plan (STEPS_ADDED, stepIndex = the first new index)."""
    if not steps:
        raise InvalidInputError("steps", "must hold at least one step")

    async def apply(draft: Draft) -> Change:
        draft.refuse_if_final()
        first = len(draft.steps)
        validation.step_plans(steps, existing=first)
        for offset, plan in enumerate(steps):
            step = _new_step(draft.task.id, first + offset, plan)
            draft.steps.append(step)
            draft.added.append(step)
        return Change(TaskEventKind.STEPS_ADDED, first)

    return await write_task(user_id, task_id, apply, versioned(expected_version, fencing_token))


async def start_step(
    user_id: str,
    task_id: str,
    step_index: int,
    *,
    expected_version: int,
    fencing_token: int | None = None,
) -> TaskView:
    """PENDING -> RUNNING; the task becomes RUNNING too (STEP_STARTED)."""
    validation.non_negative(step_index, "stepIndex")

    async def apply(draft: Draft) -> Change:
        draft.refuse_if_final()
        if draft.status is TaskStatus.AWAITING_DECISION:
            raise InvalidTransitionError("task", draft.status, TaskStatus.RUNNING)
        draft.move_step(draft.step(step_index), StepStatus.RUNNING)
        draft.move_task(TaskStatus.RUNNING)
        return Change(TaskEventKind.STEP_STARTED, step_index)

    return await write_task(user_id, task_id, apply, versioned(expected_version, fencing_token))


async def complete_step(
    user_id: str,
    task_id: str,
    step_index: int,
    *,
    expected_version: int,
    output: Any = None,
    fencing_token: int | None = None,
) -> TaskView:
    """RUNNING -> SUCCESS with its output; the last one completes the task (STEP_SUCCEEDED)."""
    validation.non_negative(step_index, "stepIndex")

    async def apply(draft: Draft) -> Change:
        draft.refuse_if_final()
        step = draft.step(step_index)
        draft.move_step(step, StepStatus.SUCCESS)
        step.output = box(output)
        draft.complete_if_done()
        return Change(TaskEventKind.STEP_SUCCEEDED, step_index)

    return await write_task(user_id, task_id, apply, versioned(expected_version, fencing_token))


async def fail_step(
    user_id: str,
    task_id: str,
    step_index: int,
    *,
    expected_version: int,
    error: str,
    fencing_token: int | None = None,
) -> TaskView:
    """RUNNING -> FAILED with its error; the task becomes FAILED (STEP_FAILED)."""
    validation.non_negative(step_index, "stepIndex")
    validation.error_text(error)

    async def apply(draft: Draft) -> Change:
        draft.refuse_if_final()
        step = draft.step(step_index)
        draft.move_step(step, StepStatus.FAILED)
        step.error = error
        draft.move_task(TaskStatus.FAILED)
        return Change(TaskEventKind.STEP_FAILED, step_index)

    return await write_task(user_id, task_id, apply, versioned(expected_version, fencing_token))


async def checkpoint_task(
    user_id: str,
    task_id: str,
    patches: Sequence[StepPatch],
    *,
    expected_version: int,
    status: TaskStatus | None = None,
    fencing_token: int | None = None,
) -> TaskView:
    """Several step changes and an optional task status as one write (CHECKPOINT).

    A patch may jump along an allowed path (PENDING -> SUCCESS); one refused patch
    refuses the whole batch. Without an explicit status the task follows its steps:
    FAILED when a patch fails a step, RUNNING once work starts, COMPLETED when done.
    """
    seen: set[int] = set()
    for i, patch in enumerate(patches):
        validation.non_negative(patch.index, f"steps[{i}].index")
        if patch.index in seen:
            raise InvalidInputError(f"steps[{i}].index", f"step {patch.index} is patched twice")
        seen.add(patch.index)
        if patch.error is not None:
            validation.error_text(patch.error, f"steps[{i}].error")
    if not patches and status is None:
        raise InvalidInputError("steps", "a checkpoint changes at least one step or the status")

    async def apply(draft: Draft) -> Change:
        draft.refuse_if_final()
        for i, patch in enumerate(patches):
            step = draft.step(patch.index, f"steps[{i}].index")
            draft.move_step(step, patch.status, jump=True)
            if patch.set_output:
                step.output = box(patch.output)
            if patch.error is not None:
                step.error = patch.error
        target = status
        if target is None:
            if any(p.status is StepStatus.FAILED for p in patches):
                target = TaskStatus.FAILED
            elif draft.status is TaskStatus.PLANNED and any(
                p.status is not StepStatus.PENDING for p in patches
            ):
                target = TaskStatus.RUNNING
        if target is not None:
            draft.move_task(target, jump=True)
        if target not in (TaskStatus.FAILED, TaskStatus.CANCELLED):
            draft.complete_if_done()
        return Change(TaskEventKind.CHECKPOINT)

    return await write_task(user_id, task_id, apply, versioned(expected_version, fencing_token))


async def set_task_status(
    user_id: str,
    task_id: str,
    status: TaskStatus,
    *,
    expected_version: int,
    fencing_token: int | None = None,
) -> TaskView:
    """Move the task along one allowed edge of its state machine (TASK_STATUS_CHANGED)."""

    async def apply(draft: Draft) -> Change:
        if status is draft.status:
            raise InvalidTransitionError("task", draft.status, status)
        draft.move_task(status)
        return Change(TaskEventKind.TASK_STATUS_CHANGED)

    return await write_task(user_id, task_id, apply, versioned(expected_version, fencing_token))
