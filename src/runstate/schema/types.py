"""The object types of the contract, built from service views."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any, TypeVar, get_origin

import strawberry
from strawberry.scalars import JSON

from runstate.basics.enums import (
    AdmissionPolicy,
    BudgetScope,
    MisfirePolicy,
    SessionStatus,
    StepStatus,
    SubmissionEventKind,
    SubmissionStatus,
    TaskEventKind,
    TaskStatus,
    ToolStatus,
)
from runstate.basics.makers import Maker, given_names, written
from runstate.basics.typed import hints, without_none
from runstate.schema.context import Info
from runstate.schema.spending import Budget, BudgetChange, Spend
from runstate.services.domain import validation
from runstate.services.domain.errors import NotFoundError
from runstate.services.domain.views import (
    EventView,
    LockView,
    OriginView,
    Page,
    PlanView,
    ResumePlanView,
    ScheduleView,
    SessionView,
    StepView,
    SubmissionView,
    TaskView,
    ToolStateView,
)
from runstate.services.read import entries as submission_reads
from runstate.services.read import timetables as schedule_reads
from runstate.services.read.lookups import get_task

G = TypeVar("G", bound="FromView")


class FromView:
    """A GraphQL object made from a service view by ``of``, led by its own fields."""

    @classmethod
    def of(cls: type[G], view: Any, **given: Any) -> G:
        """The object for ``view``: each data field of the type (those without a
        resolver) is the view's attribute of the same name, a view inside converted
        to its GraphQL type (``_GRAPHQL``) and a tuple to a list; a ``view`` field
        holds the view itself; ``given`` fields are as given. A field added to a view
        and to its type needs no converter edited."""
        names = given_names(given)
        make = _MAKERS.get((cls, type(view), names)) or _maker(cls, type(view), names)
        result: G = make(view, given)
        return result


_MAKERS: dict[tuple[type, type, frozenset[str]], Maker] = {}


def _maker(cls: type, view: type, given: frozenset[str]) -> Maker:
    """The function making a ``cls`` from a ``view`` (``makers.written``): one
    keyword per data field, converted (``_converted``) only where the view's field
    may hold a view or a tuple. Every step of an answer goes through ``Step.of``
    (1,000 for a 1,000-step task), and a loop over the fields per object cost 2.5x
    the constructor it replaced."""
    view_hints = hints(view)
    parts = []
    for field in dataclasses.fields(cls):
        if not field.init or field.name in given:
            continue
        if field.name == "view":
            parts.append("view=source")
        elif _may_hold_views(view_hints.get(field.name, Any)):
            parts.append(f"{field.name}=converted(source.{field.name})")
        else:
            parts.append(f"{field.name}=source.{field.name}")
    maker = _MAKERS[(cls, view, given)] = written(cls, parts, given, {"converted": _converted})
    return maker


def _may_hold_views(hint: Any) -> bool:
    """Whether a view field of type ``hint`` may hold a view or a tuple."""
    inner = without_none(hint)
    return get_origin(inner) is tuple or (inner is not Any and dataclasses.is_dataclass(inner))


def _converted(value: Any) -> Any:
    """A view's value as a GraphQL field holds it."""
    if isinstance(value, tuple):
        return [_converted(v) for v in value]
    graphql = _GRAPHQL.get(type(value))
    return value if graphql is None else graphql.of(value)


@strawberry.type
class PageInfo:
    """Where a page stands in its listing."""

    has_next_page: bool
    end_cursor: str | None


@strawberry.type(description="One user's conversation with an agent.")
class AgentSession(FromView):
    """A session, as the caller sees it."""

    view: strawberry.Private[SessionView]
    id: strawberry.ID
    user_id: str
    status: SessionStatus
    version: int
    message_count: int
    created_at: datetime
    last_active_at: datetime
    expires_at: datetime = strawberry.field(
        description="lastActiveAt + the session's ttlSeconds: past it the session is EXPIRED."
    )
    metadata: JSON | None
    ttl_seconds: int
    budget: Budget | None = strawberry.field(
        description="What its tasks may spend together; null: no limit."
    )
    budget_change: BudgetChange | None = strawberry.field(
        description=(
            "Who last set or changed its budget, when and why; null if nobody ever gave it one."
        )
    )

    @strawberry.field(description="The session's tasks, newest first.")
    async def tasks(
        self,
        info: Info,
        status: TaskStatus | None = None,
        first: int | None = 50,
        after: str | None = None,
    ) -> TaskConnection:
        arguments = (info.context.user_id, status, 50 if first is None else first, after)
        return TaskConnection.of(await info.context.loaders.tasks.load((arguments, self.view.pk)))

    @strawberry.field(description="Sum of the spend of the session's tasks.")
    async def spend(self, info: Info) -> Spend:
        return Spend.of(await info.context.loaders.session_spend.load(self.view.pk))

    @strawberry.field(
        description="The session's ledger in order (seq); e.g. submissions(status: QUEUED)."
    )
    async def submissions(
        self, info: Info, status: SubmissionStatus | None = None, first: int | None = 50
    ) -> list[Submission]:
        size = 50 if first is None else first
        views = await submission_reads.of_session(self.view.user_id, self.view.id, status, size)
        return [Submission.of(v) for v in views]

    @strawberry.field(description="The submission whose turn it is (ACTIVE), if any.")
    async def active_submission(self, info: Info) -> Submission | None:
        view = await submission_reads.active_of(self.view.pk)
        return None if view is None else Submission.of(view)

    @strawberry.field
    async def schedules(self, info: Info) -> list[Schedule]:
        views = await schedule_reads.of_session(self.view.user_id, self.view.id)
        return [Schedule.of(v) for v in views]

    @classmethod
    def of(cls, view: SessionView, **given: Any) -> AgentSession:
        """The GraphQL object for a session view."""
        return super().of(
            view,
            budget=Budget.of(view.budget),
            budget_change=BudgetChange.of(view.budget_change),
            **given,
        )


@strawberry.type
class Step(FromView):
    """One step of a task."""

    id: strawberry.ID = strawberry.field(
        description='"<taskId>:<index>": a stable identity for normalized client caches.'
    )
    index: int
    action: str
    input: JSON | None
    output: JSON | None
    status: StepStatus
    idempotent: bool = strawberry.field(
        description=(
            "Safe to run again after a crash. A RUNNING step that is not idempotent needs a "
            "decision (RETRY or SKIP) before the task resumes."
        )
    )
    attempts: int
    error: str | None
    started_at: datetime | None
    completed_at: datetime | None
    spend: Spend = strawberry.field(description="What the step's writes reported spending.")
    models: list[str] = strawberry.field(
        description="The models its reports named, in first-reported order."
    )

    @classmethod
    def of(cls, view: StepView, task_id: str) -> Step:  # type: ignore[override]
        """The GraphQL object for a step view of the task ``task_id``."""
        return super().of(
            view,
            id=strawberry.ID(f"{task_id}:{view.index}"),
            spend=Spend.of(view.spend),
            models=list(view.models or ()),
        )


@strawberry.type
class ToolState(FromView):
    """Per task and tool: retries used, last result or error, rate limit."""

    task_id: strawberry.ID
    tool_name: str
    status: ToolStatus
    version: int
    retry_count: int
    max_retries: int
    last_result: JSON | None
    last_error: str | None
    rate_limit_reset_at: datetime | None
    updated_at: datetime


@strawberry.type(
    description="A lease on a task: only its holder may change the task's steps while it lasts."
)
class TaskLock(FromView):
    """A live lease."""

    task_id: strawberry.ID
    holder_id: str
    fencing_token: int = strawberry.field(
        description="Grows by 1 on every acquisition; writes that carry an older token are refused."
    )
    expires_at: datetime


@strawberry.type(description="One multi-step job inside a session.")
class Task(FromView):
    """A task with its steps, tool states and lease.

    Steps and tool states are read only when selected, as they stood at the
    task's ``eventSeq``: a write's answer that selects neither reads neither, and
    one that does sees them exactly as that write left them.
    """

    view: strawberry.Private[TaskView]
    id: strawberry.ID
    session_id: strawberry.ID
    goal: str
    status: TaskStatus
    version: int
    current_step: int = strawberry.field(
        description=(
            "Index of the first step that is not finished (SUCCESS or SKIPPED); "
            "equals totalSteps when all are."
        )
    )
    total_steps: int
    lock: TaskLock | None
    stalled: bool = strawberry.field(
        description=(
            "RUNNING or WAITING_TOOL, and the last lease on it lapsed: its agent is gone and "
            "claimTask will hand it to another worker."
        )
    )
    created_at: datetime
    updated_at: datetime
    event_seq: int = strawberry.field(
        description="Sequence number of the task's latest event (see TaskEvent.seq)."
    )
    stored_bytes: int = strawberry.field(
        description=(
            "Bytes the task holds with its history (content plus a fixed cost per row), "
            "counted toward RUNSTATE_MAX_TASK_BYTES and the caller's quota (Query.usage). "
            "taskAt answers the figure as it stands now."
        )
    )
    spend: Spend = strawberry.field(description="Sum of its steps' spend.")
    budget: Budget | None = strawberry.field(
        description="What the task may spend; null: no limit of its own."
    )
    run_of: str | None = strawberry.field(
        description=(
            'The framework whose run the task holds (e.g. "openai-agents"), as createTask '
            "named it; null: an ordinary task. claimTask hands a run out only to a claim "
            "naming its framework (ClaimTaskInput.runOf), never to an ordinary one."
        )
    )

    interrupt_requested: bool = strawberry.field(
        description=(
            "An INTERRUPT or ROLLBACK asked it to stop: its next start of work answers"
            " TaskInterrupted."
        )
    )

    @strawberry.field(
        description="The submission this task carries out; null for a task made with createTask."
    )
    async def submission(self, info: Info) -> Submission | None:
        if self.view.submission_pk is None:
            return None
        return Submission.of(await submission_reads.by_pk(self.view.submission_pk))

    @strawberry.field
    async def steps(self, info: Info) -> list[Step]:
        views = self.view.steps
        if views is None:
            views = await info.context.loaders.steps.load((self.view.pk, self.view.event_seq))
        return [Step.of(s, self.view.id) for s in views]

    @strawberry.field
    async def tool_states(self, info: Info) -> list[ToolState]:
        views = self.view.tool_states
        if views is None:
            key = (self.view.pk, self.view.id, self.view.event_seq)
            views = await info.context.loaders.tool_states.load(key)
        return [ToolState.of(t) for t in views]

    @strawberry.field
    async def session(self, info: Info) -> AgentSession:
        return AgentSession.of(await info.context.loaders.sessions.load(self.view.session_pk))

    @classmethod
    def of(cls, view: TaskView, **given: Any) -> Task:
        """The GraphQL object for a task view."""
        return super().of(view, spend=Spend.of(view.spend), budget=Budget.of(view.budget), **given)

    @strawberry.field(
        description=(
            "The task's or its session's spend reached a budget: new work is refused "
            "(BudgetExceeded) until it is raised. On taskAt, the task's own budget as it "
            "stood then, and its session's as it stands now."
        )
    )
    async def over_budget(self, info: Info) -> bool:
        own = self.view.budget
        if own is not None and own.reached(self.view.spend):
            return True
        session = await info.context.loaders.sessions.load(self.view.session_pk)
        if session.budget is None:
            return False
        return session.budget.reached(await info.context.loaders.session_spend.load(session.pk))

    @strawberry.field(
        description=(
            "A LangGraph thread (a RunstateSaver's): its steps are the node runs its graph "
            "reported, added as they run, so it has no plan to count progress against. As "
            "it stands now, on taskAt too."
        )
    )
    async def graph_thread(self, info: Info) -> bool:
        return await info.context.loaders.graph_threads.load(self.view.pk)

    @strawberry.field(
        description=(
            "Where a forked task came from (the source and the seq it was forked at), as its "
            "first event says; null for a task that is not a fork."
        )
    )
    async def origin(self, info: Info) -> TaskOrigin | None:
        first = await info.context.loaders.events.load(((0, 1), self.view))
        origin = first[0].origin if first else None
        return None if origin is None else TaskOrigin.of(origin)

    @strawberry.field(
        description=(
            "The task's ordered change log: one event per committed change to the task, "
            "its steps, its tool states or its lock."
        )
    )
    async def events(
        self, info: Info, after_seq: int | None = 0, first: int | None = 100
    ) -> list[TaskEvent]:
        size = validation.page_size(100 if first is None else first)
        views = await info.context.loaders.events.load(((after_seq or 0, size), self.view))
        return [TaskEvent.of(v) for v in views]


@strawberry.type(description="Where a forked task came from.")
class TaskOrigin(FromView):
    """The source of a fork."""

    task_id: strawberry.ID
    seq: int = strawberry.field(description="The source task's seq the fork started from.")


@strawberry.type(
    description=(
        "One committed change. An event carries what changed (a delta), never the whole\n"
        "task: its size grows with the change, not with the task. A client that holds\n"
        "the task as of seq n-1 and applies event n (replace `steps` by index, set\n"
        "`status`, replace `toolState` by name, set `lock`) holds the task as of seq n."
    )
)
class TaskEvent(FromView):
    """One entry of a task's change log, as a delta."""

    view: strawberry.Private[EventView]
    task_id: strawberry.ID
    seq: int = strawberry.field(
        description="Position in the task's change log: 1, 2, 3, ... with no gaps and no repeats."
    )
    task_version: int = strawberry.field(
        description=(
            "The task's version after this event (tool-state and lock events leave it unchanged)."
        )
    )
    kind: TaskEventKind
    step_index: int | None
    tool_name: str | None
    at: datetime
    status: TaskStatus = strawberry.field(description="The task's status after this event.")
    stalled: bool = strawberry.field(
        description="Whether the task was stalled after this event (see Task.stalled)."
    )
    steps: list[Step] = strawberry.field(
        description=(
            "The steps this event added or changed, as they stood just after it "
            "(empty when it touched none)."
        )
    )
    tool_state: ToolState | None = strawberry.field(
        description="TOOL_STATE_CHANGED: the tool state after the event."
    )
    lock: TaskLock | None = strawberry.field(
        description=(
            "LOCK_ACQUIRED and LOCK_RELEASED: the lease after the event (null once released)."
        )
    )
    origin: TaskOrigin | None = strawberry.field(
        description="The first event of a forked task: the task and seq it was forked from."
    )
    actor: str | None = strawberry.field(
        description=(
            "Who made the change: the user id of the token that wrote it (null on SNAPSHOT)."
        )
    )
    holder: str | None = strawberry.field(
        description=(
            "A write under a lease (it carried a fencing token): the lease's holder, the "
            "worker that made the change."
        )
    )
    note: str | None = strawberry.field(
        description="decideStep and setBudget: the person's reason, as given."
    )
    budget: Budget | None = strawberry.field(
        description=(
            "BUDGET_CHANGED, and TASK_CREATED of a task made with one: the task's budget "
            "after the event (null on BUDGET_CHANGED: removed)."
        )
    )
    budget_crossed: BudgetScope | None = strawberry.field(
        description=(
            "The budget (TASK or SESSION) the spend this event reported reached: from this "
            "event on, new work is refused until it is raised."
        )
    )
    task: Task | None = strawberry.field(
        description=(
            "The whole task: present on SNAPSHOT events only (the first message of a "
            "subscription without afterSeq, or a resync). For any other seq use Query.taskAt."
        )
    )

    @strawberry.field(
        description=(
            "The database's timeline: new after a restore. A subscription resuming with "
            "afterSeq and another epoch gets a SNAPSHOT first."
        )
    )
    def epoch(self, info: Info) -> str:
        return info.context.epoch

    @classmethod
    def of(cls, view: EventView, **given: Any) -> TaskEvent:
        """The GraphQL object for an event view."""
        return super().of(
            view,
            steps=[Step.of(s, view.task_id) for s in view.steps],
            budget=Budget.of(view.budget),
            budget_crossed=None if view.crossed is None else BudgetScope(view.crossed),
            **given,
        )


@strawberry.type
class TaskEdge:
    """A task in a listing."""

    cursor: str
    node: Task


@strawberry.type
class TaskConnection:
    """A page of tasks, newest first."""

    edges: list[TaskEdge]
    page_info: PageInfo

    @classmethod
    def of(cls, page: Page[TaskView]) -> TaskConnection:
        """The connection for one page of task views."""
        return cls(
            edges=[
                TaskEdge(cursor=c, node=Task.of(v))
                for v, c in zip(page.items, page.cursors, strict=True)
            ],
            page_info=_page_info(page),
        )


@strawberry.type
class SessionEdge:
    """A session in a listing."""

    cursor: str
    node: AgentSession


@strawberry.type
class SessionConnection:
    """A page of sessions, newest first."""

    edges: list[SessionEdge]
    page_info: PageInfo

    @classmethod
    def of(cls, page: Page[SessionView]) -> SessionConnection:
        """The connection for one page of session views."""
        return cls(
            edges=[
                SessionEdge(cursor=c, node=AgentSession.of(v))
                for v, c in zip(page.items, page.cursors, strict=True)
            ],
            page_info=_page_info(page),
        )


def _page_info(page: Page[TaskView] | Page[SessionView]) -> PageInfo:
    return PageInfo(
        has_next_page=page.has_next_page,
        end_cursor=page.cursors[-1] if page.cursors else None,
    )


@strawberry.type
class ResumePlan(FromView):
    """Where to go on after a crash."""

    task: Task
    resume_from: int | None = strawberry.field(
        description=(
            "The step to run next, or null when nothing is left to run (or while steps are "
            "IN_DOUBT)."
        )
    )
    needs_decision: bool = strawberry.field(
        description="True while any step is IN_DOUBT: call decideStep for each of them first."
    )
    steps_in_doubt: list[int] = strawberry.field(
        description=(
            "Every step that was RUNNING, not idempotent, when its agent stopped (several "
            "when steps ran in parallel)."
        )
    )


@strawberry.type(
    description=(
        "An input admitted into a session's ledger, in one order that every process"
        " agrees on; its task carries it out."
    )
)
class Submission(FromView):
    """One input of a session's ledger."""

    view: strawberry.Private[SubmissionView]
    id: strawberry.ID
    session_id: strawberry.ID
    seq: int = strawberry.field(
        description=(
            "Its place in the session's ledger: 1, 2, 3, ... in the order the database"
            " admitted them, with no gaps."
        )
    )
    input: JSON | None
    policy: AdmissionPolicy
    status: SubmissionStatus
    reason: str | None = strawberry.field(
        description="Why it is SKIPPED, INTERRUPTED, ROLLED_BACK or CANCELLED, in words."
    )
    task_id: strawberry.ID | None = strawberry.field(
        description="The task that carries it out; null once ROLLED_BACK, and for a SKIPPED fire."
    )
    displaced_by: strawberry.ID | None = strawberry.field(
        description="The submission that interrupted or rolled this one back."
    )
    schedule_id: strawberry.ID | None = strawberry.field(
        description="Set on a schedule's fire: the schedule and the due time it fired for."
    )
    scheduled_for: datetime | None
    actor: str | None = strawberry.field(
        description="Who submitted it (the caller's user, or schedule:<id>)."
    )
    created_at: datetime
    updated_at: datetime

    @strawberry.field(
        description=(
            "What its task spent: as the task stands, or, once a ROLLBACK removed the"
            " task, as it stood then (still counted in its session's spend)."
        )
    )
    async def spend(self, info: Info) -> Spend:
        if self.view.task_id is None:
            return Spend.of(self.view.spent)
        try:
            return Spend.of((await get_task(info.context.user_id, self.view.task_id)).spend)
        except NotFoundError:
            return Spend.of(self.view.spent)

    @strawberry.field
    async def task(self, info: Info) -> Task | None:
        if self.view.task_id is None:
            return None
        try:
            return Task.of(await get_task(info.context.user_id, self.view.task_id))
        except NotFoundError:  # removed since (a ROLLBACK)
            return None


@strawberry.type(description="A plan step as a schedule keeps it.")
class StepPlan(FromView):
    """One step of a schedule's plan."""

    action: str
    input: JSON | None
    idempotent: bool


@strawberry.type(
    description=(
        "Fires a submission into its session at each due time of its cron expression,"
        " once per due time across every server process."
    )
)
class Schedule(FromView):
    """A session's schedule."""

    view: strawberry.Private[ScheduleView]
    id: strawberry.ID
    session_id: strawberry.ID
    version: int
    cron: str = strawberry.field(
        description=(
            "Five fields (minute hour day month weekday), or six with seconds first;"
            " @hourly, @daily and the like."
        )
    )
    timezone: str = strawberry.field(
        description="An IANA zone (Europe/Lisbon); due times follow its daylight-saving changes."
    )
    goal: str
    steps: list[StepPlan]
    input: JSON | None
    policy: AdmissionPolicy
    misfire: MisfirePolicy
    enabled: bool
    next_fire_at: datetime | None
    last_fire_at: datetime | None
    created_at: datetime

    @strawberry.field(description="Its fires, newest first.")
    async def fires(self, info: Info, first: int | None = 20) -> list[Submission]:
        views = await schedule_reads.fires(self.view.pk, 20 if first is None else first)
        return [Submission.of(v) for v in views]


@strawberry.type(
    description=(
        "SNAPSHOT: the session's unfinished submissions in ledger order. ADMITTED,"
        " CHANGED: the one submission admitted or changed."
    )
)
class SubmissionEvent:
    """One message of ``sessionSubmissions``."""

    kind: SubmissionEventKind
    submissions: list[Submission]

    @classmethod
    def of(cls, kind: SubmissionEventKind, views: Any) -> SubmissionEvent:
        """The event for ``views`` (submission views)."""
        return cls(kind=kind, submissions=[Submission.of(v) for v in views])


_GRAPHQL: dict[type, type[FromView]] = {
    SessionView: AgentSession,
    ToolStateView: ToolState,
    LockView: TaskLock,
    OriginView: TaskOrigin,
    TaskView: Task,
    EventView: TaskEvent,
    ResumePlanView: ResumePlan,
    SubmissionView: Submission,
    PlanView: StepPlan,
    ScheduleView: Schedule,
}
"""The GraphQL type of each view that ``FromView.of`` converts inside another (a
step needs its task's id, so ``Step.of`` is called by hand)."""


def register(view: type, graphql: type[FromView]) -> None:
    """Have ``FromView.of`` convert ``view`` inside another view to ``graphql``: for
    the types of the schema's other modules, which import this one."""
    _GRAPHQL[view] = graphql


@strawberry.type
class Deleted:
    """What a delete removed."""

    id: strawberry.ID


@strawberry.type(description="How much the caller's sessions and tasks hold, and may hold.")
class Usage:
    """The caller's byte quota (``services/domain/quota.py``)."""

    stored_bytes: int = strawberry.field(
        description="Bytes the caller's sessions and tasks hold, their history included."
    )
    max_stored_bytes: int = strawberry.field(
        description="What they may hold together (RUNSTATE_MAX_USER_BYTES)."
    )
    max_task_bytes: int = strawberry.field(
        description="What one task may hold (RUNSTATE_MAX_TASK_BYTES)."
    )
    spend: Spend = strawberry.field(description="What the caller's tasks spent, summed.")
    currency: str = strawberry.field(
        description="The currency costs are counted in (RUNSTATE_CURRENCY), in millionths."
    )
