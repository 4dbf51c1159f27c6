"""Task writes. Each is one transaction whose first statement is a conditional UPDATE
of the task row (version, owner and lease checked in its WHERE clause), followed by
the changes and exactly one event row with the next ``seq``.

Starting with the UPDATE matters on SQLite shared by several processes: a
transaction that reads first and writes later fails with "database is locked" when
another process wrote in between, while one that writes first waits its turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.expressions import F, Q
from tortoise.transactions import in_transaction

from runstate.enums import StepStatus, TaskEventKind, TaskStatus
from runstate.models import Session, Step, Task, TaskEvent, ToolState
from runstate.services import progress, validation
from runstate.services.clock import utcnow
from runstate.services.errors import (
    DomainError,
    InvalidTransitionError,
    LockHeldError,
    NotFoundError,
    SessionExpiredError,
    StaleFencingTokenError,
    UnmatchedWriteError,
    VersionConflictError,
)
from runstate.services.loading import is_expired, lock_view, task_view
from runstate.services.queries import get_task
from runstate.services.rules import (
    FINAL_TASKS,
    FINISHED_STEPS,
    check_step_move,
    check_task_move,
)
from runstate.services.sessions import mark_expired
from runstate.services.views import EventView, TaskView, current_step

MAX_ATTEMPTS = 5

_ENTERS_RUNNING = frozenset({StepStatus.RUNNING, StepStatus.SUCCESS, StepStatus.FAILED})


@dataclass(frozen=True)
class StepPatch:
    """One step change inside a checkpoint."""

    index: int
    status: StepStatus
    output: Any = None
    set_output: bool = False
    error: str | None = None


@dataclass
class Draft:
    """The task being changed inside a write transaction, before it is saved.

    Its steps are the rows as stored: a client output goes in through ``box``.
    """

    task: Task
    steps: list[Step]
    now: datetime
    status: TaskStatus
    conn: BaseDBAsyncClient
    changed: set[int] = field(default_factory=set)
    added: list[Step] = field(default_factory=list)

    def step(self, index: int, field: str = "stepIndex") -> Step:
        """The step at ``index``, or InvalidInput naming ``field``."""
        return self.steps[validation.step_index(index, len(self.steps), field)]

    def move_step(self, step: Step, new: StepStatus, *, jump: bool = False) -> None:
        """Move a step, keeping attempts and timestamps true to the path it took."""
        old = step.status
        check_step_move(old, new, jump=jump)
        if new in _ENTERS_RUNNING and old is not StepStatus.RUNNING:
            step.attempts += 1
            step.started_at = self.now
        if new is StepStatus.SUCCESS:
            step.error = None
        step.completed_at = None if new in (StepStatus.PENDING, StepStatus.RUNNING) else self.now
        step.status = new
        self.changed.add(step.position)

    def move_task(self, new: TaskStatus, *, jump: bool = False) -> None:
        """Move the task, unless it is there already."""
        if new is not self.status:
            check_task_move(self.status, new, all_steps_finished=self.all_finished(), jump=jump)
            self.status = new

    def all_finished(self) -> bool:
        """Every step is SUCCESS or SKIPPED (true of an empty plan)."""
        return all(s.status in FINISHED_STEPS for s in self.steps)

    def complete_if_done(self) -> None:
        """A task whose last unfinished step finished completes in the same write."""
        if self.steps and self.all_finished() and self.status not in FINAL_TASKS:
            self.move_task(TaskStatus.COMPLETED, jump=True)

    def refuse_if_final(self) -> None:
        """A COMPLETED or CANCELLED task takes no more step changes."""
        if self.status in FINAL_TASKS:
            raise InvalidTransitionError("task", self.status, TaskStatus.RUNNING)


@dataclass(frozen=True)
class Change:
    """What a write did, for its event row."""

    kind: TaskEventKind
    step_index: int | None = None
    tool_name: str | None = None


Apply = Callable[[Draft], Awaitable[Change | None]]
"""Changes the draft (and, for tool states, their rows); returns the event to log,
None for a heartbeat that logs nothing, or raises ``Unchanged`` to write nothing."""


class Unchanged(Exception):  # noqa: N818 - a signal, not an error
    """Raised by an ``Apply`` with nothing to change: the write rolls back quietly."""


class _ExpiredSessionError(Exception):
    """The task's session expired; marked after the rollback."""

    def __init__(self, session_pk: int) -> None:
        super().__init__(session_pk)
        self.session_pk = session_pk


@dataclass(frozen=True)
class Guard:
    """The conditional UPDATE that opens a task write, and the refusal for a miss.

    ``where`` is ANDed with the owner check; ``sets`` are the columns it writes;
    ``refusal`` explains a miss from the row as it now stands (None: try again).
    ``touch_session`` checks the session's expiry and marks it active (every write
    but a lease release does).
    """

    where: Callable[[datetime], Q]
    sets: Callable[[datetime], dict[str, Any]]
    refusal: Callable[[Task, datetime], DomainError | None]
    touch_session: bool = True


def lease_allows(fencing_token: int | None, now: datetime) -> Q:
    """The WHERE condition under which the task's lease lets a write through."""
    if fencing_token is None:
        return Q(lock_expires_at__isnull=True) | Q(lock_expires_at__lte=now)
    return Q(lock_token=fencing_token)


def lease_refusal(task: Task, fencing_token: int | None, now: datetime) -> DomainError | None:
    """StaleFencingToken or LockHeld when the lease is why a write was refused."""
    if fencing_token is not None and fencing_token != task.lock_token:
        return StaleFencingTokenError(fencing_token, task.lock_token)
    lock = lock_view(task, now)
    if fencing_token is None and lock is not None:
        return LockHeldError(lock.holder_id, lock.expires_at)
    return None


def versioned(
    expected_version: int | None, fencing_token: int | None, *, bump_version: bool = True
) -> Guard:
    """The usual guard: lease and (optionally) version checked; version and seq bumped."""

    def where(now: datetime) -> Q:
        condition = lease_allows(fencing_token, now)
        return condition if expected_version is None else condition & Q(version=expected_version)

    def sets(now: datetime) -> dict[str, Any]:
        columns: dict[str, Any] = {"event_seq": F("event_seq") + 1, "updated_at": now}
        if bump_version:
            columns["version"] = F("version") + 1
        return columns

    def refusal(task: Task, now: datetime) -> DomainError | None:
        refused = lease_refusal(task, fencing_token, now)
        if refused is None and expected_version is not None and expected_version != task.version:
            refused = VersionConflictError(expected_version, task.version)
        return refused

    return Guard(where, sets, refusal)


async def write_task(user_id: str, task_id: str, apply: Apply, guard: Guard) -> TaskView:
    """Open with ``guard``'s conditional UPDATE, run ``apply``, log its event, commit,
    then announce the event. One transaction.

    When the UPDATE matches nothing and no reason shows afterwards (a lease expired
    in between), the write is tried again, a few times at most; a real conflict
    never is.
    """
    for _ in range(MAX_ATTEMPTS):
        now = utcnow()
        try:
            async with in_transaction() as conn:
                matched = await (
                    Task.filter(Q(user_id=user_id, public_id=task_id), guard.where(now))
                    .using_db(conn)
                    .update(**guard.sets(now))
                )
                if not matched:
                    raise UnmatchedWriteError
                view, event = await _apply(conn, user_id, task_id, apply, guard, now)
            if event is not None:
                progress.announce(event)
            return view
        except UnmatchedWriteError:
            refusal = await _why_missed(user_id, task_id, guard)
            if refusal is not None:
                raise refusal from None
        except Unchanged:
            return await get_task(user_id, task_id)
        except _ExpiredSessionError as expired:
            await mark_expired(expired.session_pk)
            raise SessionExpiredError(await _session_public_id(expired.session_pk)) from None
    raise RuntimeError(f"the write to task {task_id!r} kept missing with no reason to refuse")


async def _apply(
    conn: BaseDBAsyncClient,
    user_id: str,
    task_id: str,
    apply: Apply,
    guard: Guard,
    now: datetime,
) -> tuple[TaskView, EventView | None]:
    task = await Task.filter(user_id=user_id, public_id=task_id).using_db(conn).get()
    session = await Session.filter(id=task.session_id).using_db(conn).get()
    if guard.touch_session:
        await _touch_session(conn, session, now)
    steps = list(await Step.filter(task_id=task.id).using_db(conn).order_by("position"))
    draft = Draft(task=task, steps=steps, now=now, status=task.status, conn=conn)
    change = await apply(draft)
    if change is not None:
        await _save(conn, draft)
    # The view comes from the rows in hand (tool states may have changed: read them).
    tools = await ToolState.filter(task_id=task.id).using_db(conn)
    view = task_view(task, session.public_id, draft.steps, tools, now)
    if change is None:
        return view, None
    event = await log_event(conn, view, change.kind, now, change.step_index, change.tool_name)
    return view, event


async def _touch_session(conn: BaseDBAsyncClient, session: Session, now: datetime) -> None:
    """Move the session's ``lastActiveAt`` to now, or refuse if it has expired."""
    if is_expired(session, now):
        raise _ExpiredSessionError(session.id)
    await (
        Session.filter(id=session.id)
        .using_db(conn)
        .update(last_active_at=now, expires_at=now + timedelta(seconds=session.ttl_seconds))
    )


async def _save(conn: BaseDBAsyncClient, draft: Draft) -> None:
    for position in sorted(draft.changed):
        step = draft.steps[position]
        await (
            Step.filter(id=step.id)
            .using_db(conn)
            .update(
                status=step.status,
                output=step.output,
                error=step.error,
                attempts=step.attempts,
                started_at=step.started_at,
                completed_at=step.completed_at,
            )
        )
    if draft.added:
        await Step.bulk_create(draft.added, using_db=conn)
    task = draft.task
    task.status = draft.status
    task.total_steps = len(draft.steps)
    task.current_step = current_step(s.status for s in draft.steps)
    await (
        Task.filter(id=task.id)
        .using_db(conn)
        .update(status=task.status, total_steps=task.total_steps, current_step=task.current_step)
    )


async def log_event(
    conn: BaseDBAsyncClient,
    view: TaskView,
    kind: TaskEventKind,
    now: datetime,
    step_index: int | None = None,
    tool_name: str | None = None,
) -> EventView:
    """Append the event row for a write, carrying the task as it now stands."""
    event = EventView(
        task_id=view.id,
        seq=view.event_seq,
        task_version=view.version,
        kind=kind,
        step_index=step_index,
        tool_name=tool_name,
        at=now,
        snapshot=view.to_json(),
    )
    await TaskEvent.create(
        task_id=view.pk,
        seq=event.seq,
        task_version=event.task_version,
        kind=kind,
        step_index=step_index,
        tool_name=tool_name,
        at=now,
        snapshot=event.snapshot,
        using_db=conn,
    )
    return event


async def _why_missed(user_id: str, task_id: str, guard: Guard) -> DomainError | None:
    """The refusal to answer when the conditional UPDATE matched nothing, if any."""
    now = utcnow()
    task = await Task.get_or_none(user_id=user_id, public_id=task_id).select_related("session")
    if task is None:
        return NotFoundError("task", task_id)
    if guard.touch_session and is_expired(task.session, now):
        await mark_expired(task.session_id)
        return SessionExpiredError(task.session.public_id)
    return guard.refusal(task, now)


async def _session_public_id(session_pk: int) -> str:
    return str(await Session.get(id=session_pk).values_list("public_id", flat=True))
