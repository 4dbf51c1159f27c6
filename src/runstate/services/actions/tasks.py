"""Task operations of the API: create, plan, step moves, checkpoints and status."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.exceptions import IntegrityError
from tortoise.transactions import in_transaction

from runstate.basics.enums import BudgetScope, StepStatus, TaskEventKind, TaskStatus
from runstate.models import Session, Step, Task, TaskEvent, box
from runstate.services.actions import leases
from runstate.services.domain import columns, events, quota, spend, validation
from runstate.services.domain.conditions import open_session
from runstate.services.domain.errors import (
    BudgetExceededError,
    InvalidInputError,
    InvalidTransitionError,
    UnmatchedWriteError,
)
from runstate.services.domain.moves import FINISHED_STEPS
from runstate.services.domain.validation import Report, StepPatch, StepPlan
from runstate.services.domain.views import (
    BudgetView,
    OriginView,
    SpendView,
    StepView,
    TaskView,
    Written,
    budget_columns,
    current_step,
)
from runstate.services.read.convert import from_row, step_view, task_view, to_row
from runstate.services.read.history import AS_ADDED, UNSPENT
from runstate.services.read.lookups import get_session, get_task, get_task_at
from runstate.services.write.engine import (
    Change,
    Draft,
    insert_steps,
    log_event,
    record_versions,
    versioned,
    write_task,
)
from runstate.services.write.house import House
from runstate.storage import sql
from runstate.storage.clock import utcnow


async def create_task(
    house: House,
    user_id: str,
    session_id: str,
    *,
    goal: str,
    steps: Sequence[StepPlan],
    task_id: str | None = None,
    lease: tuple[str, int] | None = None,
    budget: BudgetView | None = None,
    run_of: str | None = None,
) -> Written[TaskView]:
    """Create a PLANNED task with its plan; an existing client-chosen id returns that
    task. With ``lease`` (holder, ttl seconds) the task is created leased to that
    holder (fencing token 1, a LOCK_ACQUIRED event at seq 2) in the same transaction:
    no ``claimTask`` can hand it to a worker before its creator runs it, as one could
    between a create and an ``acquireTaskLock``. With ``budget``, the task's own
    (its TASK_CREATED event carries it). With ``run_of``, the task holds a run of
    that framework (``"openai-agents"``): only a claim naming it hands the task out.
    A session whose spend reached its budget takes no new task (BudgetExceeded)."""
    public_id = validation.object_id(task_id)
    house.limits.goal(goal)
    house.limits.step_plans(steps)
    leases.run_kind(run_of)
    if lease is not None:
        leases.checked(*lease)

    plan = [_new_step(0, i, p) for i, p in enumerate(steps)]
    return await _insert_task(
        house,
        user_id,
        session_id,
        public_id,
        task_id,
        goal=goal,
        status=TaskStatus.PLANNED,
        steps=plan,
        lease=lease,
        budget=budget,
        run_of=run_of,
    )


async def create_admitted(
    house: House,
    user_id: str,
    session_id: str,
    *,
    goal: str,
    steps: Sequence[StepPlan],
    budget: BudgetView | None,
    admit: Admit,
    admitted_bytes: int,
) -> Written[TaskView]:
    """``create_task`` for a task of the session's ledger: ``admit`` writes its
    submission (``admitted_bytes``, charged to the caller with the task's) in the
    same transaction (``actions.submissions``)."""
    house.limits.goal(goal)
    house.limits.step_plans(steps)
    plan = [_new_step(0, i, p) for i, p in enumerate(steps)]
    return await _insert_task(
        house,
        user_id,
        session_id,
        validation.object_id(None),
        None,
        goal=goal,
        status=TaskStatus.PLANNED,
        steps=plan,
        budget=budget,
        admit=admit,
        admitted_bytes=admitted_bytes,
    )


async def fork_task(
    house: House,
    user_id: str,
    task_id: str,
    at_seq: int,
    *,
    new_id: str | None = None,
    goal: str | None = None,
) -> Written[TaskView]:
    """A new task in the same session whose steps are the source's as they stood just
    after ``at_seq``, RUNNING and IN_DOUBT ones turned PENDING (nobody is running them
    in the fork).

    Outputs, errors and attempts carry over, spend does not (the source paid for
    it) and the budget does, as it stood at ``at_seq``: the fork spends from nothing
    under the limit its source ran under, not without one. Tool states and the
    lease do not carry over; the kind does (a fork of a framework's run is a run
    of it too, claimed by its loader). The fork is PLANNED, so that ``claimTask``
    hands it to a worker and a runner resumes it at its first unfinished step (a
    FAILED step is reset by that resume), or COMPLETED when every step is finished.
    Its TASK_CREATED event names the source and seq as its ``origin``.
    """
    public_id = validation.object_id(new_id)
    if goal is not None:
        house.limits.goal(goal)
    source = await get_task_at(user_id, task_id, at_seq)
    assert source.steps is not None
    picked = [
        replace(
            replace(s, status=StepStatus.PENDING, completed_at=None)
            if s.status in (StepStatus.RUNNING, StepStatus.IN_DOUBT)
            else s,
            **UNSPENT,  # the source paid for what it did: the fork has spent nothing
        )
        for s in source.steps
    ]
    return await _insert_task(
        house,
        user_id,
        source.session_id,
        public_id,
        new_id,
        goal=source.goal if goal is None else goal,
        status=_forked_status(picked),
        steps=[_copied_step(s) for s in picked],
        origin=OriginView(source.id, at_seq),
        budget=source.budget,
        run_of=source.run_of,
    )


def _forked_status(steps: Sequence[StepView]) -> TaskStatus:
    """COMPLETED when every step is finished, else PLANNED: a fork waits for a worker
    (a begun fork given RUNNING with no lease was never claimed, so never ran)."""
    if steps and all(s.status in FINISHED_STEPS for s in steps):
        return TaskStatus.COMPLETED
    return TaskStatus.PLANNED


def _copied_step(view: StepView) -> Step:
    step = Step(task_id=0, **to_row(Step, view))
    step.changed_seq = 0 if step_view(step) == _initial(view) else 1
    return step


def _initial(view: StepView) -> StepView:
    """The step as it stands when added to a plan."""
    return replace(view, **AS_ADDED)


Admit = Callable[[BaseDBAsyncClient, Session, datetime], Awaitable[int]]
"""Writes the submission a new task carries out, in the task's transaction once
the session's row is locked: the submission's row id."""


async def _insert_task(
    house: House,
    user_id: str,
    session_id: str,
    public_id: str,
    client_id: str | None,
    *,
    goal: str,
    status: TaskStatus,
    steps: list[Step],
    origin: OriginView | None = None,
    lease: tuple[str, int] | None = None,
    budget: BudgetView | None = None,
    run_of: str | None = None,
    admit: Admit | None = None,
    admitted_bytes: int = 0,
) -> Written[TaskView]:
    """Insert a task, its ``steps`` (their task filled in here) and its TASK_CREATED
    event (seq 1), with ``lease`` its lease and LOCK_ACQUIRED event (seq 2), in one
    transaction; a client-chosen id that exists already returns that task unchanged
    when it was made with the same content (``_existing``).

    The first statement marks the session active (a write, so SQLite takes the lock
    at once). Steps that do not stand as newly planned (a fork's) get their history
    row at seq 1. With ``admit``, the task carries out a submission of the session's
    ledger, which ``admit`` writes once the session's row is locked and its budget
    checked (``actions.submissions``).
    """
    validation.known_id(session_id, "session")
    histories = [r for r in steps if r.changed_seq]
    # the task row and its events
    stored = (3 if lease else 2) * quota.ROW_BYTES + quota.text_bytes(goal)
    stored += sum(quota.new_step_bytes(r) for r in steps) + quota.versions_bytes(histories)
    field = "steps" if steps else "goal"
    quota.check_task(house.limits, public_id, 0, stored, field)
    now = utcnow()
    try:
        async with in_transaction() as conn:
            touched = (
                await Session.filter(open_session(now), user_id=user_id, public_id=session_id)
                .using_db(conn)
                .update(last_active_at=now)
            )
            if not touched:
                raise UnmatchedWriteError
            session = (
                await Session.filter(user_id=user_id, public_id=session_id).using_db(conn).get()
            )
            limit = BudgetView.of(session.budget_max_tokens, session.budget_max_cost_micros)
            if limit is not None:  # the row as the UPDATE above left it, locked since
                spent = SpendView(
                    session.spent_input_tokens,
                    session.spent_output_tokens,
                    session.spent_cost_micros,
                    session.spent_calls,
                )
                spend.refuse_reached(BudgetScope.SESSION, limit, spent, house.currency)
            session.expires_at = now + timedelta(seconds=session.ttl_seconds)
            await session.save(using_db=conn, update_fields=["expires_at"])
            submission = None if admit is None else await admit(conn, session, now)
            task = await Task.create(
                public_id=public_id,
                user_id=user_id,
                session_id=session.id,
                goal=goal,
                status=status,
                version=1,
                current_step=current_step(r.status for r in steps),
                total_steps=len(steps),
                event_seq=1 if lease is None else 2,
                lock_token=0 if lease is None else 1,
                lock_holder=None if lease is None else lease[0],
                lock_expires_at=None if lease is None else now + timedelta(seconds=lease[1]),
                created_at=now,
                updated_at=now,
                stored_bytes=stored,
                run_of=run_of,
                submission_id=submission,
                **budget_columns(budget),
                using_db=conn,
            )
            if submission is not None:
                await sql.execute(
                    conn,
                    'UPDATE "submissions" SET "task_id" = ? WHERE "id" = ?',
                    [task.id, submission],
                )
            for step in steps:
                step.task_id = task.id
            await insert_steps(conn, steps)
            await record_versions(conn, task.id, 1, histories)
            view = task_view(task, session.public_id, now, steps=steps, tool_states=())
            logged = [events.created(view, now, origin)]
            if lease is not None:
                logged.append(events.leased(logged[0], view.lock))
            for event in logged:
                await log_event(conn, event)
            await quota.charge(conn, house.limits, user_id, stored + admitted_bytes, field)
    except IntegrityError:
        made = await _existing(user_id, public_id, session_id, goal, steps, origin, run_of)
        return Written(made)
    except BudgetExceededError:
        if client_id is not None and await Task.exists(user_id=user_id, public_id=client_id):
            made = await _existing(user_id, client_id, session_id, goal, steps, origin, run_of)
            return Written(made)
        raise
    except UnmatchedWriteError:
        if client_id is not None and await Task.exists(user_id=user_id, public_id=client_id):
            made = await _existing(user_id, client_id, session_id, goal, steps, origin, run_of)
            return Written(made)
        session_view = await get_session(user_id, session_id)  # NotFound, SessionExpired
        raise InvalidInputError(
            "sessionId", f"session is {session_view.status}; it takes no new tasks"
        ) from None
    return Written(view, tuple(logged))


async def _existing(
    user_id: str,
    task_id: str,
    session_id: str,
    goal: str,
    steps: Sequence[Step],
    origin: OriginView | None,
    run_of: str | None,
) -> TaskView:
    """The task a create (or fork) with a client-chosen id that exists answers: that
    task, if it was made with the same content (session, goal, the plan's steps as
    first planned, the fork's origin, the kind of run), so a retry is idempotent;
    else InvalidInput on ``id``, since another content under the same id is another
    task."""
    task = await get_task(user_id, task_id)
    planned = await Step.filter(task_id=task.pk, created_seq=1).order_by("position")
    created = await TaskEvent.get(task_id=task.pk, seq=1)
    made = (
        task.session_id,
        task.goal,
        [_fixed(s) for s in planned],
        events.origin_in(created.delta),
        task.run_of,
    )
    asked = (
        session_id,
        goal,
        [_fixed(s) for s in steps],
        origin,
        run_of,
    )
    if made != asked:
        raise InvalidInputError(
            "id",
            f"task {task_id!r} exists with another session, goal, plan or kind of run;"
            " choose another id",
        )
    return task


def _fixed(step: Step) -> StepPlan:
    """What a planned step is made of: every field of its plan (``StepPlan``), read
    from its row, so that a plan field added later is compared too."""
    return from_row(StepPlan, step)


def _new_step(task_pk: int, position: int, plan: StepPlan) -> Step:
    return Step(task_id=task_pk, position=position, **to_row(Step, plan), **AS_ADDED)


async def add_steps(
    house: House,
    user_id: str,
    task_id: str,
    steps: Sequence[StepPlan],
    *,
    expected_version: int,
    fencing_token: int | None = None,
) -> Written[TaskView]:
    """Append steps to the plan (STEPS_ADDED, stepIndex = the first new index)."""
    if not steps:
        raise InvalidInputError("steps", "must hold at least one step")

    async def apply(draft: Draft) -> Change:
        draft.refuse_if_final()
        first = draft.total
        house.limits.step_plans(steps, existing=first)
        draft.added.extend(_new_step(draft.task.id, first + i, p) for i, p in enumerate(steps))
        return Change(TaskEventKind.STEPS_ADDED, first)

    return await write_task(
        house, user_id, task_id, apply, versioned(expected_version, fencing_token)
    )


async def start_step(
    house: House,
    user_id: str,
    task_id: str,
    step_index: int,
    *,
    expected_version: int,
    fencing_token: int | None = None,
) -> Written[TaskView]:
    """PENDING -> RUNNING; the task becomes RUNNING too (STEP_STARTED). Refused
    (BudgetExceeded) once the task's or its session's spend reached its budget."""
    validation.non_negative(step_index, "stepIndex")

    async def apply(draft: Draft) -> Change:
        await draft.refuse_interrupted()  # before its end: a stopped task says why
        draft.refuse_if_final()
        if draft.status is TaskStatus.AWAITING_DECISION:
            raise InvalidTransitionError("task", draft.status, TaskStatus.RUNNING)
        draft.move_step(await draft.step(step_index), StepStatus.RUNNING)
        draft.move_task(TaskStatus.RUNNING)
        await draft.refuse_over_budget()
        return Change(TaskEventKind.STEP_STARTED, step_index)

    guard = versioned(expected_version, fencing_token, step=step_index)
    return await write_task(house, user_id, task_id, apply, guard)


async def complete_step(
    house: House,
    user_id: str,
    task_id: str,
    step_index: int,
    *,
    expected_version: int,
    output: Any = None,
    fencing_token: int | None = None,
    spend: Report | None = None,
    **reported: Any,
) -> Written[TaskView]:
    """RUNNING -> SUCCESS with its output, what it spent since its last report, and
    whatever else it reports (``reported``, by column: ``columns.REPORTED``); the
    last one completes the task (STEP_SUCCEEDED)."""
    validation.non_negative(step_index, "stepIndex")
    house.limits.json_payload(output, "output")
    columns.checked_reported(house.limits, reported)
    spent = validation.checked_report(spend)

    async def apply(draft: Draft) -> Change:
        draft.refuse_if_final()
        step = await draft.step(step_index)
        draft.move_step(step, StepStatus.SUCCESS)
        step.output = box(output)
        if spent is not None:
            draft.spend(step, spent)
        draft.report(step, reported)
        draft.stop_if_interrupted()
        return Change(TaskEventKind.STEP_SUCCEEDED, step_index)

    guard = versioned(expected_version, fencing_token, step=step_index)
    return await write_task(house, user_id, task_id, apply, guard)


async def fail_step(
    house: House,
    user_id: str,
    task_id: str,
    step_index: int,
    *,
    expected_version: int,
    error: str,
    fencing_token: int | None = None,
    spend: Report | None = None,
) -> Written[TaskView]:
    """RUNNING -> FAILED with its error and what it spent since its last report;
    the task becomes FAILED (STEP_FAILED)."""
    validation.non_negative(step_index, "stepIndex")
    house.limits.error_text(error)
    spent = validation.checked_report(spend)

    async def apply(draft: Draft) -> Change:
        draft.refuse_if_final()
        step = await draft.step(step_index)
        draft.move_step(step, StepStatus.FAILED)
        step.error = error
        if spent is not None:
            draft.spend(step, spent)
        draft.move_task(TaskStatus.FAILED)
        draft.stop_if_interrupted()
        return Change(TaskEventKind.STEP_FAILED, step_index)

    guard = versioned(expected_version, fencing_token, step=step_index)
    return await write_task(house, user_id, task_id, apply, guard)


async def checkpoint_task(
    house: House,
    user_id: str,
    task_id: str,
    patches: Sequence[StepPatch],
    *,
    expected_version: int,
    status: TaskStatus | None = None,
    fencing_token: int | None = None,
) -> Written[TaskView]:
    """Several step changes and an optional task status as one write (CHECKPOINT).

    A patch may jump along an allowed path (PENDING -> SUCCESS); one refused patch
    refuses the whole batch. A patch starting a step (PENDING -> RUNNING) is new
    work: refused, with the batch, once the task's or its session's spend reached
    its budget; one reporting a step done (PENDING -> SUCCESS) never is. Without
    an explicit status the task follows its steps: FAILED when a patch fails a
    step, RUNNING once work starts, COMPLETED when done.
    """
    seen: set[int] = set()
    for i, patch in enumerate(patches):
        validation.non_negative(patch.index, f"steps[{i}].index")
        if patch.index in seen:
            raise InvalidInputError(f"steps[{i}].index", f"step {patch.index} is patched twice")
        seen.add(patch.index)
        if patch.error is not None:
            house.limits.error_text(patch.error, f"steps[{i}].error")
        house.limits.json_payload(patch.output, f"steps[{i}].output")
        columns.checked_reported(house.limits, patch.reported, f"steps[{i}].")
        if patch.spend is not None:
            patch.spend.checked(f"steps[{i}].spend")
    if not patches and status is None:
        raise InvalidInputError("steps", "a checkpoint changes at least one step or the status")

    async def apply(draft: Draft) -> Change:
        draft.refuse_if_final()
        for i, patch in enumerate(patches):
            validation.step_index(patch.index, draft.total, f"steps[{i}].index")
        await draft.load(p.index for p in patches)
        starts = False
        for i, patch in enumerate(patches):
            step = await draft.step(patch.index, f"steps[{i}].index")
            starts |= step.status is StepStatus.PENDING and patch.status is StepStatus.RUNNING
            draft.move_step(step, patch.status, jump=True)
            if patch.set_output:
                step.output = box(patch.output)
            if patch.error is not None:
                step.error = patch.error
            if patch.spend is not None:
                draft.spend(step, patch.spend, f"steps[{i}].spend")
            draft.report(step, patch.reported)
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
        draft.complete_when_done = target not in (TaskStatus.FAILED, TaskStatus.CANCELLED)
        if starts:  # a patch starting a step is new work, as startStep is
            await draft.refuse_interrupted()
            await draft.refuse_over_budget()
        else:
            draft.stop_if_interrupted()
        return Change(TaskEventKind.CHECKPOINT)

    return await write_task(
        house, user_id, task_id, apply, versioned(expected_version, fencing_token)
    )


async def set_task_status(
    house: House,
    user_id: str,
    task_id: str,
    status: TaskStatus,
    *,
    expected_version: int,
    fencing_token: int | None = None,
) -> Written[TaskView]:
    """Move the task along one allowed edge of its state machine (TASK_STATUS_CHANGED)."""

    async def apply(draft: Draft) -> Change:
        if status is draft.status:
            raise InvalidTransitionError("task", draft.status, status)
        draft.move_task(status)
        draft.complete_when_done = False
        return Change(TaskEventKind.TASK_STATUS_CHANGED)

    return await write_task(
        house, user_id, task_id, apply, versioned(expected_version, fencing_token)
    )


async def record_spend(
    house: House,
    user_id: str,
    task_id: str,
    step_index: int,
    spend: Report,
    *,
    fencing_token: int | None = None,
) -> Written[TaskView]:
    """Add what a step that has started spent (a step that makes several model
    calls reports each): SPEND_RECORDED. Running or ended: usage often arrives
    after the step's end was reported, and it has been spent all the same; a step
    never started (no attempt) spent nothing, InvalidInput. Like a tool report it
    carries no expected version and leaves the task's version alone, so it never
    conflicts with the step's own writes; the lease is checked. Recorded even past
    a budget: it has happened."""
    validation.non_negative(step_index, "stepIndex")
    report = spend.checked("spend")

    async def apply(draft: Draft) -> Change:
        step = await draft.step(step_index)
        if step.attempts == 0:
            raise InvalidInputError(
                "stepIndex",
                f"step {step_index} has not started; spend is recorded on a step that has",
            )
        draft.spend(step, report)
        return Change(TaskEventKind.SPEND_RECORDED, step_index)

    guard = versioned(None, fencing_token, bump_version=False, step=step_index)
    return await write_task(house, user_id, task_id, apply, guard)


async def set_task_budget(
    house: House,
    user_id: str,
    task_id: str,
    budget: BudgetView | None,
    *,
    expected_version: int,
    note: str | None = None,
) -> Written[TaskView]:
    """Set, change or (None) remove the task's budget: a person's decision, taken on
    the version they saw whoever holds the lease (BUDGET_CHANGED, with the actor and
    ``note``). Raising it past the spend lets new work go on."""
    reason = validation.note(note)

    async def apply(draft: Draft) -> Change:
        draft.set_budget(budget)
        return Change(TaskEventKind.BUDGET_CHANGED, note=reason, budget=budget)

    guard = versioned(expected_version, None, lease=False)
    return await write_task(house, user_id, task_id, apply, guard)
