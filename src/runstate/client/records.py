"""What the SDK returns: small, typed snapshots of the server's objects.

Each dataclass here is the one declaration of what the SDK reads of a GraphQL
type: ``Answer.of`` decodes an answer by the dataclass's fields, and
``selection`` writes the documents' field lists from them (``documents.py``), so
a field added here is asked for and read with no other edit. Statuses are
``runstate.basics.enums``, as the server declares them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any, TypeVar, cast, get_args, get_origin

from runstate.basics.enums import (
    AdmissionPolicy,
    SessionStatus,
    StepStatus,
    SubmissionStatus,
    TaskEventKind,
    TaskStatus,
    ToolStatus,
)
from runstate.basics.typed import decoder, hints, without_none

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
        return cls(**{name: decode(data[key]) for name, key, decode in _plan(cls) if key in data})


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


_PLANS: dict[type[Answer], list[tuple[str, str, Callable[[Any], Any]]]] = {}


def _plan(cls: type[Answer]) -> list[tuple[str, str, Callable[[Any], Any]]]:
    """How ``cls.of`` reads each field: its name, its camelCase key in the answer
    and its decoder, worked out once per class."""
    plan = _PLANS.get(cls)
    if plan is None:
        typed = hints(cls)
        plan = _PLANS[cls] = [
            (f.name, camel(f.name), decoder(typed[f.name], _answer_of))
            for f in fields(cast(Any, cls))
        ]
    return plan


@dataclass(frozen=True)
class Session(Answer):
    """A conversation."""

    id: str
    status: SessionStatus
    version: int
    message_count: int
    expires_at: datetime
    budget: Budget | None = None
    """What its tasks may spend together (None: no limit)."""


@dataclass(frozen=True)
class Spend(Answer):
    """Tokens and money spent, as agents reported them: a step's, or a sum of steps'.
    ``cost_micros`` is in millionths of the server's currency (``RUNSTATE_CURRENCY``)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0
    calls: int = 0
    """How many reports it adds up."""


@dataclass(frozen=True)
class Budget(Answer):
    """Limits on spend (None: no limit); ``max_tokens`` counts input and output."""

    max_tokens: int | None = None
    max_cost_micros: int | None = None


@dataclass(frozen=True)
class SpendReport:
    """What a step spent, as an agent reports it: with its result
    (``run.succeed(i, output, spend=SpendReport(...))``) or on its own
    (``run.spend``). Added to the step's spend by the server."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0
    model: str | None = None

    def wire(self) -> dict[str, Any]:
        """The report as ``SpendInput``."""
        report: dict[str, Any] = {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "costMicros": self.cost_micros,
        }
        return report if self.model is None else report | {"model": self.model}


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
    spend: Spend = Spend()
    models: tuple[str, ...] = ()
    """The models its spend reports named, in first-reported order."""


_STEP_FIELDS = frozenset(f.name for f in fields(Step)) - {"spend", "models"}
"""What the SDK keeps of a step as its own writes change it: a change to a field it
does not model is the server's alone, and so is spend, which the server adds up."""


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
    spend: Spend = Spend()
    """The sum of its steps' spend."""
    budget: Budget | None = None
    over_budget: bool = False
    """Its spend, or its session's, reached a budget: new work is refused."""
    run_of: str | None = None
    """The framework whose run it holds (``"openai-agents"``); None: an ordinary task."""
    interrupt_requested: bool = False
    """An INTERRUPT or ROLLBACK of its submission asked it to stop: it starts no new
    work (``TaskInterrupted``)."""
    submission: Submission | None = None
    """The submission it carries out, as read with the task (None: a task made with
    ``create_task``, outside any ledger; and in a write's answer)."""

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
            interrupt_requested=(
                self.interrupt_requested or event.kind is TaskEventKind.INTERRUPT_REQUESTED
            ),
            spend=_summed(s.spend for s in steps),
            budget=event.budget if event.kind is TaskEventKind.BUDGET_CHANGED else self.budget,
            over_budget=self.over_budget or event.budget_crossed is not None,
        )

    def updated(self, head: Task, changed: Mapping[int, Mapping[str, Any]]) -> Task:
        """This task's steps, with ``changed`` fields of some of them, under ``head``
        (a write's answer): what a writer knows after its own write."""
        steps = list(self.steps or ())
        for index, changes in changed.items():
            known = {k: v for k, v in changes.items() if k in _STEP_FIELDS}  # what it models
            steps[index] = replace(steps[index], **known)
        return replace(  # a write's answer carries no spend nor submission: as last read
            head,
            steps=tuple(steps),
            tool_states=self.tool_states,
            spend=self.spend,
            budget=self.budget,
            over_budget=self.over_budget,
            submission=self.submission,
        )


def _summed(spends: Iterable[Spend]) -> Spend:
    """Several steps' spend added up."""
    total = Spend()
    for spend in spends:
        total = Spend(
            total.input_tokens + spend.input_tokens,
            total.output_tokens + spend.output_tokens,
            total.cost_micros + spend.cost_micros,
            total.calls + spend.calls,
        )
    return total


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
    budget: Budget | None = None
    """BUDGET_CHANGED (and TASK_CREATED of a task made with one): the task's budget."""
    budget_crossed: str | None = None
    """TASK or SESSION: the spend this event reported reached that budget."""


@dataclass(frozen=True)
class Origin(Answer):
    """Where a forked task came from: the source task and the seq it was forked at."""

    task_id: str
    seq: int


@dataclass(frozen=True)
class Submission(Answer):
    """An input admitted into a session's ledger (``Runstate.submit``): its place
    in the ledger (``seq``, 1, 2, 3, ... in the order the database admitted them),
    where it stands, and the task that carries it out (None once ROLLED_BACK, and
    for a schedule's SKIPPED fire). ``reason`` says in words why it is SKIPPED,
    INTERRUPTED, ROLLED_BACK or CANCELLED; ``displaced_by`` names the submission
    that interrupted or rolled it back; ``actor`` is who submitted it (a user, or
    ``schedule:<id>``)."""

    id: str
    session_id: str
    seq: int
    input: Any
    policy: AdmissionPolicy
    status: SubmissionStatus
    reason: str | None
    task_id: str | None
    displaced_by: str | None
    actor: str | None
    created_at: datetime
    updated_at: datetime
    schedule_id: str | None = None
    scheduled_for: datetime | None = None
    """Set on a schedule's fire: the schedule and the due time it fired for."""
