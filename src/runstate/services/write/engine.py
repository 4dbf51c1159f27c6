"""Task writes. Each is one transaction whose first statement is a conditional UPDATE
of the task row (version, owner and lease checked in its WHERE clause), followed by
the changes and exactly one event row with the next ``seq``.

Starting with the UPDATE matters on SQLite shared by several processes: a
transaction that reads first and writes later fails with "database is locked" when
another process wrote in between, while one that writes first waits its turn.

The cost of a write follows its change, not the task's size. The opening UPDATE
returns the task row as it left it, the session's expiry and, for a write to one
step, that step and the first unfinished step after it, so a single-step write
reads nothing else. Then: the step's UPDATE, the task's own columns (its stored
bytes always, the rest when they moved), the step's history row, the event row and
the user's byte count (``quota``): eight statements with BEGIN and COMMIT. The
session's ``lastActiveAt`` moves at most once a second.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tortoise.backends.base.client import BaseDBAsyncClient

from runstate.basics.enums import (
    BudgetScope,
    StepStatus,
    SubmissionStatus,
    TaskEventKind,
    TaskStatus,
)
from runstate.models import Session, Step, StepVersion, Task, TaskEvent
from runstate.services.domain import events, quota, spend, validation
from runstate.services.domain.columns import CHANGING, REPORTED, VERSIONED
from runstate.services.domain.conditions import no_live_lease_sql, session_expired
from runstate.services.domain.errors import (
    DomainError,
    InvalidInputError,
    InvalidTransitionError,
    LockHeldError,
    NotFoundError,
    SessionExpiredError,
    StaleFencingTokenError,
    TaskInterruptedError,
    UnmatchedWriteError,
    VersionConflictError,
)
from runstate.services.domain.moves import (
    FINAL_TASKS,
    FINISHED_STEPS,
    STEP_MOVES,
    check_step_move,
    check_task_move,
)
from runstate.services.domain.validation import MAX_LONG, ContentLimits, Report
from runstate.services.domain.views import (
    BudgetView,
    EventView,
    SpendView,
    TaskView,
    ToolStateView,
    Written,
    budget_columns,
    spent_columns,
)
from runstate.services.read import entries
from runstate.services.read.convert import is_expired, lock_view, step_view, task_view
from runstate.services.read.lookups import get_task, mark_expired
from runstate.services.write import ledger
from runstate.services.write.group_commit import Unchanged
from runstate.services.write.house import House
from runstate.storage import sql
from runstate.storage.clock import utcnow

MAX_ATTEMPTS = 5
TOUCH_EVERY = timedelta(seconds=1)
"""A write moves its session's ``lastActiveAt`` only when it is at least this old."""

_ENTERS_RUNNING = frozenset({StepStatus.RUNNING, StepStatus.SUCCESS, StepStatus.FAILED})
_STARTED = frozenset({StepStatus.RUNNING, StepStatus.IN_DOUBT})
_UNDONE = frozenset({StepStatus.PENDING, StepStatus.RUNNING, StepStatus.IN_DOUBT})

TASK_FIELDS = sql.columns(Task)
SESSION_FIELDS = (
    "public_id",
    "status",
    "expires_at",
    "last_active_at",
    "ttl_seconds",
    "budget_max_tokens",
    "budget_max_cost_micros",
    "spent_input_tokens",
    "spent_output_tokens",
    "spent_cost_micros",
    "spent_calls",
)
STEP_FIELDS = sql.columns(Step, "task_id")
_STEP_ROWS = f'SELECT {sql.names(STEP_FIELDS)} FROM "steps" WHERE "task_id" = ?'
"""A task's step rows, every column; the draft adds its condition."""
_UNFINISHED = ", ".join(f"'{s.value}'" for s in StepStatus if s not in FINISHED_STEPS)


def _next_unfinished(task: str) -> str:
    """The position of the task's first unfinished step after the one bound as
    ``?``; ``task`` is the SQL for the task's row id (a column, or ``?``)."""
    return (
        f'SELECT n."position" FROM "steps" n WHERE n."task_id" = {task}'
        f' AND n."position" > ? AND n."status" IN ({_UNFINISHED})'
        ' ORDER BY n."position" LIMIT 1'
    )


_SAVED = (*CHANGING, "changed_seq")
"""The columns of a step row that a write saves when it changes the step."""


@dataclass
class Draft:
    """The task being changed inside a write transaction, before it is saved.

    ``task`` is the row as the opening UPDATE left it. Steps are loaded only when
    asked for (``step``, ``all_steps``); their rows are as stored: a client output
    goes in through ``box``.
    """

    task: Task
    session_id: str
    now: datetime
    conn: BaseDBAsyncClient
    status: TaskStatus
    limits: ContentLimits
    """The house's limits, which the write's content is held to."""
    currency: str
    """The house's currency, which a budget's refusal counts cost in."""
    steps: dict[int, Step] = field(default_factory=dict)
    changed: set[int] = field(default_factory=set)
    added: list[Step] = field(default_factory=list)
    opened_step: int | None = None
    """The step the opening statement read, with ``next_unfinished``: the first
    unfinished position after it (None: none)."""
    next_unfinished: int | None = None
    complete_when_done: bool = True
    wants_completed: bool = False
    tool_state: ToolStateView | None = None
    holder: str | None = None
    """The lease holder whose fencing token let the write through (None: no token)."""
    stored: int = 0
    """Bytes of rows the write stored beside the task's own (a LangGraph
    checkpoint's, ``services.threads.checkpoints``), negative for rows it deleted."""
    session_budget: BudgetView | None = None
    """The budget of the task's session, as the opening statement read it."""
    session_read: SpendView = field(default_factory=SpendView)
    """The session's spend as the opening statement read it: on SQLite, whose
    write lock the transaction holds from that statement on, the spend before
    this write (``session_spent``)."""
    spent: SpendView = field(default_factory=SpendView)
    """The spend this write reported (``spend``), added to the task's totals."""
    spent_field: str = "spend"
    """The input field that carried the last of it: the one a refusal names when
    the user's spend would pass ``MAX_LONG`` (``quota.charge``)."""
    new_budget: tuple[BudgetView | None] | None = None
    """The task's budget as this write sets it (``set_budget``; None: unchanged)."""
    _session_spent: SpendView | None = None
    """The session's spend before this write, once read (``session_spent``)."""
    stopping: bool = False
    """The task, asked to stop, ends with this write (``stop_if_interrupted``)."""
    ended: SubmissionStatus | None = None
    """The status this write ended the task's submission in (``ledger.task_ended``);
    None: it ended none."""
    tail: list[sql.Statement] = field(default_factory=list)
    """Statements saving rows beside the task's (a LangGraph node's) that nothing
    later in the write reads: they run with the write's tail (``_settle``), in
    its one trip, so each must change rows no other statement of it changes."""

    @property
    def total(self) -> int:
        """How many steps the plan has, those added by this write included."""
        return self.task.total_steps + len(self.added)

    async def step(self, index: int, field: str = "stepIndex") -> Step:
        """The step at ``index``, or InvalidInput naming ``field``."""
        validation.step_index(index, self.total, field)
        if index not in self.steps:
            await self._load('"position" = ?', [index])
        return self.steps[index]

    async def load(self, indexes: Iterable[int]) -> None:
        """Load several steps with one query (a checkpoint's patched steps)."""
        missing = sorted(set(indexes) - self.steps.keys())
        for chunk in sql.chunks(missing):
            await self._load(f'"position" IN ({sql.marks(chunk)})', chunk)

    async def all_steps(self) -> list[Step]:
        """Every step, in order (a whole-task write such as resume)."""
        if len(self.steps) < self.total:
            await self._load("1 = 1", [])
        return [self.steps[i] for i in range(self.total)]

    async def with_status(self, status: StepStatus) -> list[Step]:
        """The stored steps that stand at ``status`` (one indexed query), in order."""
        await self._load('"status" = ?', [status.value])
        return sorted(
            (s for s in self.steps.values() if s.status is status and s.id is not None),
            key=lambda s: s.position,
        )

    async def others_in_doubt(self, index: int) -> bool:
        """Whether a step other than ``index`` is IN_DOUBT (one indexed query)."""
        if any(s.status is StepStatus.IN_DOUBT and p != index for p, s in self.steps.items()):
            return True
        rows = await sql.fetch(
            self.conn,
            'SELECT "position" FROM "steps" WHERE "task_id" = ? AND "status" = ?',
            [self.task.id, StepStatus.IN_DOUBT.value],
        )
        return any(r["position"] != index and r["position"] not in self.steps for r in rows)

    async def _load(self, where: str, params: list[Any]) -> None:
        """Add the task's steps matching ``where`` (SQL on the step row) to the draft."""
        found = await sql.fetch(self.conn, f"{_STEP_ROWS} AND ({where})", [self.task.id, *params])
        for raw in found:
            row = Step(task_id=self.task.id, **sql.decode(Step, raw, STEP_FIELDS))
            self.steps.setdefault(row.position, row)

    def move_step(
        self,
        step: Step,
        new: StepStatus,
        *,
        jump: bool = False,
        moves: Mapping[StepStatus, frozenset[StepStatus]] = STEP_MOVES,
    ) -> None:
        """Move a step along ``moves``, keeping attempts and timestamps true to the
        path it took (a step in doubt did start: COMPLETE counts no new attempt)."""
        old = step.status
        check_step_move(old, new, jump=jump, moves=moves)
        if new in _ENTERS_RUNNING and old not in _STARTED:
            step.attempts += 1
            step.started_at = self.now
        if new is StepStatus.SUCCESS:
            step.error = None
        step.completed_at = None if new in _UNDONE else self.now
        step.status = new
        if step.id is not None:  # an added step (no row yet) is inserted whole
            self.changed.add(step.position)

    def move_task(self, new: TaskStatus, *, jump: bool = False) -> None:
        """Move the task, unless it is there already. COMPLETED is checked against the
        steps once the write's step changes are in (see ``_settle``)."""
        if new is not self.status:
            check_task_move(self.status, new, all_steps_finished=True, jump=jump)
            self.wants_completed = new is TaskStatus.COMPLETED
            self.status = new

    def report(self, step: Step, reported: Mapping[str, Any]) -> None:
        """Set what the step reports (``columns.REPORTED``) as given; a value left
        None is not reported, so a later patch never clears an earlier report."""
        for name, value in reported.items():
            if name not in REPORTED:
                raise TypeError(f"{name} is not a column a step reports")
            if value is not None:
                setattr(step, name, value)

    def spend(self, step: Step, report: Report, field: str = "spend") -> None:
        """Add a report of spend to ``step`` and to the task's totals. Spend is
        recorded whatever the budgets say: it has happened. InvalidInput on
        ``field`` when the step's or the task's spend would pass ``MAX_LONG`` (the
        user's, its sessions' sum, is checked as the write commits:
        ``quota.charge``)."""
        total = self.task_spend + self.spent + report.spend
        if max(total.input_tokens, total.output_tokens, total.cost_micros) > MAX_LONG:
            raise InvalidInputError(field, f"the task's spend would pass {MAX_LONG}")
        spend.add(step, report, field)
        self.spent += report.spend
        self.spent_field = field
        if step.id is not None:  # an added step (no row yet) is inserted whole
            self.changed.add(step.position)

    def set_budget(self, budget: BudgetView | None) -> None:
        """Give the task this budget (None: none), saved with the write."""
        self.new_budget = (budget,)

    async def refuse_over_budget(self) -> None:
        """BudgetExceeded when the task's spend, or its session's, has reached its
        budget: called by the writes that would start new work, in their
        transaction. The task row is locked by the opening UPDATE; a session's
        spend, its row's totals, is read locked only when it has a budget."""
        spend.refuse_reached(BudgetScope.TASK, self.task_budget, self.task_spend, self.currency)
        if self.session_budget is not None:
            spend.refuse_reached(
                BudgetScope.SESSION,
                self.session_budget,
                await self.session_spent(),
                self.currency,
            )

    @property
    def task_spend(self) -> SpendView:
        """The task's spend as stored before this write."""
        task = self.task
        return SpendView(
            task.spent_input_tokens,
            task.spent_output_tokens,
            task.spent_cost_micros,
            task.spent_calls,
        )

    async def session_spent(self) -> SpendView:
        """The session's spend before this write, read locked once
        (``spend.session_spent``) though both the budget check and the crossing
        ask (a checkpoint starting one step and reporting another's spend). On
        SQLite the opening statement's reading is that already: the transaction
        holds the database's write lock since, so no statement is needed."""
        if self._session_spent is None:
            if self.conn.capabilities.dialect == "sqlite":
                self._session_spent = self.session_read
            else:
                self._session_spent = await spend.session_spent(self.conn, self.task.session_id)
        return self._session_spent

    @property
    def task_budget(self) -> BudgetView | None:
        """The task's own budget as stored before this write."""
        return BudgetView.of(self.task.budget_max_tokens, self.task.budget_max_cost_micros)

    async def crossed(self) -> BudgetScope | None:
        """The budget this write's spend reached, if it was not reached before: the
        task's, else its session's (read locked only when it has a budget and this
        write reported spend)."""
        if not self.spent.calls:
            return None
        before = self.task_spend
        if spend.crossed(self.task_budget, before, before + self.spent):
            return BudgetScope.TASK
        if self.session_budget is None:
            return None
        session = await self.session_spent()
        if spend.crossed(self.session_budget, session, session + self.spent):
            return BudgetScope.SESSION
        return None

    async def refuse_interrupted(self) -> None:
        """A start of new work refused for a task of the ledger whose turn it is
        not: TaskInterrupted once its submission was asked to stop (its task's
        ``interrupt_requested``), InvalidTransition while it is still QUEUED.
        Called by the writes that start work, in their transaction (rolled back)."""
        pk = self.task.submission_id
        if pk is None:
            return
        if self.task.interrupt_requested:
            raise TaskInterruptedError(await entries.by_pk(pk, self.conn))
        rows = await sql.fetch(self.conn, 'SELECT "status" FROM "submissions" WHERE "id" = ?', [pk])
        status = SubmissionStatus(rows[0]["status"])
        if status is SubmissionStatus.QUEUED:
            raise InvalidTransitionError("submission", status, SubmissionStatus.ACTIVE)

    def stop_if_interrupted(self) -> None:
        """End the task CANCELLED, what it did kept, once this write is in, when its
        submission was asked to stop: called by the writes that finish its
        running work (a step done or failed, its lease released), which are
        accepted as they happened. A write that finished the task's last step
        completes it instead: nothing was left to stop (``_settle``)."""
        self.stopping = self.task.interrupt_requested

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
    note: str | None = None
    """A person's reason (``decideStep``, ``setBudget``), kept with the event."""
    budget: BudgetView | None = None
    """BUDGET_CHANGED: the task's budget after it."""


Apply = Callable[[Draft], Awaitable[Change | None]]
"""Changes the draft (and, for tool states, their rows); returns the event to log,
None for a heartbeat that logs nothing, or raises ``Unchanged`` to write nothing."""


class _ExpiredSessionError(Exception):
    """The task's session expired; marked after the rollback."""

    def __init__(self, session_pk: int, session_id: str) -> None:
        super().__init__(session_pk)
        self.session_pk = session_pk
        self.session_id = session_id


@dataclass(frozen=True)
class Guard:
    """The conditional UPDATE that opens a task write, and the refusal for a miss.

    ``where`` is a condition on the "tasks" row, ANDed with the owner check;
    ``sets`` is the SET list (``sql.assignments``); both are SQL, since building
    the statement through the ORM cost a fifth of a write. ``refusal`` explains a
    miss from the row as it now stands (None: try again). ``touch_session`` checks
    the session's expiry and marks it active (every write but a lease release
    does). ``step`` names the one step the write changes, read by the opening
    statement itself. ``leased``: the write carries a fencing token, so its event
    names the lease holder.
    """

    where: Callable[[datetime], sql.Fragment]
    sets: Callable[[datetime], sql.Fragment]
    refusal: Callable[[Task, datetime], DomainError | None]
    touch_session: bool = True
    step: int | None = None
    leased: bool = False


def lease_allows(fencing_token: int | None, now: datetime) -> sql.Fragment:
    """The WHERE condition under which the task's lease lets a write through."""
    if fencing_token is None:
        return no_live_lease_sql(now)
    return '"lock_token" = ?', [fencing_token]


def lease_refusal(task: Task, fencing_token: int | None, now: datetime) -> DomainError | None:
    """StaleFencingToken or LockHeld when the lease is why a write was refused."""
    if fencing_token is not None and fencing_token != task.lock_token:
        return StaleFencingTokenError(fencing_token, task.lock_token)
    lock = lock_view(task, now)
    if fencing_token is None and lock is not None:
        return LockHeldError(lock.holder_id, lock.expires_at)
    return None


def versioned(
    expected_version: int | None,
    fencing_token: int | None,
    *,
    bump_version: bool = True,
    step: int | None = None,
    lease: bool = True,
) -> Guard:
    """The usual guard: lease and (optionally) version checked; version and seq bumped.
    Without ``lease``, the version alone (a person's word that any lease holder
    must let through, such as an interrupt's answer)."""
    assert lease or expected_version is not None, "a write checks its lease or its version"

    def where(now: datetime) -> sql.Fragment:
        version: sql.Fragment = ('"version" = ?', [expected_version])
        if not lease:
            return version
        condition = lease_allows(fencing_token, now)
        return condition if expected_version is None else sql.both(condition, version)

    increments = ("event_seq", "version") if bump_version else ("event_seq",)

    def sets(now: datetime) -> sql.Fragment:
        return sql.assignments(Task, {"updated_at": now}, increments)

    def refusal(task: Task, now: datetime) -> DomainError | None:
        refused = lease_refusal(task, fencing_token, now) if lease else None
        if refused is None and expected_version is not None and expected_version != task.version:
            refused = VersionConflictError(expected_version, task.version)
        return refused

    return Guard(where, sets, refusal, step=step, leased=fencing_token is not None)


async def write_task(
    house: House, user_id: str, task_id: str, apply: Apply, guard: Guard
) -> Written[TaskView]:
    """Open with ``guard``'s conditional UPDATE of the caller's task ``task_id``, run
    ``apply``, log its event and commit, in the house's group commit: the task as
    the write left it, with its event. One transaction.

    When the UPDATE matches nothing and no reason shows afterwards (a lease expired
    in between), the write is tried again, a few times at most; a real conflict
    never is.
    """

    validation.known_id(task_id, "task")

    async def explain() -> DomainError | None:
        return await _why_missed(user_id, task_id, guard)

    select = '"user_id" = ? AND "public_id" = ?', [user_id, task_id]
    try:
        return await write_selected(house, select, apply, guard, explain)
    except Unchanged:
        return Written(await get_task(user_id, task_id))


async def write_selected(
    house: House,
    select: sql.Fragment,
    apply: Apply,
    guard: Guard,
    explain: Callable[[], Awaitable[DomainError | None]],
    *,
    attempts: int = MAX_ATTEMPTS,
) -> Written[TaskView]:
    """``write_task`` for the one task the condition ``select`` picks (``claimTask``
    names it by id); ``explain`` gives the refusal for a miss, None to try again."""

    async def write(conn: BaseDBAsyncClient) -> tuple[TaskView, EventView | None, Draft]:
        draft = await _open(conn, select, guard, utcnow(), house.limits, house.currency)
        return (*await _finish(draft, await apply(draft)), draft)

    for _ in range(attempts):
        try:
            view, event, draft = await house.group.run(write)
            return await _ended(view, () if event is None else (event,), draft)
        except UnmatchedWriteError:
            refusal = await explain()
            if refusal is not None:
                raise refusal from None
        except _ExpiredSessionError as expired:
            await mark_expired(expired.session_pk)
            raise SessionExpiredError(expired.session_id) from None
    raise RuntimeError("a task write kept missing with no reason to refuse")


async def _ended(view: TaskView, logged: tuple[EventView, ...], draft: Draft) -> Written[TaskView]:
    """The write's answer, waking the session's ledger when it ended the task's
    submission; a ROLLED_BACK one's task is then removed (``ledger.remove_task``)."""
    if draft.ended is None:
        return Written(view, logged)
    task = draft.task
    if draft.ended is SubmissionStatus.ROLLED_BACK:
        assert task.submission_id is not None
        await ledger.remove_task(task.id, task.session_id, task.submission_id)
    return Written(view, logged, ledger.wakes(task.session_id))


@functools.lru_cache(maxsize=4)
def _returning(one_step: bool, dialect: str) -> str:
    """The RETURNING list of the opening UPDATE: the task row, its session's expiry,
    and for a single-step write (``one_step``) that step with the first unfinished
    one after it, whose position is bound twice as the statement's last parameters,
    and the task's seq as the statement's snapshot saw it (``_overtaken``).
    The session's and the step's columns come packed in one JSON array each
    (``sql.packed``): one subquery per column cost ten times the UPDATE itself."""
    columns = [sql.names(TASK_FIELDS)]
    columns.append(
        sql.packed(
            dialect, "session", SESSION_FIELDS, 's WHERE s."id" = "tasks"."session_id"', "sessions"
        )
    )
    if one_step:
        row = 'p WHERE p."task_id" = "tasks"."id" AND p."position" = ?'
        columns.append(sql.packed(dialect, "step", STEP_FIELDS, row, "steps"))
        following = _next_unfinished('"tasks"."id"')
        columns.append(f'({following}) AS "next_unfinished"')
        seen = 'SELECT o."event_seq" FROM "tasks" o WHERE o."id" = "tasks"."id"'
        columns.append(f'({seen}) AS "seen_seq"')
    return ", ".join(columns)


async def _open(
    conn: BaseDBAsyncClient,
    select: sql.Fragment,
    guard: Guard,
    now: datetime,
    limits: ContentLimits,
    currency: str,
) -> Draft:
    """The opening compare-and-swap; its RETURNING row becomes the draft."""
    sets, values = guard.sets(now)
    where, params = sql.both(select, guard.where(now))
    one_step = guard.step is not None
    returning = _returning(one_step, conn.capabilities.dialect)
    rows = await sql.fetch(
        conn,
        f'UPDATE "tasks" SET {sets} WHERE {where} RETURNING {returning}',
        [*values, *params, *([guard.step, guard.step] if one_step else [])],
    )
    if not rows:
        raise UnmatchedWriteError
    (row,) = rows
    task = Task(**sql.decode(Task, row, TASK_FIELDS))
    session = sql.unpacked(Session, row["session"], SESSION_FIELDS)
    if guard.touch_session:
        await _touch_session(conn, task.session_id, session, now)
    draft = Draft(
        task=task,
        session_id=session["public_id"],
        now=now,
        conn=conn,
        status=task.status,
        limits=limits,
        currency=currency,
        holder=task.lock_holder if guard.leased else None,
        session_budget=BudgetView.of(
            session["budget_max_tokens"], session["budget_max_cost_micros"]
        ),
        session_read=SpendView(
            int(session["spent_input_tokens"]),
            int(session["spent_output_tokens"]),
            int(session["spent_cost_micros"]),
            int(session["spent_calls"]),
        ),
    )
    if guard.step is not None and row["step"] is not None and not _overtaken(row, task):
        step = Step(task_id=task.id, **sql.unpacked(Step, row["step"], STEP_FIELDS))
        draft.steps[step.position] = step
        draft.opened_step = step.position
        draft.next_unfinished = row["next_unfinished"]
    return draft


def _overtaken(row: dict[str, Any], task: Task) -> bool:
    """Whether another write committed to the task while the opening statement waited
    for its row: PostgreSQL then gives the task row as that write left it, but the
    step it read alongside as it stood before (the statement's snapshot), so the
    step is read again (``Draft.step``). A write that checks the version never
    sees it (the other write moved the version); one that does not (``recordSpend``)
    would add its spend to a stale step. The task's seq as the statement's snapshot
    saw it (``seen_seq``) tells: one behind the row's, or the row's own on SQLite,
    which reads the updated row, unless the row moved in between."""
    return int(row["seen_seq"]) < task.event_seq - 1


async def _touch_session(
    conn: BaseDBAsyncClient, session_pk: int, session: dict[str, Any], now: datetime
) -> None:
    """Refuse if the session has expired; else move its ``lastActiveAt`` to now, unless
    it moved less than ``TOUCH_EVERY`` ago."""
    if session_expired(session["status"], session["expires_at"], now):
        raise _ExpiredSessionError(session_pk, session["public_id"])
    if now - session["last_active_at"] >= TOUCH_EVERY:
        expires = now + timedelta(seconds=session["ttl_seconds"])
        moved = {"last_active_at": now, "expires_at": expires}
        await sql.execute(conn, *sql.update_row(Session, session_pk, moved))


async def _finish(draft: Draft, change: Change | None) -> tuple[TaskView, EventView | None]:
    """Save the draft's changes and its event; the task as it now stands. A task
    of the ledger that this write ended ends its submission and starts the next
    (``ledger.task_ended``)."""
    task = draft.task
    was = task.status
    if change is None:
        return _task_view(draft), None
    adding = _added_bytes(draft) + quota.text_bytes(change.note)
    field = quota.CONTENT_FIELDS.get(change.kind, "taskId")
    quota.check_task(draft.limits, task.public_id, task.stored_bytes, adding, field)
    crossed = await draft.crossed()
    statements = await _settle(draft, task.stored_bytes + adding)
    view = _task_view(draft)
    steps = [draft.steps[p] for p in sorted(draft.changed)] + draft.added
    event = events.written(
        view,
        change.kind,
        draft.now,
        step_index=change.step_index,
        tool_name=change.tool_name,
        steps=tuple(step_view(s) for s in steps),
        tool_state=draft.tool_state,
        actor=task.user_id,
        holder=draft.holder,
        note=change.note,
        budget=change.budget,
        crossed=crossed,
    )
    statements.append(event_row(event))
    await quota.charge(
        draft.conn,
        draft.limits,
        task.user_id,
        adding,
        field,
        after=statements,
        spent=draft.spent,
        spent_field=draft.spent_field,
    )
    ends = draft.status is not was and draft.status in ledger.ENDINGS
    if task.submission_id is not None and ends:
        draft.ended = await ledger.task_ended(
            draft.conn, task.session_id, task.submission_id, draft.status, draft.now
        )
    return view, event


def _added_bytes(draft: Draft) -> int:
    """What the write adds to the task's stored bytes: its event row, the history
    rows of the steps it changed, the steps it added, the tool state it logged and
    the rows it stored beside (``Draft.stored``)."""
    adding = quota.ROW_BYTES + quota.versions_bytes(draft.steps[p] for p in draft.changed)
    adding += quota.versions_bytes(_added_moved(draft))
    adding += sum(quota.new_step_bytes(s) for s in draft.added) + draft.stored
    if draft.tool_state is not None:
        tool = draft.tool_state
        adding += validation.json_size(tool.last_result) + quota.text_bytes(tool.last_error)
    return adding


async def _settle(draft: Draft, stored_bytes: int) -> list[sql.Statement]:
    """The statements writing the changed and added steps, their history rows, and
    the task's own columns (``stored_bytes`` always, the others when they moved),
    to run with the event's in one trip; complete the task when this write
    finished its last unfinished step (a later write, a lease's release say, never
    completes a task left otherwise with its steps done)."""
    task, conn = draft.task, draft.conn
    seq = task.event_seq
    changed = [draft.steps[p] for p in sorted(draft.changed)]
    statements = list(draft.tail)
    for step in changed:
        step.changed_seq = seq
        columns = {name: getattr(step, name) for name in _SAVED}
        statements.append(sql.update_row(Step, step.id, columns))
    for step in draft.added:
        step.created_seq = seq
    statements += step_rows(draft.added)
    statements += version_rows(task.id, seq, [*changed, *_added_moved(draft)])
    current = _current_step_known(draft)
    if current is None:  # read from the steps as this write leaves them
        await sql.run_all(conn, statements)
        statements = []
        current = await _following(draft)
    if draft.wants_completed and current < draft.total:
        raise InvalidTransitionError("task", task.status, TaskStatus.COMPLETED)
    finished_now = 0 < draft.total == current != task.current_step
    if finished_now and draft.complete_when_done and draft.status not in FINAL_TASKS:
        draft.move_task(TaskStatus.COMPLETED, jump=True)
    if draft.stopping and draft.status not in FINAL_TASKS:
        draft.move_task(TaskStatus.CANCELLED, jump=True)
    moved: dict[str, Any] = {"stored_bytes": stored_bytes}
    if draft.new_budget is not None:
        moved |= budget_columns(draft.new_budget[0])
    if draft.spent.calls:
        moved |= spent_columns(draft.task_spend + draft.spent)
    if draft.status is not task.status:
        moved["status"] = draft.status
    if current != task.current_step:
        moved["current_step"] = current
    if draft.total != task.total_steps:
        moved["total_steps"] = draft.total
    statements.append(sql.update_row(Task, task.id, moved))
    if draft.spent.calls:
        statements.append(spend.added_to_session(task.session_id, draft.spent))
    task.update_from_dict(moved)
    return statements


def _added_moved(draft: Draft) -> list[Step]:
    """The steps this write added past PENDING (a LangGraph node seen first when
    it ran): history reads a step without a history row as added PENDING, so
    these need one at the seq that added them."""
    return [s for s in draft.added if s.status is not StepStatus.PENDING]


def step_rows(steps: Sequence[Step]) -> list[sql.Statement]:
    """The inserts of new step rows (every column but the id), at most
    ``sql.CHUNK`` rows each."""
    columns = sql.columns(Step, "id")
    rows = [{name: getattr(step, name) for name in columns} for step in steps]
    return [sql.insert_rows(Step, chunk) for chunk in sql.chunks(rows)]


async def insert_steps(conn: BaseDBAsyncClient, steps: Sequence[Step]) -> None:
    """Insert new step rows (``step_rows``)."""
    await sql.run_all(conn, step_rows(steps))


def version_rows(task_pk: int, seq: int, steps: Iterable[Step]) -> list[sql.Statement]:
    """The insert of the history rows of steps as they stand after event ``seq``."""
    versions = [
        {"task_id": task_pk, "position": s.position, "seq": seq}
        | {name: getattr(s, name) for name in VERSIONED}
        for s in steps
    ]
    return [sql.insert_rows(StepVersion, versions)] if versions else []


async def record_versions(
    conn: BaseDBAsyncClient, task_pk: int, seq: int, steps: Iterable[Step]
) -> None:
    """Insert the history rows of steps (``version_rows``)."""
    await sql.run_all(conn, version_rows(task_pk, seq, steps))


def _current_step_known(draft: Draft) -> int | None:
    """Index of the first unfinished step after this write's changes, when it is
    known without reading the steps (None: ``_following`` reads it).

    Steps before the stored ``current_step`` are finished, and finished steps never
    change, so only a write that finished the current step (or added it finished:
    a LangGraph node first seen at its end) moves it: to the first unfinished step
    after it, known from the opening statement when that was the one step written,
    or from the added steps when it is one of them or the last step stored.
    """
    current = draft.task.current_step
    added = {s.position: s for s in draft.added}
    step = added[current] if current in added else draft.steps.get(current)
    moved = current in draft.changed or current in added
    if step is None or not moved or step.status not in FINISHED_STEPS:
        return current
    if draft.opened_step == current and draft.changed == {current} and not draft.added:
        return draft.total if draft.next_unfinished is None else draft.next_unfinished
    if current in added or current == draft.task.total_steps - 1:
        # every step after it was added by this write (a watched graph's next node)
        current += 1
        while current in added and added[current].status in FINISHED_STEPS:
            current += 1
        return current
    return None


async def _following(draft: Draft) -> int:
    """The first unfinished step after the current one, as saved: one indexed query."""
    current = draft.task.current_step
    following = await sql.fetch(draft.conn, _next_unfinished("?"), [draft.task.id, current])
    return following[0]["position"] if following else draft.total


def _task_view(draft: Draft) -> TaskView:
    draft.task.status = draft.status
    return task_view(draft.task, draft.session_id, draft.now)


async def log_event(conn: BaseDBAsyncClient, event: EventView) -> None:
    """Append the event row of a write (``event_row``)."""
    await sql.run_all(conn, [event_row(event)])


def event_row(event: EventView) -> sql.Statement:
    """The insert of a write's event row (``events.row``)."""
    return sql.insert_rows(TaskEvent, [events.row(event)])


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
