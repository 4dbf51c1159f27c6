"""A session's admission ledger, as the API asks: ``submitInput`` and
``cancelSubmission`` (``services.write.ledger`` keeps the order).

An input is admitted with the task that carries it out in one transaction: the
session's row is locked first (``tasks.create_admitted``), its budget checked,
then the ledger decides under that lock: with no ACTIVE submission the new one
is ACTIVE at once, whatever its policy; else REJECT refuses (SessionBusy, the
transaction rolled back, nothing written), ENQUEUE queues it, INTERRUPT and
ROLLBACK queue it ahead of every submission queued in order (``rank`` 0) and
mark the active one to stop. The active task itself is then asked to stop in a
task write of its own (``stops.request``), taking its locks in the order task
writes take them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.exceptions import IntegrityError
from tortoise.transactions import in_transaction

from runstate.basics.enums import AdmissionPolicy, SubmissionStatus
from runstate.models import USER_LENGTH, Session, Submission, Task, box
from runstate.services.actions import stops, tasks
from runstate.services.domain import quota, validation
from runstate.services.domain.errors import (
    InvalidTransitionError,
    SessionBusyError,
)
from runstate.services.domain.validation import StepPlan
from runstate.services.domain.views import BudgetView, SubmissionView, Written
from runstate.services.read import entries
from runstate.services.write import ledger
from runstate.services.write.house import House
from runstate.storage import sql
from runstate.storage.clock import utcnow

AHEAD = 0
"""The rank of a submission that displaced the active one: next, ahead of any
queued in order."""
IN_ORDER = 1

_STOPS = {
    AdmissionPolicy.INTERRUPT: SubmissionStatus.INTERRUPTED,
    AdmissionPolicy.ROLLBACK: SubmissionStatus.ROLLED_BACK,
}


class Fired(Exception):  # noqa: N818 - a signal, not an error
    """A schedule's due time already has its submission (another process fired it)."""


async def submit_input(
    house: House,
    user_id: str,
    session_id: str,
    *,
    goal: str,
    steps: Sequence[StepPlan],
    input: Any = None,
    policy: AdmissionPolicy = AdmissionPolicy.REJECT,
    budget: BudgetView | None = None,
) -> Written[SubmissionView]:
    """Admit ``input`` into the session's ledger under ``policy``, with a PLANNED
    task (``goal``, ``steps``, ``budget``) that carries it out; SessionBusy
    (nothing written) when REJECT finds the active submission unfinished."""
    return await admit(
        house,
        user_id,
        session_id,
        goal=goal,
        steps=steps,
        input=input,
        policy=policy,
        budget=budget,
        actor=user_id,
    )


async def admit(
    house: House,
    user_id: str,
    session_id: str,
    *,
    goal: str,
    steps: Sequence[StepPlan],
    input: Any,
    policy: AdmissionPolicy,
    budget: BudgetView | None,
    actor: str,
    fire: tuple[int, datetime] | None = None,
    reason: str | None = None,
) -> Written[SubmissionView]:
    """``submit_input`` for any submitter: a person or agent (``actor`` its user),
    or a schedule's fire (``fire``: the schedule's row id and the due time, unique
    together: a second fire of one due time raises ``Fired``; ``reason``: why it
    fired as it did, a fire made up for missed due times)."""
    house.limits.json_payload(input, "input")
    stored = quota.ROW_BYTES + validation.json_size(input)
    public_id = validation.object_id(None)
    decided: dict[str, Any] = {}

    async def write(conn: BaseDBAsyncClient, session: Session, now: datetime) -> int:
        changed, seq = await ledger.admitting(conn, session.id, stored)
        current = await ledger.active(conn, session.id)
        status, rank = SubmissionStatus.ACTIVE, IN_ORDER
        if current is not None:
            if policy is AdmissionPolicy.REJECT:
                (busy,) = await entries.views([current], conn)
                raise SessionBusyError(busy)
            status = SubmissionStatus.QUEUED
            if policy in _STOPS:
                rank = AHEAD
                decided["stop"] = await _displace(conn, current, policy, public_id, changed, now)
        values = {
            "public_id": public_id,
            "user_id": user_id,
            "session_id": session.id,
            "seq": seq,
            "input": box(input),
            "policy": policy,
            "status": status,
            "reason": reason,
            "rank": rank,
            "actor": actor[: USER_LENGTH + 16],
            "schedule_id": None if fire is None else fire[0],
            "scheduled_for": None if fire is None else fire[1],
            "changed_seq": changed,
            "created_at": now,
            "updated_at": now,
            "stored_bytes": stored,
        }
        try:
            row = await Submission.create(**values, using_db=conn)
        except IntegrityError:
            if fire is None:
                raise
            raise Fired from None
        decided["view"] = entries.view(row, session.public_id)
        return int(row.id)

    created = await tasks.create_admitted(
        house,
        user_id,
        session_id,
        goal=goal,
        steps=steps,
        budget=budget,
        admit=write,
        admitted_bytes=stored,
    )
    view: SubmissionView = replace(
        decided["view"], task_pk=created.value.pk, task_id=created.value.id
    )
    written = created.giving(view).after(Written(None, wakes=ledger.wakes(view.session_pk)))
    stop = decided.get("stop")
    if stop is None:
        return written
    note = f"submission {view.seq} ({policy}) by {actor}"
    stopped = await stops.request(house, stop, note)
    admitted = await entries.get_submission(user_id, public_id)  # it may be ACTIVE already
    return Written(admitted, written.events + stopped.events, written.wakes + stopped.wakes)


async def _displace(
    conn: BaseDBAsyncClient,
    current: Submission,
    policy: AdmissionPolicy,
    by: str,
    changed: int,
    now: datetime,
) -> int | None:
    """Mark the active submission to stop for the submission ``by``: the row id of
    its task to ask, None when another already asked (it stops once)."""
    marked = await sql.fetch(
        conn,
        'UPDATE "submissions" SET "stop" = ?, "displaced_by" = ?, "reason" = ?,'
        ' "changed_seq" = ?, "updated_at" = ? WHERE "id" = ? AND "stop" IS NULL'
        ' RETURNING "task_id"',
        [
            _STOPS[policy].value,
            by,
            f"{'interrupted' if policy is AdmissionPolicy.INTERRUPT else 'rolled back'}"
            f" by submission {by}",
            changed,
            sql.db_value(Submission, "updated_at", now),
            current.id,
        ],
    )
    if not marked or marked[0]["task_id"] is None:
        return None
    return int(marked[0]["task_id"])


async def cancel_submission(
    house: House, user_id: str, submission_id: str, *, note: str | None = None
) -> Written[SubmissionView]:
    """Cancel a QUEUED submission (CANCELLED, with ``note``) and remove its task;
    any other status answers InvalidTransition, someone else's NotFound. In the
    lock order of task writes: the task, then the session, then the submission."""
    validation.note(note)
    current = await entries.get_submission(user_id, submission_id)
    if current.status is not SubmissionStatus.QUEUED:
        raise InvalidTransitionError("submission", current.status, SubmissionStatus.CANCELLED)
    now = utcnow()
    try:
        async with in_transaction() as conn:
            gone = await quota.delete_counted(
                conn, Task.filter(id=current.task_pk or 0, submission_id=current.pk)
            )
            changed = await ledger.bump(conn, current.session_pk)
            matched = await (
                Submission.filter(id=current.pk, status=SubmissionStatus.QUEUED)
                .using_db(conn)
                .update(
                    status=SubmissionStatus.CANCELLED,
                    reason=note or f"cancelled by {user_id}",
                    changed_seq=changed,
                    updated_at=now,
                )
            )
            if not matched:
                raise _Moved
            await quota.release(conn, quota.add_up(gone))
    except _Moved:
        moved = await entries.get_submission(user_id, submission_id)
        raise InvalidTransitionError(
            "submission", moved.status, SubmissionStatus.CANCELLED
        ) from None
    return Written(
        await entries.get_submission(user_id, submission_id),
        wakes=ledger.wakes(current.session_pk),
    )


class _Moved(Exception):  # noqa: N818 - a signal, not an error
    """The submission left QUEUED while it was being cancelled."""
