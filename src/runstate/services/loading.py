"""Turning stored rows into views, in as few queries as a page of results allows."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from tortoise.backends.base.client import BaseDBAsyncClient

from runstate.enums import SessionStatus, TaskStatus
from runstate.models import Session, Step, Task, ToolState, unbox
from runstate.services.views import LockView, SessionView, StepView, TaskView, ToolStateView


def is_expired(row: Session, now: datetime) -> bool:
    """Past its expiry, or already marked EXPIRED."""
    return expired(row.status, row.expires_at, now)


def expired(status: object, expires_at: datetime, now: datetime) -> bool:
    """``is_expired`` of a session read as its status and expiry alone."""
    return status == SessionStatus.EXPIRED or expires_at <= now


def session_view(row: Session, now: datetime) -> SessionView:
    """The session as the caller sees it; expiry shows as EXPIRED before the sweep marks it."""
    return SessionView(
        pk=row.id,
        id=row.public_id,
        user_id=row.user_id,
        status=SessionStatus.EXPIRED if is_expired(row, now) else row.status,
        version=row.version,
        message_count=row.message_count,
        ttl_seconds=row.ttl_seconds,
        created_at=row.created_at,
        last_active_at=row.last_active_at,
        expires_at=row.expires_at,
        metadata=unbox(row.metadata),
    )


def step_view(row: Step) -> StepView:
    """One step row as a view."""
    return StepView(
        index=row.position,
        action=row.action,
        input=unbox(row.input),
        output=unbox(row.output),
        status=row.status,
        idempotent=row.idempotent,
        attempts=row.attempts,
        error=row.error,
        started_at=row.started_at,
        completed_at=row.completed_at,
    )


def tool_state_view(row: ToolState, task_id: str) -> ToolStateView:
    """One tool-state row as a view."""
    return ToolStateView(
        task_id=task_id,
        tool_name=row.tool_name,
        status=row.status,
        version=row.version,
        retry_count=row.retry_count,
        max_retries=row.max_retries,
        last_result=unbox(row.last_result),
        last_error=row.last_error,
        rate_limit_reset_at=row.rate_limit_reset_at,
        updated_at=row.updated_at,
    )


def lock_view(row: Task, now: datetime) -> LockView | None:
    """The task's lease while it is live; an expired lease is as good as released."""
    if row.lock_holder is None or row.lock_expires_at is None or row.lock_expires_at <= now:
        return None
    return LockView(
        task_id=row.public_id,
        holder_id=row.lock_holder,
        fencing_token=row.lock_token,
        expires_at=row.lock_expires_at,
    )


def is_stalled(status: TaskStatus, ever_leased: bool, lock: LockView | None) -> bool:
    """RUNNING or WAITING_TOOL, leased once, and no lease live: its agent is gone."""
    return status in (TaskStatus.RUNNING, TaskStatus.WAITING_TOOL) and ever_leased and not lock


def task_view(
    row: Task,
    session_id: str,
    now: datetime,
    *,
    steps: Sequence[Step] | None = None,
    tool_states: Sequence[ToolState] | None = None,
) -> TaskView:
    """One task row as a view, with its steps and tool states when they are given."""
    return TaskView(
        pk=row.id,
        id=row.public_id,
        user_id=row.user_id,
        session_pk=row.session_id,
        session_id=session_id,
        goal=row.goal,
        status=row.status,
        version=row.version,
        event_seq=row.event_seq,
        current_step=row.current_step,
        total_steps=row.total_steps,
        created_at=row.created_at,
        updated_at=row.updated_at,
        lock=lock_view(row, now),
        stored_bytes=row.stored_bytes,
        stalled=is_stalled(row.status, row.lock_token > 0, lock_view(row, now)),
        steps=None
        if steps is None
        else tuple(step_view(s) for s in sorted(steps, key=lambda s: s.position)),
        tool_states=None
        if tool_states is None
        else tuple(
            tool_state_view(t, row.public_id)
            for t in sorted(tool_states, key=lambda t: t.tool_name)
        ),
    )


async def task_views(
    rows: Sequence[Task], now: datetime, conn: BaseDBAsyncClient | None = None
) -> list[TaskView]:
    """Views of several tasks, loading their steps, tool states and session ids together."""
    if not rows:
        return []
    pks = [r.id for r in rows]
    steps: dict[int, list[Step]] = defaultdict(list)
    for step in await Step.filter(task_id__in=pks).using_db(conn):
        steps[step.task_id].append(step)
    tools: dict[int, list[ToolState]] = defaultdict(list)
    for tool in await ToolState.filter(task_id__in=pks).using_db(conn):
        tools[tool.task_id].append(tool)
    session_ids = dict(
        await Session.filter(id__in={r.session_id for r in rows})
        .using_db(conn)
        .values_list("id", "public_id")
    )
    return [
        task_view(r, session_ids[r.session_id], now, steps=steps[r.id], tool_states=tools[r.id])
        for r in rows
    ]


async def steps_of(task_pk: int) -> tuple[StepView, ...]:
    """A task's steps as they stand, in order."""
    rows = await Step.filter(task_id=task_pk).order_by("position")
    return tuple(step_view(r) for r in rows)


async def tool_states_of(task_pk: int, task_id: str) -> tuple[ToolStateView, ...]:
    """A task's tool states as they stand, by name."""
    rows = await ToolState.filter(task_id=task_pk).order_by("tool_name")
    return tuple(tool_state_view(r, task_id) for r in rows)
