"""Schedules: what the API asks (create, update, delete) and their fires.

A schedule keeps the next due time it has not fired (``next_fire_at``, computed
by ``domain.cron`` in its time zone). Every server process runs ``fire_forever``:
it reads the schedules due by the database's clock and fires each due time once.
Once is the database's doing, not a lock in memory: a fire is a submission
whose (schedule, due time) is unique, so a second process (or the same one after
a restart) firing the same due time finds it taken (``submissions.Fired``) and
writes nothing. A fire is admitted as any submission is, under the schedule's
policy; one that cannot run (REJECT and the session busy, the session over its
budget or expired) is kept as a SKIPPED submission with its reason.

A due time fired more than ``grace`` seconds late was missed (no server ran):
SKIP makes none of the missed ones up, RUN_ONCE makes them up with one fire.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tortoise.exceptions import IntegrityError
from tortoise.transactions import in_transaction

from runstate.basics.enums import AdmissionPolicy, MisfirePolicy, SubmissionStatus
from runstate.models import USER_LENGTH, Schedule, Session, Submission, box, unbox
from runstate.services.actions import stops, submissions
from runstate.services.domain import cron, quota, validation
from runstate.services.domain.errors import (
    DomainError,
    InvalidInputError,
    NotFoundError,
    VersionConflictError,
)
from runstate.services.domain.validation import StepPlan
from runstate.services.domain.views import ScheduleView, Written
from runstate.services.read import timetables as reads
from runstate.services.read.lookups import get_session
from runstate.services.write import ledger
from runstate.services.write.house import House
from runstate.storage import sql
from runstate.storage.clock import utcnow

log = logging.getLogger(__name__)

BATCH = 100
"""Due schedules read at once."""
IDLE_SECONDS = 1.0
"""The longest a firing loop sleeps: a schedule created on another process is
seen within it."""


@dataclass(frozen=True)
class Rules:
    """What a user's schedules may be (``RUNSTATE_MAX_SCHEDULES``,
    ``RUNSTATE_SCHEDULE_MIN_SECONDS``)."""

    max_schedules: int
    min_seconds: float


def _checked(expression: str, timezone: str, rules: Rules, now: datetime) -> cron.Cron:
    """The parsed expression, or InvalidInput on ``cron`` or ``timezone``; one
    whose due times come closer than ``rules.min_seconds`` is refused on ``cron``."""
    parsed = cron.parse(expression, timezone)
    gap = parsed.shortest_gap(now)
    if gap < timedelta(seconds=rules.min_seconds):
        raise InvalidInputError(
            "cron",
            f"fires every {gap.total_seconds():g} s at times; the shortest period allowed"
            f" is {rules.min_seconds:g} s (RUNSTATE_SCHEDULE_MIN_SECONDS)",
        )
    return parsed


def _plans(steps: Sequence[StepPlan]) -> list[dict[str, Any]]:
    return [{"action": p.action, "input": box(p.input), "idempotent": p.idempotent} for p in steps]


async def create_schedule(
    house: House,
    user_id: str,
    session_id: str,
    *,
    cron_expression: str,
    goal: str,
    steps: Sequence[StepPlan],
    rules: Rules,
    timezone: str = "UTC",
    input: Any = None,
    policy: AdmissionPolicy = AdmissionPolicy.ENQUEUE,
    misfire: MisfirePolicy = MisfirePolicy.SKIP,
    enabled: bool = True,
) -> Written[ScheduleView]:
    """A schedule firing a submission (``goal``, ``steps``, ``input``) into the
    session at each due time of ``cron_expression`` in ``timezone``. Refused when
    the user holds ``rules.max_schedules`` already (InvalidInput on ``sessionId``)."""
    now = utcnow()
    parsed = _checked(cron_expression, timezone, rules, now)
    house.limits.goal(goal)
    house.limits.step_plans(steps)
    house.limits.json_payload(input, "input")
    session = await get_session(user_id, session_id)  # NotFound, SessionExpired
    plans = _plans(steps)
    stored = quota.ROW_BYTES + quota.text_bytes(goal) + validation.json_size([plans, input])
    async with in_transaction() as conn:
        await sql.execute(  # a write first: the session's row, as every ledger change
            conn,
            'UPDATE "sessions" SET "stored_bytes" = "stored_bytes" + ? WHERE "id" = ?',
            [stored, session.pk],
        )
        held = await Schedule.filter(user_id=user_id).using_db(conn).count()
        if held >= rules.max_schedules:
            raise InvalidInputError(
                "sessionId",
                f"you hold {held} schedules, the most allowed (RUNSTATE_MAX_SCHEDULES)",
            )
        row = await Schedule.create(
            public_id=validation.object_id(None),
            user_id=user_id,
            session_id=session.pk,
            cron=parsed.expression,
            timezone=parsed.timezone,
            goal=goal,
            steps=plans,
            input=box(input),
            policy=policy,
            misfire=misfire,
            enabled=enabled,
            next_fire_at=parsed.next_after(now) if enabled else None,
            created_at=now,
            stored_bytes=stored,
            using_db=conn,
        )
        await quota.charge(conn, house.limits, user_id, stored, "steps")
    return Written(reads.view(row, session.id))


async def update_schedule(
    house: House,
    user_id: str,
    schedule_id: str,
    *,
    expected_version: int,
    rules: Rules,
    cron_expression: str | None = None,
    timezone: str | None = None,
    enabled: bool | None = None,
    policy: AdmissionPolicy | None = None,
    misfire: MisfirePolicy | None = None,
) -> Written[ScheduleView]:
    """Change or pause the schedule at ``expected_version`` (VersionConflict
    otherwise); its next due time is computed again from now when its expression,
    zone or pause changes."""
    del house  # the same parameters as every write: nothing of the house is needed
    row = await reads.stored(user_id, schedule_id)
    now = utcnow()
    expression = row.cron if cron_expression is None else cron_expression
    zone = row.timezone if timezone is None else timezone
    parsed = _checked(expression, zone, rules, now)
    on = row.enabled if enabled is None else enabled
    changes: dict[str, Any] = {
        "cron": parsed.expression,
        "timezone": parsed.timezone,
        "enabled": on,
        "policy": row.policy if policy is None else policy,
        "misfire": row.misfire if misfire is None else misfire,
    }
    timing = (parsed.expression, parsed.timezone, on) != (row.cron, row.timezone, row.enabled)
    if timing:
        changes["next_fire_at"] = parsed.next_after(now) if on else None
    matched = await Schedule.filter(id=row.id, version=expected_version).update(
        **changes, version=row.version + 1
    )
    if not matched:
        current = await reads.stored(user_id, schedule_id)
        raise VersionConflictError(expected_version, current.version)
    return Written(await reads.get_schedule(user_id, schedule_id))


async def delete_schedule(house: House, user_id: str, schedule_id: str) -> str:
    """Delete the schedule; its fires stay in the ledger. NotFound for anyone else's."""
    del house  # the same parameters as every write: nothing of the house is needed
    row = await reads.stored(user_id, schedule_id)
    async with in_transaction() as conn:
        gone = await quota.delete_counted(conn, Schedule.filter(id=row.id))
        if not gone:
            raise NotFoundError("schedule", schedule_id)
        await sql.execute(
            conn,
            'UPDATE "sessions" SET "stored_bytes" = "stored_bytes" - ? WHERE "id" = ?',
            [row.stored_bytes, row.session_id],
        )
        await quota.release(conn, quota.add_up(gone))
    return schedule_id


async def fire_due(house: House, grace: float, batch: int = BATCH) -> datetime | None:
    """Fire the schedules due now (by the database's clock, ``batch`` of the
    earliest at most), each once, and end the tasks asked to stop whose agent's
    lease lapsed (``stops.end_lapsed``): the next due time of the enabled
    schedules left (None: none). The batch is taken in a random order, and a
    schedule another process fired meanwhile is passed over before any write:
    two processes rarely try one due time, and when they do the unique key
    refuses the second (``submissions.Fired``)."""
    ended = await stops.end_lapsed(house, None)
    house.publish(ended.events, ended.wakes)
    now = utcnow()
    due = (
        await Schedule.filter(enabled=True, next_fire_at__lte=now)
        .order_by("next_fire_at")
        .limit(batch)
    )
    random.shuffle(due)  # processes reading one batch mostly take different ones first
    for row in due:
        if not await Schedule.exists(id=row.id, next_fire_at=row.next_fire_at):
            continue  # another process fired it meanwhile
        try:
            await _fire(house, row, now, timedelta(seconds=grace))
        except DomainError as error:  # a schedule stored before a rule tightened
            log.warning("schedule %s not fired: %s", row.public_id, error.message)
    upcoming = (
        await Schedule.filter(enabled=True, next_fire_at__isnull=False)
        .order_by("next_fire_at")
        .first()
        .values_list("next_fire_at", flat=True)
    )
    return upcoming if isinstance(upcoming, datetime) else None


async def _fire(house: House, row: Schedule, now: datetime, grace: timedelta) -> None:
    """Fire ``row``'s due time; after downtime, what its misfire policy makes of
    the times missed (RUN_ONCE: one fire for them all, at the first one missed)
    and the latest due time if it is still on time. Then move ``next_fire_at``
    past what was handled."""
    assert row.next_fire_at is not None
    parsed = cron.parse(row.cron, row.timezone)
    due = row.next_fire_at
    handled = due
    if now - due <= grace:
        await _submit(house, row, due, None)
    else:  # missed while no server ran
        latest = parsed.latest_at_or_before(now) or due
        if row.misfire is MisfirePolicy.RUN_ONCE:
            missed = f"made up for the due times missed since {due.isoformat()}"
            await _submit(house, row, due, missed)
        if latest != due and now - latest <= grace:
            await _submit(house, row, latest, None)
        handled = latest
    await Schedule.filter(id=row.id, next_fire_at=row.next_fire_at).update(
        next_fire_at=parsed.next_after(handled), last_fire_at=handled
    )


async def _submit(house: House, row: Schedule, at: datetime, note: str | None) -> None:
    """Admit the fire of ``row`` for due time ``at``; kept SKIPPED with the reason
    when it cannot run; nothing when that due time was fired already."""
    session = await Session.get(id=row.session_id).values("public_id")
    actor = f"schedule:{row.public_id}"[: USER_LENGTH + 16]
    plans = [StepPlan(p.action, p.input, p.idempotent) for p in reads.plans(row)]
    try:
        written = await submissions.admit(
            house,
            row.user_id,
            session["public_id"],
            goal=row.goal,
            steps=plans,
            input=unbox(row.input),
            policy=row.policy,
            budget=None,
            actor=actor,
            fire=(row.id, at),
            reason=note,
        )
    except submissions.Fired:
        return
    except DomainError as refused:
        await _skipped(house, row, at, actor, refused.message)
        return
    house.publish(written.events, written.wakes)


async def _skipped(house: House, row: Schedule, at: datetime, actor: str, reason: str) -> None:
    """Keep a fire that could not run as a SKIPPED submission of the ledger."""
    now = utcnow()
    try:
        async with in_transaction() as conn:
            changed, seq = await ledger.admitting(conn, row.session_id, 0)
            await Submission.create(
                public_id=validation.object_id(None),
                user_id=row.user_id,
                session_id=row.session_id,
                seq=seq,
                input=row.input,
                policy=row.policy,
                status=SubmissionStatus.SKIPPED,
                reason=reason,
                actor=actor,
                schedule_id=row.id,
                scheduled_for=at,
                changed_seq=changed,
                created_at=now,
                updated_at=now,
                using_db=conn,
            )
    except IntegrityError:
        return  # that due time was fired (or skipped) already
    house.publish((), ledger.wakes(row.session_id))


async def fire_forever(house: House, grace: float) -> None:
    """Fire schedules as they fall due, until cancelled: sleeps until the next due
    time, ``IDLE_SECONDS`` at most."""
    while True:
        try:
            upcoming = await fire_due(house, grace)
        except Exception:  # a database outage: log it and try again
            log.exception("firing schedules failed")
            upcoming = None
        wait = IDLE_SECONDS
        if upcoming is not None:
            wait = min(wait, max(0.0, (upcoming - utcnow()).total_seconds()))
        await asyncio.sleep(wait)
