"""Turning stored rows into views, in as few queries as a page of results allows.

A view is read from its row by ``from_row``, led by the view's own fields: a field
added to a model and to its view needs no converter edited."""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any, TypeVar, cast

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.fields import JSONField
from tortoise.models import Model

from runstate.basics.enums import SessionStatus
from runstate.basics.makers import Maker, given_names, written
from runstate.models import Session, Step, Task, ToolState, box, unbox
from runstate.services.domain.conditions import is_stalled, lease_live, session_expired
from runstate.services.domain.views import LockView, SessionView, StepView, TaskView, ToolStateView
from runstate.storage import sql


def is_expired(row: Session, now: datetime) -> bool:
    """Past its expiry, or already marked EXPIRED (``conditions.session_expired``)."""
    return session_expired(row.status, row.expires_at, now)


V = TypeVar("V")

COLUMNS = {
    "pk": "id",
    "id": "public_id",
    "index": "position",
    "session_pk": "session_id",
    "submission_pk": "submission_id",
}
"""View fields that read a column of another name; every other field of a view reads
the model field of its own name."""


@functools.cache
def _plan(view: Any, model: Any) -> tuple[tuple[str, str, bool], ...]:
    """For each field of ``view`` that a ``model`` row holds: the field, its column,
    and whether the column keeps a client value boxed (a JSON column, ``box``).

    A foreign key's id column (``task_id``: a row id) is read only under a name of
    ``COLUMNS``, so a view's public id of the same name (``ToolStateView.task_id``)
    is never taken from it. Fields the row does not hold are the caller's to give.
    """
    meta = model._meta
    keys = {meta.fields_map[name].source_field or f"{name}_id" for name in meta.fk_fields}
    stored = set(sql.columns(model))
    plan = []
    for field in fields(view):
        column = COLUMNS.get(field.name, field.name)
        if column not in stored or (column in keys and field.name not in COLUMNS):
            continue
        plan.append((field.name, column, isinstance(meta.fields_map.get(column), JSONField)))
    return tuple(plan)


_READERS: dict[tuple[type, type, frozenset[str]], Maker] = {}


def _reader(view: type, model: type[Model], given: frozenset[str]) -> Maker:
    """The function reading ``view`` from a ``model`` row with the fields ``given``
    (``makers.written``): one keyword per field, its column, unboxed where the
    column keeps a client value. Every step of a read goes through it (a 1,000-step
    ``taskAt`` builds 1,000 views), and a loop over the plan per row took 1.7x the
    time of the hand-written constructor it replaced."""
    key = (view, model, given)
    reader = _READERS.get(key)
    if reader is None:
        plan = _plan(cast(Hashable, view), cast(Hashable, model))
        parts = [
            f"{name}=unbox(source.{column})" if boxed else f"{name}=source.{column}"
            for name, column, boxed in plan
            if name not in given
        ]
        reader = _READERS[key] = written(view, parts, given, {"unbox": unbox})
    return reader


def from_row(view: type[V], row: Model, **given: Any) -> V:
    """The ``view`` of a stored ``row``, led by the view's fields: each read from its
    column (client values unboxed), those in ``given`` (computed, or from another
    row) as given. A view field neither stored nor given fails loudly here."""
    result: V = _reader(view, type(row), given_names(given))(row, given)
    return result


def to_row(model: type[Model], view: Any) -> dict[str, Any]:
    """The columns of ``model`` that a ``view`` holds, client values boxed: a copied
    row (a fork's steps) made from what a view shows."""
    return {
        column: box(getattr(view, name)) if boxed else getattr(view, name)
        for name, column, boxed in _plan(cast(Hashable, type(view)), cast(Hashable, model))
    }


def session_view(row: Session, now: datetime) -> SessionView:
    """The session as the caller sees it; expiry shows as EXPIRED before the sweep marks it."""
    status = SessionStatus.EXPIRED if is_expired(row, now) else row.status
    return from_row(SessionView, row, status=status)


def step_view(row: Step) -> StepView:
    """One step row as a view."""
    return from_row(StepView, row)


def tool_state_view(row: ToolState, task_id: str) -> ToolStateView:
    """One tool-state row as a view."""
    return from_row(ToolStateView, row, task_id=task_id)


def lock_view(row: Task, now: datetime) -> LockView | None:
    """The task's lease while it is live; an expired lease is as good as released."""
    expires = row.lock_expires_at
    if row.lock_holder is None or expires is None or not lease_live(expires, now):
        return None
    return LockView(
        task_id=row.public_id,
        holder_id=row.lock_holder,
        fencing_token=row.lock_token,
        expires_at=expires,
    )


def task_view(
    row: Task,
    session_id: str,
    now: datetime,
    *,
    steps: Sequence[Step] | None = None,
    tool_states: Sequence[ToolState] | None = None,
) -> TaskView:
    """One task row as a view, with its steps and tool states when they are given."""
    lock = lock_view(row, now)
    return from_row(
        TaskView,
        row,
        session_id=session_id,
        lock=lock,
        stalled=is_stalled(row.status, row.lock_token, lock is not None),
        steps=None
        if steps is None
        else tuple(step_view(s) for s in sorted(steps, key=lambda s: s.position)),
        tool_states=None
        if tool_states is None
        else tuple(
            tool_state_view(t, row.public_id)
            for t in sorted(tool_states, key=lambda t: t.tool_name)
        ),
    )


async def task_views(
    rows: Sequence[Task], now: datetime, conn: BaseDBAsyncClient | None = None
) -> list[TaskView]:
    """Views of several tasks, loading their steps, tool states and session ids together."""
    if not rows:
        return []
    pks = [r.id for r in rows]
    steps: dict[int, list[Step]] = defaultdict(list)
    for step in await Step.filter(task_id__in=pks).using_db(conn):
        steps[step.task_id].append(step)
    tools: dict[int, list[ToolState]] = defaultdict(list)
    for tool in await ToolState.filter(task_id__in=pks).using_db(conn):
        tools[tool.task_id].append(tool)
    session_ids = dict(
        await Session.filter(id__in={r.session_id for r in rows})
        .using_db(conn)
        .values_list("id", "public_id")
    )
    return [
        task_view(r, session_ids[r.session_id], now, steps=steps[r.id], tool_states=tools[r.id])
        for r in rows
    ]
