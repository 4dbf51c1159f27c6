"""The event format: every ``EventView`` is built here, and so is the delta an
event row keeps beside its step versions.

An event is a write's change to one task (``written``; ``created`` and ``leased``
for the first events of a new task), a task as it stands for a subscriber that
starts (``snapshot``), or a stored row read back (``stored``). A row keeps the
event's columns and, in ``delta``, what is neither a column nor a step version:
the tool state, the lease, the fork's origin, the lease holder whose fencing
token wrote it, and whether the task stood stalled after it. ``delta`` writes that
JSON and the ``*_in`` readers read it, so its keys are spelled here alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from runstate.basics.enums import TaskEventKind
from runstate.models import TaskEvent
from runstate.services.domain.views import (
    BudgetView,
    EventView,
    LockView,
    OriginView,
    StepView,
    TaskView,
    ToolStateView,
    from_json,
    to_json,
)

LOCK_KINDS = frozenset({TaskEventKind.LOCK_ACQUIRED, TaskEventKind.LOCK_RELEASED})
"""The events that carry the task's lease (None once released)."""


@dataclass(frozen=True)
class TaskRef:
    """What an event names of its task: row ids and the public id."""

    pk: int
    id: str
    session_pk: int


def written(
    task: TaskView,
    kind: TaskEventKind,
    at: datetime,
    *,
    step_index: int | None = None,
    tool_name: str | None = None,
    steps: tuple[StepView, ...] = (),
    tool_state: ToolStateView | None = None,
    origin: OriginView | None = None,
    actor: str | None = None,
    holder: str | None = None,
    note: str | None = None,
    budget: BudgetView | None = None,
    crossed: str | None = None,
) -> EventView:
    """The event of a write that left the task as ``task``: at its seq and version,
    with its status, whether it stands stalled, and (for a lease's events) its
    lease; ``steps`` are the steps it added or changed, as they now stand;
    ``budget`` the task's budget after a BUDGET_CHANGED, ``crossed`` the scope
    whose budget the write's spend reached."""
    return EventView(
        task_pk=task.pk,
        session_pk=task.session_pk,
        task_id=task.id,
        seq=task.event_seq,
        task_version=task.version,
        kind=kind,
        step_index=step_index,
        tool_name=tool_name,
        at=at,
        status=task.status,
        stalled=task.stalled,
        steps=steps,
        tool_state=tool_state,
        lock=task.lock if kind in LOCK_KINDS else None,
        origin=origin,
        actor=actor,
        holder=holder,
        note=note,
        budget=budget,
        crossed=crossed,
    )


def created(task: TaskView, at: datetime, origin: OriginView | None = None) -> EventView:
    """The TASK_CREATED event (seq 1) of a new task: its whole plan is the change."""
    event = written(
        task,
        TaskEventKind.TASK_CREATED,
        at,
        steps=task.steps or (),
        origin=origin,
        actor=task.user_id,
        budget=task.budget,
    )
    return replace(event, seq=1, task_version=1, stalled=False)


def leased(created: EventView, lock: LockView | None) -> EventView:
    """The LOCK_ACQUIRED event (seq 2) of a task created leased: its TASK_CREATED
    event (``created``) with the lease in place of the plan."""
    return replace(
        created,
        seq=2,
        kind=TaskEventKind.LOCK_ACQUIRED,
        steps=(),
        origin=None,
        lock=lock,
        budget=None,
    )


def snapshot(task: TaskView, at: datetime) -> EventView:
    """A SNAPSHOT event: the whole task as it stands, at its latest seq."""
    return replace(written(task, TaskEventKind.SNAPSHOT, at), stalled=False, task=task)


def stored(row: TaskEvent, task: TaskRef | TaskView, steps: tuple[StepView, ...]) -> EventView:
    """One stored event with its steps (read from their versions), as the API shows it."""
    kept: dict[str, Any] = row.delta or {}
    return EventView(
        task_pk=task.pk,
        session_pk=task.session_pk,
        task_id=task.id,
        seq=row.seq,
        task_version=row.task_version,
        kind=row.kind,
        step_index=row.step_index,
        tool_name=row.tool_name,
        at=row.at,
        status=row.status,
        stalled=stalled_in(kept),
        steps=steps,
        tool_state=tool_in(kept),
        lock=lock_in(kept),
        origin=origin_in(kept),
        actor=row.actor,
        holder=kept.get("holder"),
        note=row.note,
        budget=budget_in(kept),
        crossed=kept.get("crossed"),
    )


def row(event: EventView) -> dict[str, Any]:
    """The event's row (``models.TaskEvent``) but its id; its steps are stored as
    versions beside it."""
    return {
        "task_id": event.task_pk,
        "seq": event.seq,
        "task_version": event.task_version,
        "kind": event.kind,
        "step_index": event.step_index,
        "tool_name": event.tool_name,
        "at": event.at,
        "status": event.status,
        "delta": delta(event),
        "actor": event.actor,
        "note": event.note,
    }


def delta(event: EventView) -> dict[str, Any] | None:
    """What an event row keeps beside its columns and step versions (None: nothing)."""
    kept: dict[str, Any] = {}
    if event.tool_state is not None:
        kept["tool"] = to_json(event.tool_state)
    if event.kind in LOCK_KINDS:
        kept["lock"] = to_json(event.lock)
    if event.origin is not None:
        kept["origin"] = to_json(event.origin)
    if event.holder is not None:
        kept["holder"] = event.holder
    if event.stalled:
        kept["stalled"] = True
    if event.budget is not None:
        kept["budget"] = to_json(event.budget)
    if event.crossed is not None:
        kept["crossed"] = event.crossed
    return kept or None


def tool_in(kept: dict[str, Any] | None) -> ToolStateView | None:
    """The tool state a stored delta holds (TOOL_STATE_CHANGED), if any."""
    tool = (kept or {}).get("tool")
    return None if tool is None else from_json(ToolStateView, tool)


def lock_in(kept: dict[str, Any] | None) -> LockView | None:
    """The lease a stored delta holds (LOCK_ACQUIRED; None once released)."""
    lock = (kept or {}).get("lock")
    return None if lock is None else from_json(LockView, lock)


def origin_in(kept: dict[str, Any] | None) -> OriginView | None:
    """Where the task was forked from, held by its first event's delta."""
    origin = (kept or {}).get("origin")
    return None if origin is None else from_json(OriginView, origin)


def budget_in(kept: dict[str, Any] | None) -> BudgetView | None:
    """The budget a stored delta holds (TASK_CREATED, BUDGET_CHANGED), if any."""
    budget = (kept or {}).get("budget")
    return None if budget is None else from_json(BudgetView, budget)


def stalled_in(kept: dict[str, Any] | None) -> bool:
    """Whether the task stood stalled after the stored event."""
    return bool((kept or {}).get("stalled"))
