"""What the SDK returns: small, typed snapshots of the server's objects.

Each dataclass here is the one declaration of what the SDK reads of a GraphQL
type: ``Answer.of`` decodes an answer by the dataclass's fields, and
``selection`` writes the documents' field lists from them (``documents.py``), so
a field added here is asked for and read with no other edit. Statuses are
``runstate.basics.enums``, as the server declares them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any, TypeVar, cast, get_args, get_origin

from runstate.basics.enums import SessionStatus, StepStatus, TaskEventKind, TaskStatus, ToolStatus
from runstate.basics.typed import decoded, hints, without_none

A = TypeVar("A", bound="Answer")


def camel(name: str) -> str:
    """A Python field name as GraphQL spells it: ``retry_count`` -> ``retryCount``."""
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


class Answer:
    """A snapshot decoded from a GraphQL answer by its dataclass fields."""

    @classmethod
    def of(cls: type[A], data: Mapping[str, Any]) -> A:
        """The snapshot of one answered object: each field read at its camelCase
        name (one not selected keeps its default), times parsed, statuses as
        enums, objects inside decoded by their own fields."""
        typed = hints(cls)
        values = {
            field.name: decoded(typed[field.name], data[camel(field.name)], _answer_of)
            for field in fields(cast(Any, cls))
            if camel(field.name) in data
        }
        return cls(**values)


def selection(cls: type[Answer], *leaving: str) -> str:
    """The GraphQL field list of ``cls``'s fields but those ``leaving``: camelCase
    names, an object's own field list inside braces."""
    typed = hints(cls)
    names = []
    for field in fields(cast(Any, cls)):
        if field.name in leaving:
            continue
        inner = _answer_type(typed[field.name])
        name = camel(field.name)
        names.append(name if inner is None else f"{name} {{ {selection(inner)} }}")
    return " ".join(names)


def _answer_type(hint: Any) -> type[Answer] | None:
    """The snapshot type a field of type ``hint`` holds (one, optional, or a tuple of
    them), None for a plain value."""
    inner = without_none(hint)
    if get_origin(inner) is tuple:
        inner = get_args(inner)[0]
    return inner if isinstance(inner, type) and issubclass(inner, Answer) else None


def _answer_of(cls: type[Answer], data: Mapping[str, Any]) -> Answer:
    return cls.of(data)


@dataclass(frozen=True)
class Session(Answer):
    """A conversation."""

    id: str
    status: SessionStatus
    version: int
    message_count: int
    expires_at: datetime


@dataclass(frozen=True)
class Step(Answer):
    """One step of a task; ``id`` is ``"<taskId>:<index>"``."""

    id: str
    index: int
    action: str
    input: Any
    output: Any
    status: StepStatus
    idempotent: bool
    attempts: int
    error: str | None


_STEP_FIELDS = frozenset(f.name for f in fields(Step))
"""What the SDK keeps of a step: a change to a field it does not model is the
server's alone."""


@dataclass(frozen=True)
class Lock(Answer):
    """A live lease on a task."""

    task_id: str
    holder_id: str
    fencing_token: int
    expires_at: datetime


@dataclass(frozen=True)
class ToolState(Answer):
    """A tool's state within a task."""

    tool_name: str
    status: ToolStatus
    version: int
    retry_count: int
    max_retries: int
    rate_limit_reset_at: datetime | None


@dataclass(frozen=True)
class Task(Answer):
    """A task. ``steps`` and ``tool_states`` are None in a write's answer, which
    carries the task's head only (the runner knows what it changed)."""

    id: str
    session_id: str
    goal: str
    status: TaskStatus
    version: int
    current_step: int
    event_seq: int
    lock: Lock | None
    stalled: bool
    """Its agent is gone (see the API's Task.stalled): claimTask hands it on."""
    steps: tuple[Step, ...] | None = None
    tool_states: tuple[ToolState, ...] | None = None

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
        for index, changes in changed.items():
            known = {k: v for k, v in changes.items() if k in _STEP_FIELDS}  # what it models
            steps[index] = replace(steps[index], **known)
        return replace(head, steps=tuple(steps), tool_states=self.tool_states)


FINISHED = frozenset({StepStatus.SUCCESS, StepStatus.SKIPPED})
LEASE_EVENTS = frozenset({TaskEventKind.LOCK_ACQUIRED, TaskEventKind.LOCK_RELEASED})


@dataclass(frozen=True)
class ResumePlan(Answer):
    """Where a task goes on after a crash."""

    task: Task
    resume_from: int | None
    needs_decision: bool
    steps_in_doubt: tuple[int, ...]


@dataclass(frozen=True)
class Event(Answer):
    """One entry of a task's change log: what changed (apply it with ``Task.apply``).

    ``task`` is set on SNAPSHOT events only. ``actor`` is the user whose token made
    the change, ``holder`` the lease holder that wrote it (writes under a lease),
    ``note`` a person's reason for a decision, ``origin`` the task and seq a fork
    started from (its first event)."""

    seq: int
    kind: TaskEventKind
    task_version: int
    step_index: int | None
    tool_name: str | None
    at: datetime
    status: TaskStatus
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


@dataclass(frozen=True)
class Origin(Answer):
    """Where a forked task came from: the source task and the seq it was forked at."""

    task_id: str
    seq: int
