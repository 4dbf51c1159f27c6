"""Plain, immutable pictures of stored state that the services hand to transports.

``to_json`` and ``from_json`` turn any of them into JSON-ready data and back,
led by the dataclass fields: the broker carries events in that form.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Generic, TypeVar

from runstate.basics.enums import (
    AdmissionPolicy,
    MisfirePolicy,
    SessionStatus,
    StepStatus,
    SubmissionStatus,
    TaskEventKind,
    TaskStatus,
    ToolStatus,
)
from runstate.basics.typed import decoded, hints


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
    budget_max_tokens: int | None = None
    budget_max_cost_micros: int | None = None
    budget_actor: str | None = None
    budget_note: str | None = None
    budget_changed_at: datetime | None = None

    @property
    def budget(self) -> BudgetView | None:
        """The session's budget (None: none)."""
        return BudgetView.of(self.budget_max_tokens, self.budget_max_cost_micros)

    @property
    def budget_change(self) -> BudgetChangeView | None:
        """The last change of its budget (None: none was ever set)."""
        if self.budget_actor is None or self.budget_changed_at is None:
            return None
        return BudgetChangeView(self.budget_actor, self.budget_note, self.budget_changed_at)


@dataclass(frozen=True)
class BudgetChangeView:
    """Who changed a session's budget, why and when: what a task's BUDGET_CHANGED
    event keeps of its change (its actor, its note, its time)."""

    actor: str
    note: str | None
    at: datetime


def budget_change_columns(actor: str, note: str | None, at: datetime) -> dict[str, Any]:
    """A change of a session's budget as its row's columns."""
    return {"budget_actor": actor, "budget_note": note, "budget_changed_at": at}


@dataclass(frozen=True)
class SpendView:
    """Tokens and money spent, as agents reported them: a step's, or a sum of steps'."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0
    """Millionths of the deployment's currency (``RUNSTATE_CURRENCY``)."""
    calls: int = 0
    """How many reports it adds up."""

    @property
    def tokens(self) -> int:
        """Input and output tokens together: what ``Budget.max_tokens`` limits."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: SpendView) -> SpendView:
        return SpendView(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost_micros + other.cost_micros,
            self.calls + other.calls,
        )


@dataclass(frozen=True)
class BudgetView:
    """Limits on spend; a limit of None is no limit."""

    max_tokens: int | None = None
    max_cost_micros: int | None = None

    @classmethod
    def of(cls, max_tokens: int | None, max_cost_micros: int | None) -> BudgetView | None:
        """The budget of these limits, None when neither is set."""
        if max_tokens is None and max_cost_micros is None:
            return None
        return cls(max_tokens, max_cost_micros)

    def reached(self, spend: SpendView) -> bool:
        """Whether ``spend`` has reached a limit: new work is refused from then on."""
        return (self.max_tokens is not None and spend.tokens >= self.max_tokens) or (
            self.max_cost_micros is not None and spend.cost_micros >= self.max_cost_micros
        )


def budget_columns(budget: BudgetView | None) -> dict[str, Any]:
    """A budget as a task's or a session's columns (None: both limits cleared)."""
    limits = budget or BudgetView()
    return {
        "budget_max_tokens": limits.max_tokens,
        "budget_max_cost_micros": limits.max_cost_micros,
    }


def spent_columns(spent: SpendView) -> dict[str, Any]:
    """A task's spend as its row's columns."""
    return {
        "spent_input_tokens": spent.input_tokens,
        "spent_output_tokens": spent.output_tokens,
        "spent_cost_micros": spent.cost_micros,
        "spent_calls": spent.calls,
    }


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
    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0
    calls: int = 0
    models: list[str] | None = None
    """The model names its spend reports gave, in first-reported order (None: none)."""

    @property
    def spend(self) -> SpendView:
        """What its writes reported spending, added up."""
        return SpendView(self.input_tokens, self.output_tokens, self.cost_micros, self.calls)


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
class OriginView:
    """Where a forked task came from: the source task and the seq it was forked at."""

    task_id: str
    seq: int


@dataclass(frozen=True)
class TaskView:
    """One task, its live lease and, when loaded, its steps and tool states.

    A write answers with ``steps`` and ``tool_states`` left as None (not loaded):
    the transport loads them only when a client selects them.
    """

    pk: int
    id: str
    user_id: str
    session_pk: int
    session_id: str
    goal: str
    status: TaskStatus
    version: int
    event_seq: int
    current_step: int
    total_steps: int
    created_at: datetime
    updated_at: datetime
    lock: LockView | None
    stalled: bool
    """RUNNING or WAITING_TOOL, leased once, and no lease live: its agent is gone."""
    steps: tuple[StepView, ...] | None = None
    tool_states: tuple[ToolStateView, ...] | None = None
    stored_bytes: int = 0
    """What the task holds, its history included (``quota``)."""
    spent_input_tokens: int = 0
    spent_output_tokens: int = 0
    spent_cost_micros: int = 0
    spent_calls: int = 0
    budget_max_tokens: int | None = None
    budget_max_cost_micros: int | None = None
    run_of: str | None = None
    """The framework whose run the task holds; None: an ordinary task."""
    submission_pk: int | None = None
    """The row id of the submission it carries out; None: made with createTask."""
    interrupt_requested: bool = False

    @property
    def spend(self) -> SpendView:
        """The sum of its steps' spend."""
        return SpendView(
            self.spent_input_tokens,
            self.spent_output_tokens,
            self.spent_cost_micros,
            self.spent_calls,
        )

    @property
    def budget(self) -> BudgetView | None:
        """The task's own budget (None: none)."""
        return BudgetView.of(self.budget_max_tokens, self.budget_max_cost_micros)


@dataclass(frozen=True)
class SubmissionView:
    """One input of a session's ledger (``services.write.ledger``)."""

    pk: int
    id: str
    user_id: str
    session_pk: int
    session_id: str
    seq: int
    input: Any
    policy: AdmissionPolicy
    status: SubmissionStatus
    reason: str | None
    task_pk: int | None
    task_id: str | None
    displaced_by: str | None
    schedule_pk: int | None
    schedule_id: str | None
    scheduled_for: datetime | None
    actor: str
    changed_seq: int
    created_at: datetime
    updated_at: datetime
    spent: SpendView = SpendView()
    """What its task spent, kept when a ROLLBACK removed the task; none before."""


@dataclass(frozen=True)
class PlanView:
    """A plan step as a schedule keeps it."""

    action: str
    input: Any
    idempotent: bool


@dataclass(frozen=True)
class ScheduleView:
    """A session's schedule (``services.actions.schedules``)."""

    pk: int
    id: str
    session_pk: int
    session_id: str
    version: int
    cron: str
    timezone: str
    goal: str
    steps: tuple[PlanView, ...]
    input: Any
    policy: AdmissionPolicy
    misfire: MisfirePolicy
    enabled: bool
    next_fire_at: datetime | None
    last_fire_at: datetime | None
    created_at: datetime


@dataclass(frozen=True)
class EventView:
    """One entry of a task's change log: what changed (a delta), never the whole task.

    ``steps`` are the steps it added or changed as they stood after it; ``tool_state``
    is set on TOOL_STATE_CHANGED, ``lock`` on LOCK_ACQUIRED (None once released),
    ``origin`` on the first event of a fork, and ``task`` on SNAPSHOT only.
    ``actor`` is the user whose token wrote it (None on SNAPSHOT), ``holder`` the
    lease holder whose fencing token the write carried, and ``note`` a person's
    reason for a decision.
    """

    task_pk: int
    session_pk: int
    task_id: str
    seq: int
    task_version: int
    kind: TaskEventKind
    step_index: int | None
    tool_name: str | None
    at: datetime
    status: TaskStatus
    stalled: bool = False
    steps: tuple[StepView, ...] = ()
    tool_state: ToolStateView | None = None
    lock: LockView | None = None
    origin: OriginView | None = None
    task: TaskView | None = None
    actor: str | None = None
    holder: str | None = None
    note: str | None = None
    budget: BudgetView | None = None
    """BUDGET_CHANGED, and TASK_CREATED of a task made with one: the task's budget
    after the event (None on BUDGET_CHANGED: removed)."""
    crossed: str | None = None
    """The ``BudgetScope`` (TASK, SESSION) whose budget the spend this event
    reported reached: from this event on, new work is refused."""


@dataclass(frozen=True)
class ResumePlanView:
    """Where to go on after a crash."""

    task: TaskView
    resume_from: int | None
    steps_in_doubt: tuple[int, ...]

    @property
    def needs_decision(self) -> bool:
        """True while any step is IN_DOUBT."""
        return bool(self.steps_in_doubt)


T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class Written(Generic[T]):
    """What a write answers, with the events it committed. Nothing inside a
    transaction publishes: the owner of the outermost one does once it has
    committed (``idempotency.once`` for every mutation: a keyed write runs inside
    the key's transaction), through the publisher it was given (``House.publish``)."""

    value: T
    events: tuple[EventView, ...] = ()
    wakes: tuple[str, ...] = ()
    """Channels whose streams read the database again once the write has committed
    (a session's conversation: ``actions.conversation``)."""

    def giving(self, value: U) -> Written[U]:
        """The same events, answering ``value`` (a lease, a tool state, a plan)."""
        return Written(value, self.events, self.wakes)

    def after(self, earlier: Written[Any]) -> Written[T]:
        """This answer, with the events and wake-ups of a write committed before it
        on its way (a claim ending a stopped task first), published first."""
        return Written(self.value, earlier.events + self.events, earlier.wakes + self.wakes)


async def unpublished(write: Awaitable[T]) -> Written[T]:
    """A write that makes no events (a session's own fields), answered as writes are."""
    return Written(await write)


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


def to_json(value: Any) -> Any:
    """A view as JSON-ready data: dataclasses as dicts, times as ISO text, enums as
    their values. Client values (dicts, lists, scalars) pass through as they are."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return [to_json(v) for v in value]
    return value


def from_json(cls: type[V], data: dict[str, Any]) -> V:
    """The view of type ``cls`` that ``to_json`` wrote, led by the dataclass's hints."""
    types = hints(cls)
    return cls(**{name: decoded(types[name], value, from_json) for name, value in data.items()})


V = TypeVar("V")


def decode_as(hint: Any, value: Any) -> Any:
    """``value`` as ``to_json`` wrote it, decoded by the type ``hint`` (a view, a
    plain value, or an optional of one)."""
    return decoded(hint, value, from_json)
