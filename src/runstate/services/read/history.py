"""History: a task's events as deltas, and the task as it stood after any seq.

Storage (see ``models``): an event row holds the task's status and version after
it and, in ``delta``, a tool state, a lease or a fork's origin; the steps it
changed are ``StepVersion`` rows keyed by (task, position, seq). The step and
tool-state rows carry the seq of their last change, so at any seq from that one
on the row itself is the answer and only rows changed later are looked up in the
history, one indexed "latest at or before seq" per row. Reading the task at a seq
costs what reading the task costs, however long its history.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

from tortoise import connections
from tortoise.expressions import Q
from tortoise.fields import JSONField

from runstate.basics.enums import StepStatus, TaskEventKind
from runstate.models import Step, StepVersion, TaskEvent, ToolState, unbox
from runstate.services.domain.columns import VERSIONED
from runstate.services.domain.errors import InvalidInputError
from runstate.services.domain.events import (
    TaskRef,
    budget_in,
    lock_in,
    stalled_in,
    stored,
    tool_in,
)
from runstate.services.domain.views import (
    BudgetView,
    EventView,
    LockView,
    SpendView,
    StepView,
    TaskView,
    ToolStateView,
    budget_columns,
    current_step,
    spent_columns,
)
from runstate.services.read.convert import from_row, step_view, tool_state_view
from runstate.storage import sql

_VERSION_FIELDS = ("position", *VERSIONED)
_SPAN_FIELDS = ("task_id", "seq", *_VERSION_FIELDS)
_AT_FIELDS = ("status", "task_version", "at", "delta")
"""What ``task_at`` reads of the event it stands at."""


_BOXED = frozenset(
    name for name in VERSIONED if isinstance(StepVersion._meta.fields_map[name], JSONField)
)
UNSPENT: dict[str, Any] = {
    "input_tokens": 0,
    "output_tokens": 0,
    "cost_micros": 0,
    "calls": 0,
    "models": None,
}
"""A step's spend columns as they stand before any report (and in a fork, whose
source paid for what it copies)."""
AS_ADDED: dict[str, Any] = (
    dict.fromkeys(VERSIONED) | {"status": StepStatus.PENDING, "attempts": 0} | UNSPENT
)
"""The changing fields of a step as a plan adds it: PENDING, no attempts, nothing
spent, the rest None (a new versioned column starts as None unless named here)."""


def _versioned(step: Step, version: dict[str, Any] | None) -> StepView:
    """A step's fixed fields with its changing ones as a version row left them
    (None: as it was added)."""
    if version is None:
        return from_row(StepView, step, **AS_ADDED)
    state = {name: unbox(version[name]) if name in _BOXED else version[name] for name in VERSIONED}
    return from_row(StepView, step, **state)


async def _versions_at(task_pk: int, positions: Sequence[int], seq: int) -> dict[int, Any]:
    """For each position, its latest version at or before ``seq`` (absent: none)."""
    found: dict[int, Any] = {}
    conn = connections.get("default")
    columns = sql.names(_VERSION_FIELDS, "v")
    for chunk in sql.chunks(positions):
        marks = sql.marks(chunk)
        rows = await sql.fetch(
            conn,
            f'SELECT {columns} FROM "step_versions" v WHERE v."task_id" = ?'
            f' AND v."position" IN ({marks}) AND v."seq" = (SELECT MAX(w."seq")'
            ' FROM "step_versions" w WHERE w."task_id" = v."task_id"'
            ' AND w."position" = v."position" AND w."seq" <= ?)',
            [task_pk, *chunk, seq],
        )
        for row in rows:
            version = sql.decode(StepVersion, row, _VERSION_FIELDS)
            found[version["position"]] = version
    return found


async def steps_at(task_pk: int, seq: int) -> tuple[StepView, ...]:
    """The task's steps as they stood just after event ``seq``."""
    return (await steps_at_many([(task_pk, seq)]))[0]


async def steps_at_many(keys: Sequence[tuple[int, int]]) -> list[tuple[StepView, ...]]:
    """``steps_at`` of several (task, seq) at once (a page of tasks showing their
    steps): the step rows of all of them in one query per ``sql.CHUNK`` tasks, and a
    history lookup only for a task with steps changed after its seq."""
    rows = await _rows_of(Step, {pk for pk, _ in keys}, "position")
    found = []
    for pk, seq in keys:
        current = [r for r in rows[pk] if r.created_seq <= seq]
        later = [r.position for r in current if r.changed_seq > seq]
        versions = await _versions_at(pk, later, seq) if later else {}
        found.append(
            tuple(
                step_view(r) if r.changed_seq <= seq else _versioned(r, versions.get(r.position))
                for r in current
            )
        )
    return found


async def tool_states_at(task_pk: int, task_id: str, seq: int) -> tuple[ToolStateView, ...]:
    """The task's tool states as they stood just after event ``seq``."""
    return (await tool_states_at_many([(task_pk, task_id, seq)]))[0]


async def tool_states_at_many(
    keys: Sequence[tuple[int, str, int]],
) -> list[tuple[ToolStateView, ...]]:
    """``tool_states_at`` of several (task, public id, seq) at once, as
    ``steps_at_many`` does for steps. Each task's are in the order of their names'
    code points, whatever the database's collation: the order a client applying
    events keeps (``Task.apply``, the AG-UI document), on SQLite and PostgreSQL."""
    rows = await _rows_of(ToolState, {pk for pk, _, _ in keys}, "tool_name")
    found = []
    for pk, task_id, seq in keys:
        current = sorted((r for r in rows[pk] if r.created_seq <= seq), key=_by_name)
        later = [r.tool_name for r in current if r.changed_seq > seq]
        earlier = await _tools_at(pk, later, seq) if later else {}
        found.append(
            tuple(
                tool_state_view(r, task_id) if r.changed_seq <= seq else earlier[r.tool_name]
                for r in current
            )
        )
    return found


def _by_name(row: ToolState) -> str:
    return row.tool_name


R = TypeVar("R", Step, ToolState)


async def _rows_of(model: type[R], pks: set[int], order: str) -> dict[int, list[R]]:
    """The rows of ``model`` of the tasks ``pks``, by task, in ``order``."""
    rows: dict[int, list[R]] = defaultdict(list)
    for chunk in sql.chunks(sorted(pks)):
        for row in await model.filter(task_id__in=chunk).order_by("task_id", order):
            rows[row.task_id].append(row)
    return rows


async def _tools_at(task_pk: int, names: Sequence[str], seq: int) -> dict[str, ToolStateView]:
    """Each named tool state of the task as the latest event at or before ``seq``
    about it left it."""
    earlier: dict[str, ToolStateView] = {}
    for chunk in sql.chunks(names):
        marks = sql.marks(chunk)
        kind = TaskEventKind.TOOL_STATE_CHANGED.value
        found = await sql.fetch(
            connections.get("default"),
            'SELECT e."delta" FROM "task_events" e WHERE e."task_id" = ? AND e."kind" = ?'
            f' AND e."tool_name" IN ({marks}) AND e."seq" = (SELECT MAX(f."seq")'
            ' FROM "task_events" f WHERE f."task_id" = e."task_id" AND f."kind" = e."kind"'
            ' AND f."tool_name" = e."tool_name" AND f."seq" <= ?)',
            [task_pk, kind, *chunk, seq],
        )
        for row in found:
            tool = tool_in(sql.decode(TaskEvent, row, ("delta",))["delta"])
            if tool is not None:
                earlier[tool.tool_name] = tool
    return earlier


async def _latest_delta(
    task_pk: int, seq: int, kinds: Sequence[TaskEventKind]
) -> dict[str, Any] | None:
    """The delta of the task's latest event of one of ``kinds`` (events that name no
    tool) at or before ``seq``; None when there is none. One probe of the
    (task, kind, tool, seq) index per kind: with ``"kind" IN`` or without the
    tool named, SQLite walks the task's log back from ``seq`` instead (46 ms at
    200,000 events, against 0.007 ms)."""
    latest = (
        'SELECT "seq", "delta" FROM "task_events" WHERE "task_id" = ? AND "kind" = ?'
        ' AND "tool_name" IS NULL AND "seq" <= ? ORDER BY "seq" DESC LIMIT 1'
    )
    rows = await sql.fetch(
        connections.get("default"),
        " UNION ALL ".join(f"SELECT * FROM ({latest}) k{i}" for i in range(len(kinds))),
        [value for kind in kinds for value in (task_pk, kind.value, seq)],
    )
    if not rows:
        return None
    row = max(rows, key=lambda r: int(r["seq"]))
    kept: dict[str, Any] | None = sql.decode(TaskEvent, row, ("delta",))["delta"]
    return kept


async def lock_at(task_pk: int, seq: int) -> LockView | None:
    """The lease as the latest LOCK_ACQUIRED or LOCK_RELEASED at or before ``seq`` left
    it (renewals write no event)."""
    kinds = (TaskEventKind.LOCK_ACQUIRED, TaskEventKind.LOCK_RELEASED)
    return lock_in(await _latest_delta(task_pk, seq, kinds))


async def budget_at(task_pk: int, seq: int) -> BudgetView | None:
    """The task's budget as the latest TASK_CREATED or BUDGET_CHANGED at or before
    ``seq`` left it."""
    kinds = (TaskEventKind.TASK_CREATED, TaskEventKind.BUDGET_CHANGED)
    return budget_in(await _latest_delta(task_pk, seq, kinds))


async def task_at(head: TaskView, seq: int) -> TaskView:
    """The task ``head`` (as it stands) exactly as it stood just after event ``seq``."""
    if not 1 <= seq <= head.event_seq:
        raise InvalidInputError("seq", f"must be between 1 and {head.event_seq}")
    found = await sql.fetch(
        connections.get("default"),
        f'SELECT {sql.names(_AT_FIELDS)} FROM "task_events" WHERE "task_id" = ? AND "seq" = ?',
        [head.pk, seq],
    )
    if not found:  # a hole (migration 0016 fills those of earlier releases)
        raise InvalidInputError("seq", f"the task's log holds no event {seq}")
    event = TaskEvent(**sql.decode(TaskEvent, found[0], _AT_FIELDS))
    steps = await steps_at(head.pk, seq)
    lock = await lock_at(head.pk, seq)
    if lock is not None and lock.expires_at <= event.at:
        lock = None
    spent = sum((s.spend for s in steps), SpendView())
    budget = await budget_at(head.pk, seq)
    asked = head.interrupt_requested and await _asked_to_stop_by(head.pk, seq)
    return replace(  # what never changes comes from the task as it stands
        head,
        status=event.status,
        version=event.task_version,
        event_seq=seq,
        current_step=current_step(s.status for s in steps),
        total_steps=len(steps),
        updated_at=event.at,
        lock=lock,
        stalled=stalled_in(event.delta),
        steps=steps,
        tool_states=await tool_states_at(head.pk, head.id, seq),
        **spent_columns(spent),
        **budget_columns(budget),
        interrupt_requested=asked,
    )


async def _asked_to_stop_by(task_pk: int, seq: int) -> bool:
    """Whether the task had been asked to stop by event ``seq`` (its
    INTERRUPT_REQUESTED event is at or before it)."""
    found = await sql.fetch(
        connections.get("default"),
        'SELECT 1 FROM "task_events" WHERE "task_id" = ? AND "kind" = ? AND "seq" <= ? LIMIT 1',
        [task_pk, TaskEventKind.INTERRUPT_REQUESTED.value, seq],
    )
    return bool(found)


async def events(task: TaskRef | TaskView, after_seq: int, first: int) -> list[EventView]:
    """The task's events after ``after_seq``, oldest first, each with its delta."""
    return (await events_of([task], after_seq, first))[0]


_EVENT_FIELDS = (
    "id",
    "task_id",
    "seq",
    "task_version",
    "kind",
    "step_index",
    "tool_name",
    "at",
    "status",
    "delta",
    "actor",
    "note",
)


async def events_of(
    tasks: Sequence[TaskRef | TaskView], after_seq: int, first: int
) -> list[list[EventView]]:
    """``events`` of several tasks at once (a page of tasks that each show their
    log): four queries, however many tasks. At most ``MAX_PAGE`` tasks."""
    if not tasks or first <= 0:
        return [[] for _ in tasks]
    pks = [t.pk for t in tasks]
    marks = sql.marks(pks)
    found = await sql.fetch(
        connections.get("default"),
        'SELECT * FROM (SELECT "task_events".*, ROW_NUMBER() OVER'
        ' (PARTITION BY "task_id" ORDER BY "seq") AS "rank" FROM "task_events"'
        f' WHERE "task_id" IN ({marks}) AND "seq" > ?) AS "ranked"'
        ' WHERE "rank" <= ? ORDER BY "task_id", "seq"',
        [*pks, after_seq, first],
    )
    rows: dict[int, list[TaskEvent]] = defaultdict(list)
    for raw in found:
        row = TaskEvent(**sql.decode(TaskEvent, raw, _EVENT_FIELDS))
        rows[row.task_id].append(row)
    spans = {pk: (r[0].seq, r[-1].seq) for pk, r in rows.items()}
    if not spans:
        return [[] for _ in tasks]

    spans_sql = " OR ".join('("task_id" = ? AND "seq" BETWEEN ? AND ?)' for _ in spans)
    spans_params = [n for pk, (low, high) in spans.items() for n in (pk, low, high)]
    found_versions = await sql.fetch(
        connections.get("default"),
        f'SELECT {sql.names(_SPAN_FIELDS)} FROM "step_versions" WHERE {spans_sql}',
        spans_params,
    )
    versions = [sql.decode(StepVersion, row, _SPAN_FIELDS) for row in found_versions]

    def within(column: str) -> Q:
        """Rows of each task whose ``column`` lies in that task's span of seqs."""
        spans_of: list[dict[str, Any]] = [
            {"task_id": pk, f"{column}__gte": low, f"{column}__lte": high}
            for pk, (low, high) in spans.items()
        ]
        return Q(*(Q(**span) for span in spans_of), join_type=Q.OR)

    added = await Step.filter(within("created_seq"))
    fixed = {(s.task_id, s.position): s for s in added}
    wanted = {(v["task_id"], v["position"]) for v in versions} - fixed.keys()
    if wanted:
        by_task: dict[int, set[int]] = defaultdict(set)
        for pk, position in wanted:
            by_task[pk].add(position)
        where = Q(
            *(Q(task_id=pk, position__in=sorted(p)) for pk, p in by_task.items()),
            join_type=Q.OR,
        )
        for step in await Step.filter(where):
            fixed[(step.task_id, step.position)] = step
    changed: dict[tuple[int, int], dict[int, StepView]] = defaultdict(dict)
    for step in added:
        changed[step.task_id, step.created_seq][step.position] = _versioned(step, None)
    for version in versions:
        step = fixed[version["task_id"], version["position"]]
        changed[version["task_id"], version["seq"]][step.position] = _versioned(step, version)
    return [
        [
            stored(row, task, tuple(v for _, v in sorted(changed[task.pk, row.seq].items())))
            for row in rows.get(task.pk, [])
        ]
        for task in tasks
    ]
