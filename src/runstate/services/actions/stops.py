"""Stopping a task of a session's ledger that an INTERRUPT or ROLLBACK displaced.

``request`` flags the task (``interrupt_requested``, event INTERRUPT_REQUESTED):
from then on it starts no new work (``Draft.refuse_interrupted``). A task nobody
drives (no live lease) ends CANCELLED in that same write; one whose agent holds
a live lease ends when the agent finishes or fails the step it is in, or lets
the lease go (``Draft.stop_if_interrupted``), or, if the agent never comes back,
once its lease has lapsed (``end_lapsed``: when a worker claims, and in the
sweep). Each end is a task write, so the task's end ends its submission and
starts the next in the same transaction (``ledger.task_ended``).
"""

from __future__ import annotations

from datetime import datetime

from tortoise.expressions import Q, Subquery

from runstate.basics.enums import SubmissionStatus, TaskEventKind, TaskStatus
from runstate.models import Submission, Task
from runstate.services.domain.conditions import lease_live, no_live_lease, no_live_lease_sql
from runstate.services.domain.errors import DomainError
from runstate.services.domain.moves import FINAL_TASKS
from runstate.services.domain.views import Written
from runstate.services.write.engine import Apply, Change, Draft, Guard, write_selected
from runstate.services.write.house import House
from runstate.storage import sql
from runstate.storage.clock import utcnow

NOTHING: Written[None] = Written(None)

_UNFINISHED = ", ".join(f"'{s.value}'" for s in TaskStatus if s not in FINAL_TASKS)
_OPEN = f'"status" IN ({_UNFINISHED})'


class _Gone(Exception):  # noqa: N818 - a signal, not an error
    """The task was no longer there to stop (ended, or stopped by another)."""


async def _gone() -> DomainError | None:
    raise _Gone


def _bumped(now: datetime, **columns: object) -> sql.Fragment:
    return sql.assignments(
        Task, {"updated_at": now, **columns}, increments=("event_seq", "version")
    )


async def request(house: House, task_pk: int, note: str) -> Written[None]:
    """Ask the task ``task_pk`` to stop (``note`` says who asked); end it now when
    no agent holds a live lease on it. Its events (none when it had ended or was
    asked already) and the ledger's wake-up, to publish once committed."""

    async def apply(draft: Draft) -> Change:
        if not lease_live(draft.task.lock_expires_at, draft.now):
            draft.move_task(TaskStatus.CANCELLED, jump=True)
        return Change(TaskEventKind.INTERRUPT_REQUESTED, note=note)

    guard = Guard(
        where=lambda now: (f'NOT "interrupt_requested" AND {_OPEN}', []),
        sets=lambda now: _bumped(now, interrupt_requested=True),
        refusal=lambda task, now: None,
    )
    return await _stop(house, task_pk, apply, guard)


async def end_lapsed(
    house: House, user_id: str | None, session_id: str | None = None
) -> Written[None]:
    """End the caller's tasks that were asked to stop and whose agent's lease has
    lapsed (of one session, if given), so that what displaced them runs, and ask
    those whose submission was marked to stop but were never asked. Found
    through the ACTIVE submissions asked to stop (the index of a user's
    submissions by status), never by walking the user's tasks; with no user (the
    sweep), every user's. What they wrote, to publish once committed."""
    asked = Submission.filter(status=SubmissionStatus.ACTIVE, stop__isnull=False)
    if user_id is not None:
        asked = asked.filter(user_id=user_id)
    if session_id is not None:
        asked = asked.filter(session__public_id=session_id)
    now = utcnow()
    tasks = await (
        Task.filter(id__in=Subquery(asked.values("task_id")))
        .filter(Q(interrupt_requested=False) | no_live_lease(now))
        .values("id", "interrupt_requested")
    )
    ended = NOTHING
    for row in tasks:
        if row["interrupt_requested"]:
            ended = (await _end_one(house, int(row["id"]))).after(ended)
        else:  # its submission was marked, but the request's own write never ran
            ended = (await request(house, int(row["id"]), UNASKED)).after(ended)
    return ended


UNASKED = "asked to stop again: the request's own write had not committed"
"""The note of a stop requested on the way (``end_lapsed``): a process stopped
between marking a submission to stop and asking its task."""


async def _end_one(house: House, task_pk: int) -> Written[None]:
    async def apply(draft: Draft) -> Change:
        draft.move_task(TaskStatus.CANCELLED, jump=True)
        return Change(TaskEventKind.TASK_STATUS_CHANGED, note="its agent's lease lapsed")

    def where(now: datetime) -> sql.Fragment:
        lapsed, params = no_live_lease_sql(now)
        return f'"interrupt_requested" AND {_OPEN} AND ({lapsed})', params

    guard = Guard(where=where, sets=_bumped, refusal=lambda task, now: None)
    return await _stop(house, task_pk, apply, guard)


async def _stop(house: House, task_pk: int, apply: Apply, guard: Guard) -> Written[None]:
    select = '"id" = ?', [task_pk]
    try:
        written = await write_selected(house, select, apply, guard, _gone, attempts=1)
    except _Gone:
        return NOTHING
    return written.giving(None)
