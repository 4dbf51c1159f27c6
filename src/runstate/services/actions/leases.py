"""Task leases with fencing tokens: one worker drives a task at a time.

Each operation is one conditional UPDATE of the task row, judged against one
clock (this server's ``utcnow``, in the statement itself), never "write, then
read back to see who won". ``lock_token`` only grows: a grant sets it to the
previous value + 1, so a holder whose lease lapsed carries a stale token.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from tortoise.expressions import RawSQL
from tortoise.queryset import QuerySet

from runstate.basics.enums import TaskEventKind, TaskStatus
from runstate.models import RUN_KIND_LENGTH, USER_LENGTH, Task
from runstate.services.actions import stops
from runstate.services.domain import spend, validation
from runstate.services.domain.conditions import (
    GRAPH_THREAD_SQL,
    NOT_ITS_TURN_SQL,
    WORKING,
    at,
    no_live_lease,
    no_live_lease_sql,
    of_kind,
    of_kind_sql,
    open_session,
    open_session_sql,
    stalled,
    stalled_sql,
)
from runstate.services.domain.errors import (
    DomainError,
    InvalidInputError,
    LockNotHeldError,
    NotFoundError,
)
from runstate.services.domain.views import LockView, TaskView, Written
from runstate.services.write.engine import (
    Change,
    Draft,
    Guard,
    lease_refusal,
    write_selected,
    write_task,
)
from runstate.services.write.house import House
from runstate.storage import sql
from runstate.storage.clock import utcnow

MAX_LEASE_SECONDS = 24 * 3600
"""The longest lease a holder may take or renew (``ttlSeconds``): a day."""


def checked(holder_id: str, ttl_seconds: int | None = None) -> None:
    """InvalidInput unless ``holder_id`` and ``ttl_seconds`` can make a lease."""
    if not holder_id.strip() or len(holder_id) > USER_LENGTH:
        raise InvalidInputError("holderId", f"must be 1 to {USER_LENGTH} characters")
    validation.storable(holder_id, "holderId")
    if ttl_seconds is not None and not 1 <= ttl_seconds <= MAX_LEASE_SECONDS:
        raise InvalidInputError("ttlSeconds", f"must be between 1 and {MAX_LEASE_SECONDS}")


def run_kind(run_of: str | None) -> str | None:
    """``run_of`` (the framework whose runs a task holds, or a claim asks for), or
    InvalidInput on ``runOf`` unless it is 1 to ``RUN_KIND_LENGTH`` characters, not
    blank, of storable text; None (an ordinary task) as it is."""
    if run_of is not None and (not run_of.strip() or len(run_of) > RUN_KIND_LENGTH):
        raise InvalidInputError("runOf", f"must be 1 to {RUN_KIND_LENGTH} characters")
    return None if run_of is None else validation.storable(run_of, "runOf")


def _live_for(holder_id: str, now: datetime) -> sql.Fragment:
    """The holder's lease is live."""
    return '"lock_holder" = ? AND "lock_expires_at" > ?', [holder_id, at(now)]


def _held_elsewhere(task: Task, now: datetime) -> DomainError | None:
    return lease_refusal(task, None, now)


def _not_held(task: Task, now: datetime) -> DomainError:
    return LockNotHeldError()


async def _heartbeat(draft: Draft) -> None:
    return None


async def _granted(draft: Draft) -> Change:
    return Change(TaskEventKind.LOCK_ACQUIRED)


async def _released(draft: Draft) -> Change:
    draft.stop_if_interrupted()  # its agent let go of a task asked to stop
    return Change(TaskEventKind.LOCK_RELEASED)


def _lock(written: Written[TaskView]) -> Written[LockView]:
    if written.value.lock is None:  # the write just made it live
        raise LockNotHeldError()
    return written.giving(written.value.lock)


async def acquire_task_lock(
    house: House, user_id: str, task_id: str, holder_id: str, ttl_seconds: int
) -> Written[LockView]:
    """A lease for ``holder_id``: its own live lease is extended (same token, no event);
    a free task is granted with the next token (LOCK_ACQUIRED); else LockHeld."""
    checked(holder_id, ttl_seconds)

    def until(now: datetime) -> sql.Fragment:
        return sql.assignments(Task, {"lock_expires_at": now + timedelta(seconds=ttl_seconds)})

    extend = Guard(where=lambda now: _live_for(holder_id, now), sets=until, refusal=_not_held)
    try:
        return _lock(await write_task(house, user_id, task_id, _heartbeat, extend))
    except LockNotHeldError:
        pass  # not this holder's live lease: try a grant

    guard = Guard(
        where=no_live_lease_sql, sets=_grant(holder_id, ttl_seconds), refusal=_held_elsewhere
    )
    return _lock(await write_task(house, user_id, task_id, _granted, guard))


async def renew_task_lock(
    house: House, user_id: str, task_id: str, holder_id: str, ttl_seconds: int
) -> Written[LockView]:
    """Extend the holder's live lease (a heartbeat: no event); else LockNotHeld."""
    checked(holder_id, ttl_seconds)
    guard = Guard(
        where=lambda now: _live_for(holder_id, now),
        sets=lambda now: sql.assignments(
            Task, {"lock_expires_at": now + timedelta(seconds=ttl_seconds)}
        ),
        refusal=_not_held,
    )
    return _lock(await write_task(house, user_id, task_id, _heartbeat, guard))


async def release_task_lock(
    house: House, user_id: str, task_id: str, holder_id: str
) -> Written[TaskView]:
    """End the holder's live lease now (LOCK_RELEASED); else LockNotHeld.

    The token stays as it was: the next grant still gets a larger one. Releasing is
    cleanup, so it works in an expired session too.
    """
    guard = Guard(
        where=lambda now: _live_for(holder_id, now),
        sets=lambda now: sql.assignments(
            Task,
            {"lock_holder": None, "lock_expires_at": None, "updated_at": now},
            increments=("event_seq",),
        ),
        refusal=_not_held,
        touch_session=False,
    )
    return await write_task(house, user_id, task_id, _released, guard)


async def claim_task(
    house: House,
    user_id: str,
    holder_id: str,
    ttl_seconds: int,
    *,
    session_id: str | None = None,
    stalled_for_seconds: int = 0,
    run_of: str | None = None,
) -> Written[LockView]:
    """Lease the caller's oldest claimable task (of one session, if given) to
    ``holder_id``, with the next fencing token (LOCK_ACQUIRED); NotFound when no
    task needs a worker. A stalled task counts only once its lease lapsed
    ``stalled_for_seconds`` ago. Only tasks of one kind are claimable: without
    ``run_of`` ordinary tasks, with it the runs of that framework
    (``Task.run_of``), never the other.

    The oldest candidate is picked first (``_oldest_claimable``), then one
    conditional UPDATE leases it, checking again in its WHERE that it is still
    claimable, so two workers never get the same task. A claim that lost its pick
    to another (on PostgreSQL it waited for the other's row lock; across SQLite
    processes the other committed in between) matches nothing and picks again:
    each round some claim wins, so the rounds are bounded by the claims racing.

    First, tasks of the caller asked to stop whose agent's lease lapsed are ended
    (``stops.end_lapsed``), so that the submission that displaced one is
    claimable as soon as that lease lapses, not at the next sweep.
    """
    checked(holder_id, ttl_seconds)
    run_kind(run_of)
    if session_id is not None:
        validation.known_id(session_id, "session")
    if not 0 <= stalled_for_seconds <= MAX_STALLED_FOR:
        raise InvalidInputError("stalledForSeconds", f"must be between 0 and {MAX_STALLED_FOR}")
    grace = timedelta(seconds=stalled_for_seconds)
    ended = await stops.end_lapsed(house, user_id, session_id)

    async def taken() -> DomainError | None:
        raise _Taken

    for _ in range(CLAIM_ATTEMPTS):
        pick = await _oldest_claimable(user_id, session_id, run_of, utcnow(), grace)
        if pick is None:
            house.publish(ended.events, ended.wakes)
            raise NotFoundError("task", "(none to claim)")

        guard = Guard(
            where=lambda now: _still_claimable(now, grace, run_of),
            sets=_grant(holder_id, ttl_seconds),
            refusal=_not_held,
        )
        select = '"user_id" = ? AND "id" = ?', [user_id, pick]
        try:
            view = await write_selected(house, select, _granted, guard, taken, attempts=1)
        except _Taken:
            continue
        return _lock(view).after(ended)
    raise RuntimeError("a claim kept losing its pick with tasks left to claim")


def _grant(holder_id: str, ttl_seconds: int) -> Callable[[datetime], sql.Fragment]:
    """The SET list of a new lease: the next fencing token, an event."""

    def grant(now: datetime) -> sql.Fragment:
        values = {
            "lock_expires_at": now + timedelta(seconds=ttl_seconds),
            "lock_holder": holder_id,
            "updated_at": now,
        }
        return sql.assignments(Task, values, increments=("lock_token", "event_seq"))

    return grant


def _still_claimable(now: datetime, grace: timedelta, run_of: str | None) -> sql.Fragment:
    """A task a worker may claim, as SQL on the task row: PLANNED with no live
    lease, or stalled since ``grace`` ago at least, in an open session
    (``conditions``), of the kind the claim asks for (a run of the framework
    ``run_of``, or with None an ordinary task: a run is driven by its framework's
    loader, never by a worker of the SDK), no LangGraph thread (its graph runs it,
    never a worker of the SDK: a crashed graph's thread is stalled, and only a
    graph process can go on with it), and neither it nor its session over
    budget (``spend.OVER_BUDGET_SQL``), nor a task of a session's ledger whose
    turn it is not (``NOT_ITS_TURN_SQL``). What the claim's UPDATE checks again
    of the task it picked."""
    live, live_params = no_live_lease_sql(now)
    gone, gone_params = stalled_sql(now - grace)
    opened, opened_params = open_session_sql(now, "s")
    kind, kind_params = of_kind_sql(run_of)
    return (
        f'(("status" = ? AND ({live})) OR ({gone})) AND {kind} AND EXISTS (SELECT 1 FROM'
        f' "sessions" s WHERE s."id" = "tasks"."session_id" AND {opened})'
        f" AND NOT {GRAPH_THREAD_SQL} AND NOT {spend.OVER_BUDGET_SQL} AND NOT {NOT_ITS_TURN_SQL}",
        [TaskStatus.PLANNED.value, *live_params, *gone_params, *kind_params, *opened_params],
    )


class _Taken(Exception):  # noqa: N818 - a signal, not an error
    """Another claim leased the picked task first: pick again."""


def _candidates(user_id: str, session_id: str | None, now: datetime) -> QuerySet[Task]:
    """The caller's tasks in open sessions (of one session, if given)."""
    query = Task.filter(open_session(now, via="session__"), user_id=user_id)
    return query if session_id is None else query.filter(session__public_id=session_id)


async def _oldest_claimable(
    user_id: str, session_id: str | None, run_of: str | None, now: datetime, grace: timedelta
) -> int | None:
    """The id of the oldest claimable task of the kind ``run_of`` names: the oldest
    of one lookup per status (PLANNED with no live lease, RUNNING and WAITING_TOOL
    stalled), each walking an index of the user's tasks in that status from its
    oldest. One lookup for all three would walk every task of the user in id
    order, finished ones and all (SQLite picks that plan), so a claim would cost
    more the longer the user's history. A claim for runs walks the (user, kind,
    status, id) index, so it never walks past the user's ordinary working tasks
    (``test_write_cost`` reads SQLite's plans); an ordinary claim may walk (user,
    status, id) past the few runs in that status."""
    found: list[int] = []
    for status in (TaskStatus.PLANNED, *WORKING):
        condition = no_live_lease(now) if status is TaskStatus.PLANNED else stalled(now - grace)
        oldest = _candidates(user_id, session_id, now).filter(
            condition, of_kind(run_of), status=status
        )
        oldest = oldest.annotate(graph=RawSQL(GRAPH_THREAD_SQL)).filter(graph=False)
        oldest = oldest.annotate(over=RawSQL(spend.OVER_BUDGET_SQL)).filter(over=False)
        oldest = oldest.annotate(waits=RawSQL(NOT_ITS_TURN_SQL)).filter(waits=False)
        found += [row["id"] for row in await oldest.order_by("id").limit(1).values("id")]
    return min(found, default=None)


MAX_STALLED_FOR = 3600
"""The longest ``stalledForSeconds`` a claim may ask: an hour."""

CLAIM_ATTEMPTS = 1000
"""Rounds a claim may lose to others while tasks remain: far more than workers race."""
