"""Reading schedules: as views, one by id, a session's, a schedule's fires."""

from __future__ import annotations

from collections.abc import Sequence

from tortoise.backends.base.client import BaseDBAsyncClient

from runstate.models import Schedule, Session, Submission, unbox
from runstate.services.domain import validation
from runstate.services.domain.errors import NotFoundError
from runstate.services.domain.views import PlanView, ScheduleView, SubmissionView
from runstate.services.read.entries import views as submission_views
from runstate.services.read.lookups import get_session


async def views(
    rows: Sequence[Schedule], conn: BaseDBAsyncClient | None = None
) -> list[ScheduleView]:
    """Views of schedule rows, with their sessions' public ids read in one query."""
    if not rows:
        return []
    sessions = dict(
        await Session.filter(id__in={r.session_id for r in rows})
        .using_db(conn)
        .values_list("id", "public_id")
    )
    return [view(r, sessions[r.session_id]) for r in rows]


def plans(row: Schedule) -> tuple[PlanView, ...]:
    """The plan each of the schedule's fires gets, as stored (``steps``)."""
    stored = row.steps if isinstance(row.steps, list) else []
    return tuple(
        PlanView(p["action"], unbox(p.get("input")), bool(p.get("idempotent", True)))
        for p in stored
    )


def view(row: Schedule, session_id: str) -> ScheduleView:
    """One schedule row as a view."""
    return ScheduleView(
        pk=row.id,
        id=row.public_id,
        session_pk=row.session_id,
        session_id=session_id,
        version=row.version,
        cron=row.cron,
        timezone=row.timezone,
        goal=row.goal,
        steps=plans(row),
        input=unbox(row.input),
        policy=row.policy,
        misfire=row.misfire,
        enabled=row.enabled,
        next_fire_at=row.next_fire_at,
        last_fire_at=row.last_fire_at,
        created_at=row.created_at,
    )


async def stored(user_id: str, schedule_id: str) -> Schedule:
    """The caller's schedule row; NotFound for anyone else's."""
    validation.known_id(schedule_id, "schedule")
    row = await Schedule.get_or_none(user_id=user_id, public_id=schedule_id)
    if row is None:
        raise NotFoundError("schedule", schedule_id)
    return row


async def get_schedule(user_id: str, schedule_id: str) -> ScheduleView:
    """The caller's schedule ``schedule_id``; NotFound for anyone else's."""
    (found,) = await views([await stored(user_id, schedule_id)])
    return found


async def of_session(user_id: str, session_id: str) -> list[ScheduleView]:
    """The session's schedules, oldest first."""
    session = await get_session(user_id, session_id)
    return await views(await Schedule.filter(session_id=session.pk).order_by("id"))


async def fires(schedule_pk: int, first: int = 20) -> list[SubmissionView]:
    """The schedule's fires, newest first."""
    validation.page_size(first)
    rows = await Submission.filter(schedule_id=schedule_pk).order_by("-scheduled_for").limit(first)
    return await submission_views(rows)
