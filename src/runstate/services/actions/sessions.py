"""Session writes: start, update, delete, and marking expiry."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.exceptions import IntegrityError
from tortoise.expressions import F, Q, Subquery
from tortoise.transactions import in_transaction

from runstate.basics.enums import SessionStatus
from runstate.models import Session, Task, box, unbox
from runstate.services.domain import quota, validation
from runstate.services.domain.conditions import expired_session
from runstate.services.domain.errors import (
    InvalidInputError,
    NotFoundError,
    UnmatchedWriteError,
    VersionConflictError,
)
from runstate.services.domain.moves import check_session_move
from runstate.services.domain.views import (
    BudgetView,
    SessionView,
    budget_change_columns,
    budget_columns,
)
from runstate.services.read.convert import session_view
from runstate.services.read.lookups import get_session
from runstate.services.write.house import House
from runstate.services.write.retry import retried
from runstate.storage.clock import utcnow


async def start_session(
    house: House,
    user_id: str,
    *,
    default_ttl: int,
    session_id: str | None = None,
    ttl_seconds: int | None = None,
    metadata: Any = None,
    budget: BudgetView | None = None,
) -> SessionView:
    """Start a session, with ``budget`` what its tasks may spend together (set by the
    caller, now: its ``budget_change``); starting a client-chosen id again returns
    the stored one unchanged."""
    public_id = validation.object_id(session_id)
    ttl = validation.ttl_seconds(ttl_seconds, default_ttl)
    house.limits.json_payload(metadata, "metadata")
    stored = quota.ROW_BYTES + validation.json_size(metadata)
    now = utcnow()
    try:
        async with in_transaction() as conn:
            row = await Session.create(
                public_id=public_id,
                user_id=user_id,
                status=SessionStatus.ACTIVE,
                version=1,
                message_count=0,
                ttl_seconds=ttl,
                metadata=box(metadata),
                created_at=now,
                last_active_at=now,
                expires_at=now + timedelta(seconds=ttl),
                stored_bytes=stored,
                **budget_columns(budget),
                **({} if budget is None else budget_change_columns(user_id, None, now)),
                using_db=conn,
            )
            await quota.charge(conn, house.limits, user_id, stored, "metadata")
    except IntegrityError:
        return await get_session(user_id, public_id)
    return session_view(row, now)


async def update_session(
    house: House,
    user_id: str,
    session_id: str,
    *,
    expected_version: int,
    status: SessionStatus | None = None,
    message_count_delta: int | None = None,
    metadata: Any = None,
    set_metadata: bool = False,
) -> SessionView:
    """Change a session's own fields if its version is still ``expected_version``."""
    validation.known_id(session_id, "session")
    house.limits.json_payload(metadata, "metadata")
    delta = validation.non_negative(message_count_delta or 0, "messageCountDelta")
    room = MAX_COUNT - delta
    now = utcnow()
    changes: dict[str, Any] = {
        "last_active_at": now,
        "message_count": F("message_count") + delta,
    }
    resized = 0
    if set_metadata:
        changes["metadata"] = box(metadata)
        # Read before the transaction (SQLite's write lock comes with its first
        # statement); the UPDATE below matches only this same version of the row.
        held = await (
            Session.filter(user_id=user_id, public_id=session_id, version=expected_version)
            .only("id", "metadata")
            .first()
        )
        before = 0 if held is None else validation.json_size(unbox(held.metadata))
        resized = validation.json_size(metadata) - before
        # By the difference: the count holds the conversation's items as well.
        changes["stored_bytes"] = F("stored_bytes") + resized
    try:
        async with in_transaction() as conn:
            row = await versioned(
                conn, user_id, session_id, expected_version, now, changes, message_count__lte=room
            )
            if status is not None:
                check_session_move(row.status, status)
                row.status = status
            row.expires_at = now + timedelta(seconds=row.ttl_seconds)
            await row.save(using_db=conn, update_fields=["status", "expires_at"])
            if resized:
                await quota.charge(conn, house.limits, user_id, resized, "metadata")
    except UnmatchedWriteError:
        current = await get_session(user_id, session_id)  # NotFound, SessionExpired
        if current.version == expected_version and current.message_count > room:
            raise InvalidInputError(
                "messageCountDelta", f"would take messageCount past {MAX_COUNT}"
            ) from None
        raise VersionConflictError(expected_version, current.version) from None
    return session_view(row, now)


async def versioned(
    conn: BaseDBAsyncClient,
    user_id: str,
    session_id: str,
    expected_version: int,
    now: datetime,
    changes: dict[str, Any],
    **also: Any,
) -> Session:
    """Apply ``changes`` to the caller's session if it is live and still at
    ``expected_version`` (and matches ``also``), its version growing by one, in
    one compare-and-swap UPDATE; the row as it then stands. Raises
    UnmatchedWriteError when nothing matched: the caller reads the session to say
    why (NotFound, SessionExpired, VersionConflict)."""
    matched = (
        await Session.filter(
            ~expired_session(now),
            user_id=user_id,
            public_id=session_id,
            version=expected_version,
            **also,
        )
        .using_db(conn)
        .update(**changes, version=F("version") + 1)
    )
    if not matched:
        raise UnmatchedWriteError
    return await Session.filter(user_id=user_id, public_id=session_id).using_db(conn).get()


MAX_COUNT = 2**31 - 1
"""GraphQL's Int: a count past it could not be answered."""


async def delete_session(user_id: str, session_id: str) -> str:
    """Delete a session and, by cascade, its tasks, steps, tool states and events;
    their bytes come off the user's quota."""
    validation.known_id(session_id, "session")
    select = Session.filter(user_id=user_id, public_id=session_id).values("id")
    deleted = await retried(lambda: remove_sessions(Subquery(select)))
    if not deleted:
        raise NotFoundError("session", session_id)
    return session_id


async def remove_sessions(ids: Subquery | list[int], *, still: Q | None = None) -> int:
    """Delete the sessions ``ids`` (those still matching ``still``) with everything
    below them, and take their bytes and spend off their users' counts; how many
    went.

    One transaction, in the order every task write takes its locks (its task, then
    its session, then the usage row): the tasks first, each returning what it held;
    then the sessions, locked, so that a task created meanwhile is waited for and
    deleted too; then the counts. Deleting a session first, with its tasks by
    cascade, took the locks the other way round, and on PostgreSQL a write in
    between deadlocked with it. The first statement writes, as SQLite needs when
    several processes share the file.
    """
    condition = Q(id__in=ids) if still is None else Q(id__in=ids) & still
    async with in_transaction() as conn:
        tasks = Task.filter(session_id__in=Subquery(Session.filter(condition).values("id")))
        freed = await quota.delete_counted(conn, tasks)
        await Session.filter(condition).select_for_update().only("id").using_db(conn)
        freed += await quota.delete_counted(conn, tasks)
        gone = await quota.delete_counted(conn, Session.filter(condition), spend=True)
        await quota.release(conn, quota.add_up(freed + gone), quota.spend_up(gone))
    return len(gone)
