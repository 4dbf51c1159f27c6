"""What the SDK returns: small, typed snapshots of the server's objects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
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
    """One step of a task; ``id`` is ``"<taskId>:<index>"``."""

    id: str
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
            id=data["id"],
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
    """A live lease on a task."""

    task_id: str
    holder_id: str
    fencing_token: int
    expires_at: datetime

    @classmethod
    def of(cls, data: dict[str, Any]) -> Lock:
        return cls(
            task_id=data["taskId"],
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
    """A task. ``steps`` and ``tool_states`` are None in a write's answer, which
    carries the task's head only (the runner knows what it changed)."""

    id: str
    session_id: str
    goal: str
    status: str
    version: int
    current_step: int
    event_seq: int
    lock: Lock | None
    stalled: bool
    """Its agent is gone (see the API's Task.stalled): claimTask hands it on."""
    steps: tuple[Step, ...] | None = None
    tool_states: tuple[ToolState, ...] | None = None

    @classmethod
    def of(cls, data: dict[str, Any]) -> Task:
        steps, tools = data.get("steps"), data.get("toolStates")
        return cls(
            id=data["id"],
            session_id=data["sessionId"],
            goal=data["goal"],
            status=data["status"],
            version=data["version"],
            current_step=data["currentStep"],
            event_seq=data["eventSeq"],
            lock=None if data["lock"] is None else Lock.of(data["lock"]),
            stalled=data["stalled"],
            steps=None if steps is None else tuple(Step.of(s) for s in steps),
            tool_states=None if tools is None else tuple(ToolState.of(t) for t in tools),
        )

    def apply(self, event: Event) -> Task:
        """The task as of ``event``, from this task as of the event before it: steps
        replaced by index (or added), status, version and seq set, the tool state
        replaced by name, the lease set by lease events. A SNAPSHOT replaces it all.
        ``stalled`` is the event's (a lease that lapses writes no event)."""
        if event.task is not None:
            return event.task
        steps = list(self.steps or ())
        for step in event.steps:
            if step.index < len(steps):
                steps[step.index] = step
            else:
                steps.append(step)
        tools = {t.tool_name: t for t in self.tool_states or ()}
        if event.tool_state is not None:
            tools[event.tool_state.tool_name] = event.tool_state
        lock = event.lock if event.kind in LEASE_EVENTS else self.lock
        return replace(
            self,
            status=event.status,
            version=event.task_version,
            event_seq=event.seq,
            current_step=next((s.index for s in steps if s.status not in FINISHED), len(steps)),
            steps=tuple(steps),
            tool_states=tuple(tools[name] for name in sorted(tools)),
            lock=lock,
            stalled=event.stalled,
        )

    def updated(self, head: Task, changed: Mapping[int, Mapping[str, Any]]) -> Task:
        """This task's steps, with ``changed`` fields of some of them, under ``head``
        (a write's answer): what a writer knows after its own write."""
        steps = list(self.steps or ())
        for index, fields in changed.items():
            steps[index] = replace(steps[index], **fields)
        return replace(head, steps=tuple(steps), tool_states=self.tool_states)


FINISHED = frozenset({"SUCCESS", "SKIPPED"})
LEASE_EVENTS = frozenset({"LOCK_ACQUIRED", "LOCK_RELEASED"})


@dataclass(frozen=True)
class ResumePlan:
    """Where a task goes on after a crash."""

    task: Task
    resume_from: int | None
    needs_decision: bool
    steps_in_doubt: tuple[int, ...]

    @classmethod
    def of(cls, data: dict[str, Any]) -> ResumePlan:
        return cls(
            task=Task.of(data["task"]),
            resume_from=data["resumeFrom"],
            needs_decision=data["needsDecision"],
            steps_in_doubt=tuple(data["stepsInDoubt"]),
        )


@dataclass(frozen=True)
class Event:
    """One entry of a task's change log: what changed (apply it with ``Task.apply``).

    ``task`` is set on SNAPSHOT events only. ``actor`` is the user whose token made
    the change, ``holder`` the lease holder that wrote it (writes under a lease),
    ``note`` a person's reason for a decision, ``origin`` the task and seq a fork
    started from (its first event)."""

    seq: int
    kind: str
    task_version: int
    step_index: int | None
    tool_name: str | None
    at: datetime
    status: str
    stalled: bool
    steps: tuple[Step, ...]
    tool_state: ToolState | None
    lock: Lock | None
    task: Task | None
    actor: str | None = None
    holder: str | None = None
    note: str | None = None
    origin: Origin | None = None
    epoch: str | None = None
    """The database's timeline the event belongs to (new after a restore)."""

    @classmethod
    def of(cls, data: dict[str, Any]) -> Event:
        origin = data.get("origin")
        return cls(
            seq=data["seq"],
            kind=data["kind"],
            task_version=data["taskVersion"],
            step_index=data["stepIndex"],
            tool_name=data["toolName"],
            at=datetime.fromisoformat(data["at"]),
            status=data["status"],
            stalled=data["stalled"],
            steps=tuple(Step.of(s) for s in data["steps"]),
            tool_state=None if data["toolState"] is None else ToolState.of(data["toolState"]),
            lock=None if data["lock"] is None else Lock.of(data["lock"]),
            task=None if data["task"] is None else Task.of(data["task"]),
            actor=data.get("actor"),
            holder=data.get("holder"),
            note=data.get("note"),
            origin=None if origin is None else Origin(origin["taskId"], origin["seq"]),
            epoch=data.get("epoch"),
        )


@dataclass(frozen=True)
class Origin:
    """Where a forked task came from: the source task and the seq it was forked at."""

    task_id: str
    seq: int
