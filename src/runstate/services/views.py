"""Plain, immutable pictures of stored state that the services hand to transports.

A ``TaskView`` is also what a task event stores as its snapshot (``to_json`` /
``from_json``), so a past event shows the task exactly as it stood then.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, Generic, TypeVar

from runstate.enums import SessionStatus, StepStatus, TaskEventKind, TaskStatus, ToolStatus


@dataclass(frozen=True)
class SessionView:
    """One session as the caller sees it (status already reflects expiry)."""

    pk: int
    id: str
    user_id: str
    status: SessionStatus
    version: int
    message_count: int
    ttl_seconds: int
    created_at: datetime
    last_active_at: datetime
    expires_at: datetime
    metadata: Any


@dataclass(frozen=True)
class StepView:
    """One step of a task."""

    index: int
    action: str
    input: Any
    output: Any
    status: StepStatus
    idempotent: bool
    attempts: int
    error: str | None
    started_at: datetime | None
    completed_at: datetime | None


@dataclass(frozen=True)
class ToolStateView:
    """One tool's state within a task."""

    task_id: str
    tool_name: str
    status: ToolStatus
    version: int
    retry_count: int
    max_retries: int
    last_result: Any
    last_error: str | None
    rate_limit_reset_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True)
class LockView:
    """A live lease on a task."""

    task_id: str
    holder_id: str
    fencing_token: int
    expires_at: datetime


@dataclass(frozen=True)
class TaskView:
    """One task with its steps, tool states and live lease."""

    pk: int
    id: str
    user_id: str
    session_pk: int
    session_id: str
    goal: str
    status: TaskStatus
    version: int
    event_seq: int
    created_at: datetime
    updated_at: datetime
    steps: tuple[StepView, ...]
    tool_states: tuple[ToolStateView, ...]
    lock: LockView | None

    @property
    def total_steps(self) -> int:
        """How many steps the plan has."""
        return len(self.steps)

    @property
    def current_step(self) -> int:
        """Index of the first step that is neither SUCCESS nor SKIPPED."""
        return current_step(s.status for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of this view, for event snapshots."""
        return {
            "pk": self.pk,
            "id": self.id,
            "user_id": self.user_id,
            "session_pk": self.session_pk,
            "session_id": self.session_id,
            "goal": self.goal,
            "status": self.status.value,
            "version": self.version,
            "event_seq": self.event_seq,
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
            "steps": [
                {
                    "index": s.index,
                    "action": s.action,
                    "input": s.input,
                    "output": s.output,
                    "status": s.status.value,
                    "idempotent": s.idempotent,
                    "attempts": s.attempts,
                    "error": s.error,
                    "started_at": _iso(s.started_at),
                    "completed_at": _iso(s.completed_at),
                }
                for s in self.steps
            ],
            "tool_states": [
                {
                    "tool_name": t.tool_name,
                    "status": t.status.value,
                    "version": t.version,
                    "retry_count": t.retry_count,
                    "max_retries": t.max_retries,
                    "last_result": t.last_result,
                    "last_error": t.last_error,
                    "rate_limit_reset_at": _iso(t.rate_limit_reset_at),
                    "updated_at": _iso(t.updated_at),
                }
                for t in self.tool_states
            ],
            "lock": None
            if self.lock is None
            else {
                "holder_id": self.lock.holder_id,
                "fencing_token": self.lock.fencing_token,
                "expires_at": _iso(self.lock.expires_at),
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskView:
        """The view stored by ``to_json``."""
        task_id = data["id"]
        lock = data["lock"]
        return cls(
            pk=data["pk"],
            id=task_id,
            user_id=data["user_id"],
            session_pk=data["session_pk"],
            session_id=data["session_id"],
            goal=data["goal"],
            status=TaskStatus(data["status"]),
            version=data["version"],
            event_seq=data["event_seq"],
            created_at=_dt(data["created_at"]),
            updated_at=_dt(data["updated_at"]),
            steps=tuple(
                StepView(
                    index=s["index"],
                    action=s["action"],
                    input=s["input"],
                    output=s["output"],
                    status=StepStatus(s["status"]),
                    idempotent=s["idempotent"],
                    attempts=s["attempts"],
                    error=s["error"],
                    started_at=_opt_dt(s["started_at"]),
                    completed_at=_opt_dt(s["completed_at"]),
                )
                for s in data["steps"]
            ),
            tool_states=tuple(
                ToolStateView(
                    task_id=task_id,
                    tool_name=t["tool_name"],
                    status=ToolStatus(t["status"]),
                    version=t["version"],
                    retry_count=t["retry_count"],
                    max_retries=t["max_retries"],
                    last_result=t["last_result"],
                    last_error=t["last_error"],
                    rate_limit_reset_at=_opt_dt(t["rate_limit_reset_at"]),
                    updated_at=_dt(t["updated_at"]),
                )
                for t in data["tool_states"]
            ),
            lock=None
            if lock is None
            else LockView(
                task_id=task_id,
                holder_id=lock["holder_id"],
                fencing_token=lock["fencing_token"],
                expires_at=_dt(lock["expires_at"]),
            ),
        )


@dataclass(frozen=True)
class EventView:
    """One entry of a task's change log, with the task as it stood after it.

    The snapshot stays JSON until ``task`` is read: a subscriber that selects only
    ``seq`` and ``kind`` never pays for decoding a long plan.
    """

    task_id: str
    seq: int
    task_version: int
    kind: TaskEventKind
    step_index: int | None
    tool_name: str | None
    at: datetime
    snapshot: dict[str, Any]

    @cached_property
    def task(self) -> TaskView:
        """The task as it stood at this event."""
        return TaskView.from_json(self.snapshot)

    @property
    def task_pk(self) -> int:
        """The task's row id."""
        return int(self.snapshot["pk"])

    @property
    def session_pk(self) -> int:
        """The row id of the task's session."""
        return int(self.snapshot["session_pk"])

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of this event, for the broker."""
        return {
            "task_id": self.task_id,
            "seq": self.seq,
            "task_version": self.task_version,
            "kind": self.kind.value,
            "step_index": self.step_index,
            "tool_name": self.tool_name,
            "at": self.at.isoformat(),
            "snapshot": self.snapshot,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EventView:
        """The event stored by ``to_json``."""
        return cls(
            task_id=data["task_id"],
            seq=data["seq"],
            task_version=data["task_version"],
            kind=TaskEventKind(data["kind"]),
            step_index=data["step_index"],
            tool_name=data["tool_name"],
            at=_dt(data["at"]),
            snapshot=data["snapshot"],
        )


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a newest-first listing; ``cursors[i]`` resumes after ``items[i]``."""

    items: tuple[T, ...]
    cursors: tuple[str, ...]
    has_next_page: bool


def current_step(statuses: Iterable[StepStatus]) -> int:
    """Index of the first status that is neither SUCCESS nor SKIPPED (or the count)."""
    index = 0
    for status in statuses:
        if status not in (StepStatus.SUCCESS, StepStatus.SKIPPED):
            return index
        index += 1
    return index


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _dt(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _opt_dt(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)
