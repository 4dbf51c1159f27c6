"""Session writes: start, update, delete, and marking expiry."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tortoise.exceptions import IntegrityError
from tortoise.expressions import F
from tortoise.transactions import in_transaction

from runstate.enums import SessionStatus
from runstate.models import Session, Task, box
from runstate.services import validation
from runstate.services.clock import utcnow
from runstate.services.errors import (
    InvalidInputError,
    NotFoundError,
    SessionExpiredError,
    UnmatchedWriteError,
    VersionConflictError,
)
from runstate.services.loading import is_expired, session_view
from runstate.services.rules import check_session_move
from runstate.services.views import SessionView


async def start_session(
    user_id: str,
    *,
    default_ttl: int,
    session_id: str | None = None,
    ttl_seconds: int | None = None,
    metadata: Any = None,
) -> SessionView:
    """Start a session; starting a client-chosen id again returns the stored one unchanged."""
    public_id = validation.object_id(session_id)
    ttl = validation.ttl_seconds(ttl_seconds, default_ttl)
    validation.json_payload(metadata, "metadata")
    now = utcnow()
    try:
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
        )
    except IntegrityError:
        return await get_session(user_id, public_id)
    return session_view(row, now)


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


async def update_session(
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
    validation.json_payload(metadata, "metadata")
    delta = validation.non_negative(message_count_delta or 0, "messageCountDelta")
    room = MAX_COUNT - delta
    now = utcnow()
    changes: dict[str, Any] = {
        "version": F("version") + 1,
        "last_active_at": now,
        "message_count": F("message_count") + delta,
    }
    if set_metadata:
        changes["metadata"] = box(metadata)
    try:
        async with in_transaction() as conn:
            matched = (
                await Session.filter(
                    user_id=user_id,
                    public_id=session_id,
                    version=expected_version,
                    expires_at__gt=now,
                    message_count__lte=room,
                )
                .exclude(status=SessionStatus.EXPIRED)
                .using_db(conn)
                .update(**changes)
            )
            if not matched:
                raise UnmatchedWriteError
            row = await Session.filter(user_id=user_id, public_id=session_id).using_db(conn).get()
            if status is not None:
                check_session_move(row.status, status)
                row.status = status
            row.expires_at = now + timedelta(seconds=row.ttl_seconds)
            await row.save(using_db=conn, update_fields=["status", "expires_at"])
    except UnmatchedWriteError:
        current = await get_session(user_id, session_id)
        if current.version == expected_version and current.message_count > room:
            raise InvalidInputError(
                "messageCountDelta", f"would take messageCount past {MAX_COUNT}"
            ) from None
        raise VersionConflictError(expected_version, current.version) from None
    return session_view(row, now)


MAX_COUNT = 2**31 - 1
"""GraphQL's Int: a count past it could not be answered."""


async def delete_session(user_id: str, session_id: str) -> str:
    """Delete a session and, by cascade, its tasks, steps, tool states and events.

    The session's task rows are locked first, in id order, then the session is
    deleted: the order every task write takes its locks in (its task, then its
    session's ``lastActiveAt``). Deleting the session first locked the session and
    then, by cascade, the tasks, and on PostgreSQL a write in between deadlocked
    with it. (SQLite has one writer at a time, and no row locks to order.)
    """
    validation.known_id(session_id, "session")
    async with in_transaction() as conn:
        row = await Session.filter(user_id=user_id, public_id=session_id).using_db(conn).first()
        if row is None:
            raise NotFoundError("session", session_id)
        await (
            Task.filter(session_id=row.id)
            .order_by("id")
            .select_for_update()
            .only("id")
            .using_db(conn)
        )
        deleted = await Session.filter(id=row.id).using_db(conn).delete()
    if not deleted:
        raise NotFoundError("session", session_id)
    return session_id
