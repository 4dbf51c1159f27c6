"""A LangGraph thread's node runs as its task's steps, and its status following
the graph.

Each LangGraph task (one run of a node, ``task_key`` being LangGraph's task id)
is one step, named after its node, added when the saver first reports it
(``GraphNode`` maps the one to the other): RUNNING when the node starts, SUCCESS
with its writes summarised as output, FAILED with its error, back to PENDING with
``{"interrupt": [...]}`` as output when it stopped at ``interrupt()`` (LangGraph
runs it again, from the top, with the person's answer). Reports may come late or
twice: a step never moves back from where a later report put it.

The thread's task follows: RUNNING while nodes run, AWAITING_DECISION at an
interrupt, FAILED when a node or the run failed, COMPLETED when a run ended
(unless it ended at an interrupt). A LangGraph thread is never done for good (a new input, a
resume or a fork from an earlier checkpoint runs it again), so its next run
takes a COMPLETED or FAILED thread back to RUNNING; only a CANCELLED one refuses,
which stops the graph at its next report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runstate.basics.enums import (
    GraphNodeStatus,
    GraphRunEnd,
    StepStatus,
    TaskEventKind,
    TaskStatus,
)
from runstate.models import GRAPH_NAMESPACE_LENGTH, KEY_LENGTH, GraphNode, Step, box
from runstate.services.domain.errors import InvalidInputError, InvalidTransitionError
from runstate.services.domain.validation import ContentLimits, Report, storable
from runstate.services.domain.views import TaskView, Written
from runstate.services.read.history import AS_ADDED
from runstate.services.write.engine import (
    STEP_FIELDS,
    Apply,
    Change,
    Draft,
    versioned,
    write_task,
)
from runstate.services.write.group_commit import Unchanged
from runstate.services.write.house import House
from runstate.storage import sql

N = GraphNodeStatus
S = StepStatus


@dataclass(frozen=True)
class NodeRun:
    """What a saver reports of one LangGraph task: its node's name, the
    super-step it runs in (None: not known) and where it stands."""

    namespace: str
    task_key: str
    name: str
    status: GraphNodeStatus
    super_step: int | None = None
    output: Any = None
    error: str | None = None
    spend: Report | None = None
    """What the node's model calls spent (its end's report only)."""

    def checked(self, limits: ContentLimits, field: str) -> NodeRun:
        """The report, or InvalidInput naming ``field`` and what is wrong with it."""
        if len(self.namespace) > GRAPH_NAMESPACE_LENGTH:
            raise InvalidInputError(f"{field}.namespace", "is too long")
        storable(self.namespace, f"{field}.namespace")
        storable(self.task_key, f"{field}.graphTaskId")
        storable(self.name, f"{field}.name")
        if not self.task_key or len(self.task_key) > KEY_LENGTH:
            raise InvalidInputError(f"{field}.graphTaskId", f"must be 1 to {KEY_LENGTH} characters")
        if not self.name.strip() or len(self.name) > limits.action_chars:
            raise InvalidInputError(
                f"{field}.name", f"must be 1 to {limits.action_chars} characters"
            )
        if self.super_step is not None and self.super_step < -1:
            raise InvalidInputError(f"{field}.superStep", "must be -1 or more")
        limits.json_payload(self.output, f"{field}.output")
        if self.error is not None:
            limits.error_text(self.error, f"{field}.error")
        if self.status is N.FAILED and self.error is None:
            raise InvalidInputError(f"{field}.error", "a FAILED node needs its error")
        if self.spend is not None:
            self.spend.checked(f"{field}.spend")
        return self


EXPECTED = "next:"
"""How the key of a node expected to start (``expected``) begins: LangGraph's task
ids are hexadecimal or UUIDs, never this."""


def _expected_key(name: str) -> str:
    """The key of the node ``name``'s expected start, until its own report takes it."""
    return f"{EXPECTED}{name}"


def expected(
    limits: ContentLimits, namespace: str, metadata: Any, names: Sequence[str]
) -> list[NodeRun]:
    """The starts of the nodes a checkpoint's super-step runs next (``names``), each
    keyed ``next:<name>`` until the node's own report, under LangGraph's task id,
    takes its step (``record``). A node expected but never run (the graph stopped
    before it: ``interrupt_before``, an error) goes back to PENDING with the run's
    end, as any node left RUNNING does; a deferred node's report, super-steps later,
    still finds it by name."""
    step = metadata.get("step") if isinstance(metadata, dict) else None
    super_step = step + 1 if isinstance(step, int) and not isinstance(step, bool) else None
    return [
        NodeRun(namespace, _expected_key(name), name, N.RUNNING, super_step).checked(
            limits, f"nextNodes[{i}]"
        )
        for i, name in enumerate(names)
    ]


async def record(draft: Draft, runs: Sequence[NodeRun], held: Held | None = None) -> int | None:
    """Apply the reports to the draft's steps and status; the position of the
    first step they touched (None: none, a thread already at its step limit).
    A node's first report under its task id takes the step of its expected start
    (``expected``), if one waits. ``held``: the nodes ``lookup`` read for these
    runs (or more), when the write read them with other rows (None: read here).
    The node rows it adds or changes go with the write's tail (``Draft.tail``).
    Run inside ``write_thread(progress=True)``, which refuses a CANCELLED thread."""
    if held is None:
        held = found(draft, (await sql.stored_and_read(draft.conn, [], lookup(draft, runs)))[1])
    made: list[GraphNode] = []
    adopted: list[GraphNode] = []
    freed: set[tuple[str, str]] = set()  # the keys of the expected starts adopted
    touched: list[int] = []
    flagged: dict[int, bool] = {}
    for run in runs:
        node = held.get((run.namespace, run.task_key))
        if node is None and (node := _adopted(held, run)) is not None:
            adopted.append(node)
            freed.add((run.namespace, _expected_key(run.name)))
        if node is None:
            if draft.total >= draft.limits.steps:
                continue  # the plan is full: the graph goes on, unshown
            step = _added(draft, run)
            node = GraphNode(
                task_id=draft.task.id,
                namespace=run.namespace,
                task_key=run.task_key,
                position=step.position,
            )
            held[(run.namespace, run.task_key)] = node
            made.append(node)
        else:
            step = draft.steps[node.position]
        was = node.interrupted
        node.interrupted = _move(draft, step, run, node.interrupted)
        if node.id is not None and node.interrupted != was:
            flagged[node.id] = node.interrupted
        touched.append(step.position)
        draft.status = await _follow(draft, run, was)
    await _save(draft, made, adopted, freed, flagged)
    return min(touched, default=None)


async def _save(
    draft: Draft,
    made: Sequence[GraphNode],
    adopted: Sequence[GraphNode],
    freed: set[tuple[str, str]],
    flagged: dict[int, bool],
) -> None:
    """Save the nodes ``record`` added, adopted (an expected start now keyed by its
    task id) and flagged, with the write's tail (``Draft.tail``): one statement a
    row at most, since the tail runs as one statement on PostgreSQL, where two
    changes of one row leave either (an adopted node's flag goes with its
    adoption). ``freed``: the keys the adoptions free. When a new start takes one
    again (a node expected again in the super-step after the one it ran in: a
    loop), the adoptions run first, now: the parts of one PostgreSQL statement run
    together, and the insert would find the key still held."""
    adoptions: list[sql.Statement] = [
        (
            'UPDATE "graph_nodes" SET "task_key" = ?, "interrupted" = ? WHERE "id" = ?',
            [node.task_key, node.interrupted, node.id],
        )
        for node in adopted
    ]
    if any((node.namespace, node.task_key) in freed for node in made):
        await sql.run_all(draft.conn, adoptions)
    else:
        draft.tail += adoptions
    adopted_ids = {node.id for node in adopted}
    draft.tail += _saved(made, {i: v for i, v in flagged.items() if i not in adopted_ids})


def _saved(made: Sequence[GraphNode], flagged: dict[int, bool]) -> list[sql.Statement]:
    """The statements saving the nodes added and flagged (at an interrupt or no
    longer), those adopted left out."""
    statements: list[sql.Statement] = []
    if made:  # one small row per step, bounded as the steps are: not counted apart
        rows = [{f: getattr(n, f) for f in _NEW_FIELDS} for n in made]
        statements.append(sql.insert_rows(GraphNode, rows))
    for value in (True, False):
        ids = [i for i, v in flagged.items() if v is value]
        if ids:
            statements.append(
                (
                    f'UPDATE "graph_nodes" SET "interrupted" = ? WHERE "id" IN ({sql.marks(ids)})',
                    [value, *ids],
                )
            )
    return statements


_FIELDS = sql.columns(GraphNode)
_NEW_FIELDS = sql.columns(GraphNode, "id")

Held = dict[tuple[str, str], GraphNode]
"""Stored nodes by (namespace, task key)."""


def _adopted(held: Held, run: NodeRun) -> GraphNode | None:
    """The stored expected start of the run's node, keyed from now on by the run's
    task id (``record`` saves its row); None when none waits."""
    if run.task_key.startswith(EXPECTED):
        return None
    waiting = held.get((run.namespace, _expected_key(run.name)))
    if waiting is None or waiting.id is None:
        return None
    del held[(run.namespace, waiting.task_key)]
    waiting.task_key = run.task_key
    held[(run.namespace, run.task_key)] = waiting
    return waiting


def lookup(draft: Draft, runs: Sequence[NodeRun]) -> sql.Statement:
    """The read of the stored nodes the runs name, with the expected starts of
    their nodes, each with its step: one indexed read, its rows packed
    (``sql.stored_and_read``: a checkpoint reads them in the trip that stores its
    rows), which ``found`` takes."""
    keys = sorted({r.task_key for r in runs} | {_expected_key(r.name) for r in runs})
    packed = sql.array(draft.conn.capabilities.dialect, (_FIELDS, "g"), (STEP_FIELDS, "s"))
    return (
        f'SELECT {packed} AS "packed" FROM "graph_nodes" g LEFT JOIN "steps" s'
        ' ON s."task_id" = g."task_id" AND s."position" = g."position"'
        f' WHERE g."task_id" = ? AND g."task_key" IN ({sql.marks(keys)})',
        [draft.task.id, *keys],
    )


def found(draft: Draft, rows: Sequence[list[Any]]) -> Held:
    """The nodes ``lookup`` read (its rows, as ``sql.stored_and_read`` gives them),
    their steps put in the draft."""
    held: Held = {}
    width = len(_FIELDS)
    for values in rows:
        node = GraphNode(**sql.unpacked(GraphNode, values[:width], _FIELDS))
        held[(node.namespace, node.task_key)] = node
        step = sql.unpacked(Step, values[width:], STEP_FIELDS)
        if step["id"] is not None:  # the LEFT JOIN found it: a node always has its step
            draft.steps.setdefault(node.position, Step(task_id=draft.task.id, **step))
    return held


def _added(draft: Draft, run: NodeRun) -> Step:
    """A new PENDING step at the end of the plan for the run's node."""
    shown: dict[str, Any] = {}
    if run.super_step is not None:
        shown["superStep"] = run.super_step
    if run.namespace:
        shown["namespace"] = run.namespace
    step = Step(
        task_id=draft.task.id,
        position=draft.total,
        action=run.name,
        input=box(shown or None),
        idempotent=True,
        **AS_ADDED,
    )
    draft.added.append(step)
    return step


def _move(draft: Draft, step: Step, run: NodeRun, interrupted: bool) -> bool:
    """Move the run's step as its report says, never back from a later state;
    whether the node now waits at an interrupt."""
    old = step.status
    if run.status is N.RUNNING:
        if old in (S.PENDING, S.FAILED):
            draft.move_step(step, S.RUNNING, jump=True)
        return False
    if old is S.SUCCESS or (old is S.FAILED and run.status is not N.SUCCESS):
        return interrupted  # reported already, or late: it stands where it is
    if run.status is N.SUCCESS:
        draft.move_step(step, S.SUCCESS, jump=True)
        _set(draft, step, output=box(run.output))
        _spent(draft, step, run)
        return False
    if run.status is N.FAILED:
        draft.move_step(step, S.FAILED, jump=True)
        _set(draft, step, error=run.error)
        _spent(draft, step, run)
        return False
    if not interrupted:  # the first report of this interrupt: what the node spent
        _spent(draft, step, run)
    if old is S.PENDING and not interrupted:  # first seen at its interrupt: it ran
        draft.move_step(step, S.RUNNING)
    if step.status is S.RUNNING:
        draft.move_step(step, S.PENDING)
    _set(draft, step, output=box({"interrupt": run.output}))
    return True


def _spent(draft: Draft, step: Step, run: NodeRun) -> None:
    """Add what the node's run spent to its step: once, as the step reaches its
    end or its interrupt (a report sent again finds it there and adds nothing)."""
    if run.spend is not None:
        draft.spend(step, run.spend)


def _set(draft: Draft, step: Step, **values: Any) -> None:
    for name, value in values.items():
        setattr(step, name, value)
    if step.id is not None:
        draft.changed.add(step.position)


async def _follow(draft: Draft, run: NodeRun, was_interrupted: bool) -> TaskStatus:
    """The thread's status after one report (``was_interrupted``: the node waited
    at an interrupt before it)."""
    status = draft.status
    if run.status is N.FAILED:
        return TaskStatus.FAILED
    if run.status is N.INTERRUPTED:
        return TaskStatus.AWAITING_DECISION
    if run.status is N.RUNNING:
        return TaskStatus.RUNNING
    # A node's success moves a thread waiting on that very node (its resume),
    # else one that is not running (its next run, seen without node starts); a
    # parallel node finishing after another failed leaves the thread FAILED.
    if status in (TaskStatus.PLANNED, TaskStatus.COMPLETED):
        return TaskStatus.RUNNING
    if status is TaskStatus.AWAITING_DECISION and was_interrupted:
        return TaskStatus.AWAITING_DECISION if await _waiting(draft) else TaskStatus.RUNNING
    return status


async def _waiting(draft: Draft) -> bool:
    """Whether a node of the thread still waits at an interrupt (rows as stored,
    before this write's flags)."""
    rows = await sql.fetch(
        draft.conn,
        'SELECT COUNT(*) AS "n" FROM "graph_nodes" WHERE "task_id" = ? AND "interrupted" = ?',
        [draft.task.id, True],
    )
    return int(rows[0]["n"]) > 1


async def write_thread(
    house: House,
    user_id: str,
    task_id: str,
    apply: Apply,
    fencing_token: int | None,
    *,
    progress: bool = False,
) -> Written[TaskView]:
    """A write to a thread's task (``write_task``, the lease checked): the thread's
    status follows its graph alone, so its steps all finished never complete it
    (between two super-steps they are). A write of the graph's ``progress`` (a
    checkpoint, pending writes, node reports) is refused once a person cancelled
    the thread."""

    async def thread_apply(draft: Draft) -> Change | None:
        if progress and draft.status is TaskStatus.CANCELLED:
            raise InvalidTransitionError("task", draft.status, TaskStatus.RUNNING)
        if progress:
            await draft.refuse_interrupted()
        draft.complete_when_done = False
        return await apply(draft)

    return await write_task(house, user_id, task_id, thread_apply, versioned(None, fencing_token))


async def record_run(
    house: House,
    user_id: str,
    task_id: str,
    runs: Sequence[NodeRun],
    *,
    ended: GraphRunEnd | None = None,
    fencing_token: int | None = None,
) -> Written[TaskView]:
    """Record node runs (typically starts: STEP_STARTED) and, with ``ended``, the
    end of a run (TASK_STATUS_CHANGED when nothing else changed): a run that
    COMPLETED completes the thread unless a node waits at an interrupt, one that
    FAILED fails it. A node still RUNNING at the end did not finish (LangGraph
    cancelled it when another failed) and is PENDING again: the next run runs it."""
    checked = [r.checked(house.limits, f"nodes[{i}]") for i, r in enumerate(runs)]
    if not checked and ended is None:
        raise InvalidInputError("nodes", "give node runs, the run's end, or both")

    async def apply(draft: Draft) -> Change:
        before = draft.status
        first = await record(draft, checked) if checked else None
        if ended is not None:
            for step in await draft.with_status(S.RUNNING):
                draft.move_step(step, S.PENDING)
                first = step.position if first is None else min(first, step.position)
            draft.status = _ended(draft, ended)
        if first is None and draft.status is before:
            raise Unchanged
        if first is None:
            return Change(TaskEventKind.TASK_STATUS_CHANGED)
        return Change(TaskEventKind.STEP_STARTED, step_index=first)

    return await write_thread(house, user_id, task_id, apply, fencing_token, progress=True)


def _ended(draft: Draft, ended: GraphRunEnd) -> TaskStatus:
    """The thread's status once its run ended: a run ends at an interrupt too,
    and then the thread goes on waiting."""
    if ended is GraphRunEnd.FAILED:
        return TaskStatus.FAILED
    if draft.status is TaskStatus.AWAITING_DECISION:
        return draft.status
    return TaskStatus.COMPLETED
