"""Reads: one session or task, newest-first pages of them, and a task's events."""

from __future__ import annotations

import base64
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tortoise import connections
from tortoise.expressions import F
from tortoise.queryset import QuerySet

from runstate.basics.enums import SessionStatus, TaskStatus
from runstate.models import ID_LENGTH, Session, Task
from runstate.services.domain import validation
from runstate.services.domain.conditions import (
    GRAPH_THREAD_SQL,
    WORKING,
    expired_session,
    stalled,
)
from runstate.services.domain.errors import InvalidInputError, NotFoundError, SessionExpiredError
from runstate.services.domain.views import Page, SessionView, TaskView
from runstate.services.read import history
from runstate.services.read.convert import is_expired, session_view, task_view
from runstate.storage import sql
from runstate.storage.clock import utcnow


async def get_session(user_id: str, session_id: str) -> SessionView:
    """The caller's live session; an expired one answers SessionExpired from then on."""
    validation.known_id(session_id, "session")
    row = await Session.get_or_none(user_id=user_id, public_id=session_id)
    if row is None:
        raise NotFoundError("session", session_id)
    now = utcnow()
    if is_expired(row, now):
        await mark_expired(row.id)
        raise SessionExpiredError(session_id)
    return session_view(row, now)


async def mark_expired(session_pk: int) -> None:
    """Record that a session has expired; it never comes back to life."""
    await (
        Session.filter(id=session_pk)
        .exclude(status=SessionStatus.EXPIRED)
        .update(status=SessionStatus.EXPIRED, version=F("version") + 1)
    )


M = TypeVar("M", Session, Task)


def encode_cursor(pk: int) -> str:
    """An opaque cursor that resumes a newest-first listing after row ``pk``."""
    return base64.urlsafe_b64encode(f"after:{pk}".encode()).decode()


def decode_cursor(cursor: str | None) -> int | None:
    """The row id a cursor stands for; InvalidInput for anything not made by us."""
    if cursor is None:
        return None
    try:
        prefix, _, pk = base64.urlsafe_b64decode(cursor.encode()).decode().partition(":")
        if prefix == "after":
            return int(pk)
    except ValueError:
        pass
    raise InvalidInputError("after", "not a cursor from this listing")


async def get_task(user_id: str, task_id: str) -> TaskView:
    """The caller's task; a task in an expired session answers SessionExpired."""
    validation.known_id(task_id, "task")
    row = await Task.get_or_none(user_id=user_id, public_id=task_id).select_related("session")
    if row is None:
        raise NotFoundError("task", task_id)
    now = utcnow()
    if is_expired(row.session, now):
        await mark_expired(row.session_id)
        raise SessionExpiredError(row.session.public_id)
    return task_view(row, row.session.public_id, now)


@dataclass(frozen=True)
class TaskSize:
    """What a task holds, as a read's cost estimate needs it (``schema.cost``)."""

    stored_bytes: int
    steps: int
    tool_states: int
    events: int


_SIZES = (
    'SELECT t."public_id", t."stored_bytes", t."total_steps", t."event_seq",'
    ' (SELECT COUNT(*) FROM "tool_states" s WHERE s."task_id" = t."id") AS "tools"'
    ' FROM "tasks" t WHERE t."user_id" = ? AND t."public_id" IN ({})'
)


async def task_sizes(user_id: str, task_ids: Collection[str]) -> dict[str, TaskSize]:
    """The sizes of those of ``task_ids`` the user has, by id: one indexed statement
    (the tasks, their tool states counted), in plain SQL: through the ORM, with a
    GROUP BY, an estimate with its read took 1.1 ms in process, 0.36 ms so."""
    ids = [i for i in task_ids if len(i) <= ID_LENGTH]
    found: dict[str, TaskSize] = {}
    for chunk in sql.chunks(ids):
        marks = sql.marks(chunk)
        rows = await sql.fetch(connections.get("default"), _SIZES.format(marks), [user_id, *chunk])
        for r in rows:
            found[r["public_id"]] = TaskSize(
                int(r["stored_bytes"]), r["total_steps"], int(r["tools"]), r["event_seq"]
            )
    return found


async def sessions_by_pk(pks: Sequence[int]) -> list[SessionView]:
    """The sessions of these row ids, as they stand (EXPIRED included), in order."""
    rows = {r.id: r for r in await Session.filter(id__in=list(set(pks)))}
    now = utcnow()
    return [session_view(rows[pk], now) for pk in pks]


async def list_sessions(
    user_id: str, *, status: SessionStatus | None, first: int, after: str | None
) -> Page[SessionView]:
    """The caller's sessions, newest first, by effective status (expiry counted)."""
    now = utcnow()
    query = Session.filter(user_id=user_id)
    if status is SessionStatus.EXPIRED:
        query = query.filter(expired_session(now))
    elif status is not None:
        query = query.filter(~expired_session(now), status=status)
    rows, has_next = await _page(query, first, after)
    return Page(
        items=tuple(session_view(r, now) for r in rows),
        cursors=tuple(encode_cursor(r.id) for r in rows),
        has_next_page=has_next,
    )


async def list_tasks(
    user_id: str,
    *,
    session_id: str | None = None,
    status: TaskStatus | None,
    stalled_only: bool | None = None,
    first: int,
    after: str | None,
) -> Page[TaskView]:
    """The caller's tasks, newest first, optionally of one session and one status,
    and only the stalled ones (``stalled_only=True``) or only the others (False).

    An unknown session id gives an empty page, exactly like a session with no tasks.
    """
    query = Task.filter(user_id=user_id)
    if session_id is not None:
        if len(session_id) > ID_LENGTH:  # no such session
            return Page(items=(), cursors=(), has_next_page=False)
        query = query.filter(session__public_id=session_id, session__user_id=user_id)
    now = utcnow()
    statuses: tuple[TaskStatus | None, ...] = (status,)
    if stalled_only is True:
        query = query.filter(stalled(now))
        statuses = WORKING if status is None else (status,)
    elif stalled_only is False:
        query = query.exclude(stalled(now))
    rows, has_next = await _page_by_status(query.select_related("session"), statuses, first, after)
    return Page(
        items=tuple(task_view(r, r.session.public_id, now) for r in rows),
        cursors=tuple(encode_cursor(r.id) for r in rows),
        has_next_page=has_next,
    )


_TASK_COLUMNS = sql.columns(Task)


async def session_task_pages(
    user_id: str,
    session_pks: Sequence[int],
    *,
    status: TaskStatus | None,
    first: int,
    after: str | None,
) -> list[Page[TaskView]]:
    """``list_tasks`` of several of the caller's sessions at once (a page of
    sessions that each show their tasks): one query, newest first in each."""
    validation.page_size(first)
    after_pk = decode_cursor(after)
    if not session_pks:
        return []
    marks = sql.marks(session_pks)
    where = [f't."user_id" = ? AND t."session_id" IN ({marks})']
    params: list[object] = [user_id, *session_pks]
    if status is not None:
        where.append('t."status" = ?')
        params.append(status.value)
    if after_pk is not None:
        where.append('t."id" < ?')
        params.append(after_pk)
    found = await sql.fetch(
        connections.get("default"),
        'SELECT * FROM (SELECT t.*, s."public_id" AS "session_public_id", ROW_NUMBER()'
        ' OVER (PARTITION BY t."session_id" ORDER BY t."id" DESC) AS "rank"'
        ' FROM "tasks" t JOIN "sessions" s ON s."id" = t."session_id"'
        f' WHERE {" AND ".join(where)}) AS "ranked" WHERE "rank" <= ?'
        ' ORDER BY "session_id", "id" DESC',
        [*params, first + 1],
    )
    rows: dict[int, list[tuple[Task, str]]] = defaultdict(list)
    for raw in found:
        row = Task(**sql.decode(Task, raw, _TASK_COLUMNS))
        rows[row.session_id].append((row, raw["session_public_id"]))
    now = utcnow()
    pages = []
    for pk in session_pks:
        held = rows.get(pk, [])[:first]
        pages.append(
            Page(
                items=tuple(task_view(r, public_id, now) for r, public_id in held),
                cursors=tuple(encode_cursor(r.id) for r, _ in held),
                has_next_page=len(rows.get(pk, [])) > first,
            )
        )
    return pages


async def graph_threads(pks: Sequence[int]) -> list[bool]:
    """Whether each task (by row id) is a LangGraph thread, in one query per
    ``sql.CHUNK`` of them."""
    found: set[int] = set()
    for chunk in sql.chunks(list(set(pks))):
        rows = await sql.fetch(
            connections.get("default"),
            f'SELECT "id" FROM "tasks" WHERE "id" IN ({sql.marks(chunk)}) AND {GRAPH_THREAD_SQL}',
            chunk,
        )
        found.update(row["id"] for row in rows)
    return [pk in found for pk in pks]


async def get_task_at(user_id: str, task_id: str, seq: int) -> TaskView:
    """The caller's task exactly as it stood just after event ``seq``."""
    return await history.task_at(await get_task(user_id, task_id), seq)


async def _page_by_status(
    query: QuerySet[Task], statuses: Sequence[TaskStatus | None], first: int, after: str | None
) -> tuple[list[Task], bool]:
    """A newest-first page of tasks in any of ``statuses`` (None: any status), one
    query per status, merged. Each walks the (user, status, id) index from the newest
    task of its status; one ``status IN (...)`` ordered by id would walk every task of
    the user instead, finished ones and all (SQLite picks that plan).
    """
    pages = [
        await _page(query if s is None else query.filter(status=s), first, after) for s in statuses
    ]
    if len(pages) == 1:
        return pages[0]
    rows = sorted((r for page, _ in pages for r in page), key=lambda r: r.id, reverse=True)
    return rows[:first], len(rows) > first or any(more for _, more in pages)


async def _page(query: QuerySet[M], first: int, after: str | None) -> tuple[list[M], bool]:
    validation.page_size(first)
    after_pk = decode_cursor(after)
    if after_pk is not None:
        query = query.filter(id__lt=after_pk)
    rows = list(await query.order_by("-id").limit(first + 1))
    return rows[:first], len(rows) > first
