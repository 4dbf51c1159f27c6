"""What the SDK returns: small, typed snapshots of the server's objects."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


def _dt(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


@dataclass(frozen=True)
class Session:
    """A conversation."""

    id: str
    status: str
    version: int
    message_count: int
    expires_at: datetime

    @classmethod
    def of(cls, data: dict[str, Any]) -> Session:
        return cls(
            id=data["id"],
            status=data["status"],
            version=data["version"],
            message_count=data["messageCount"],
            expires_at=datetime.fromisoformat(data["expiresAt"]),
        )


@dataclass(frozen=True)
class Step:
    """One step of a task."""

    index: int
    action: str
    input: Any
    output: Any
    status: str
    idempotent: bool
    attempts: int
    error: str | None

    @classmethod
    def of(cls, data: dict[str, Any]) -> Step:
        return cls(
            index=data["index"],
            action=data["action"],
            input=data["input"],
            output=data["output"],
            status=data["status"],
            idempotent=data["idempotent"],
            attempts=data["attempts"],
            error=data["error"],
        )


@dataclass(frozen=True)
class Lock:
    """A live lease."""

    holder_id: str
    fencing_token: int
    expires_at: datetime

    @classmethod
    def of(cls, data: dict[str, Any]) -> Lock:
        return cls(
            holder_id=data["holderId"],
            fencing_token=data["fencingToken"],
            expires_at=datetime.fromisoformat(data["expiresAt"]),
        )


@dataclass(frozen=True)
class ToolState:
    """A tool's state within a task."""

    tool_name: str
    status: str
    version: int
    retry_count: int
    max_retries: int
    rate_limit_reset_at: datetime | None

    @classmethod
    def of(cls, data: dict[str, Any]) -> ToolState:
        return cls(
            tool_name=data["toolName"],
            status=data["status"],
            version=data["version"],
            retry_count=data["retryCount"],
            max_retries=data["maxRetries"],
            rate_limit_reset_at=_dt(data["rateLimitResetAt"]),
        )


@dataclass(frozen=True)
class Task:
    """A task with its steps."""

    id: str
    session_id: str
    goal: str
    status: str
    version: int
    current_step: int
    event_seq: int
    steps: tuple[Step, ...]
    tool_states: tuple[ToolState, ...]
    lock: Lock | None

    @classmethod
    def of(cls, data: dict[str, Any]) -> Task:
        return cls(
            id=data["id"],
            session_id=data["sessionId"],
            goal=data["goal"],
            status=data["status"],
            version=data["version"],
            current_step=data["currentStep"],
            event_seq=data["eventSeq"],
            steps=tuple(Step.of(s) for s in data["steps"]),
            tool_states=tuple(ToolState.of(t) for t in data["toolStates"]),
            lock=None if data["lock"] is None else Lock.of(data["lock"]),
        )


@dataclass(frozen=True)
class ResumePlan:
    """Where a task goes on after a crash."""

    task: Task
    resume_from: int | None
    needs_decision: bool

    @classmethod
    def of(cls, data: dict[str, Any]) -> ResumePlan:
        return cls(
            task=Task.of(data["task"]),
            resume_from=data["resumeFrom"],
            needs_decision=data["needsDecision"],
        )


@dataclass(frozen=True)
class Event:
    """One entry of a task's change log, with the task as it stood after it."""

    seq: int
    kind: str
    task_version: int
    step_index: int | None
    tool_name: str | None
    at: datetime
    task: Task

    @classmethod
    def of(cls, data: dict[str, Any]) -> Event:
        return cls(
            seq=data["seq"],
            kind=data["kind"],
            task_version=data["taskVersion"],
            step_index=data["stepIndex"],
            tool_name=data["toolName"],
            at=datetime.fromisoformat(data["at"]),
            task=Task.of(data["task"]),
        )
