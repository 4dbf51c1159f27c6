"""Reading a session's ledger: submissions as views, one by id, a session's in
order, those changed since a ledger position (``sessionSubmissions``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tortoise.backends.base.client import BaseDBAsyncClient

from runstate.basics.enums import SubmissionStatus
from runstate.models import Schedule, Session, Submission, Task, unbox
from runstate.services.domain import validation
from runstate.services.domain.errors import NotFoundError
from runstate.services.domain.views import SpendView, SubmissionView
from runstate.services.read.lookups import get_session


async def views(
    rows: Sequence[Submission], conn: BaseDBAsyncClient | None = None
) -> list[SubmissionView]:
    """Views of submission rows, with the public ids of their sessions, tasks and
    schedules read in one query each."""
    if not rows:
        return []
    sessions = dict(
        await Session.filter(id__in={r.session_id for r in rows})
        .using_db(conn)
        .values_list("id", "public_id")
    )
    task_pks = {r.task_id for r in rows if r.task_id is not None}
    tasks = (
        dict(await Task.filter(id__in=task_pks).using_db(conn).values_list("id", "public_id"))
        if task_pks
        else {}
    )
    schedule_pks = {r.schedule_id for r in rows if r.schedule_id is not None}
    schedules = (
        dict(
            await Schedule.filter(id__in=schedule_pks).using_db(conn).values_list("id", "public_id")
        )
        if schedule_pks
        else {}
    )
    return [
        replace(
            view(r, sessions[r.session_id]),
            task_id=None if r.task_id is None else tasks.get(r.task_id),
            schedule_id=None if r.schedule_id is None else schedules.get(r.schedule_id),
        )
        for r in rows
    ]


def view(row: Submission, session_id: str) -> SubmissionView:
    """A submission row as a view, its task's and schedule's public ids not read
    (``views`` reads them; a writer that knows them fills them in)."""
    return SubmissionView(
        pk=row.id,
        id=row.public_id,
        user_id=row.user_id,
        session_pk=row.session_id,
        session_id=session_id,
        seq=row.seq,
        input=unbox(row.input),
        policy=row.policy,
        status=row.status,
        reason=row.reason,
        task_pk=row.task_id,
        task_id=None,
        displaced_by=row.displaced_by,
        schedule_pk=row.schedule_id,
        schedule_id=None,
        scheduled_for=row.scheduled_for,
        actor=row.actor,
        changed_seq=row.changed_seq,
        created_at=row.created_at,
        updated_at=row.updated_at,
        spent=SpendView(
            row.spent_input_tokens, row.spent_output_tokens, row.spent_cost_micros, row.spent_calls
        ),
    )


async def by_pk(pk: int, conn: BaseDBAsyncClient | None = None) -> SubmissionView:
    """The submission with row id ``pk`` (one the caller's rows name)."""
    (view,) = await views([await Submission.filter(id=pk).using_db(conn).get()], conn)
    return view


async def get_submission(user_id: str, submission_id: str) -> SubmissionView:
    """The caller's submission ``submission_id``; NotFound for anyone else's."""
    validation.known_id(submission_id, "submission")
    row = await Submission.get_or_none(user_id=user_id, public_id=submission_id)
    if row is None:
        raise NotFoundError("submission", submission_id)
    (view,) = await views([row])
    return view


async def of_session(
    user_id: str,
    session_id: str,
    status: SubmissionStatus | None = None,
    first: int = 50,
) -> list[SubmissionView]:
    """The session's ledger in order (``seq``), of one status if given."""
    validation.page_size(first)
    session = await get_session(user_id, session_id)
    query = Submission.filter(session_id=session.pk)
    if status is not None:
        query = query.filter(status=status)
    return await views(await query.order_by("seq").limit(first))


async def active_of(session_pk: int) -> SubmissionView | None:
    """The session's ACTIVE submission, if any."""
    row = await Submission.filter(session_id=session_pk, status=SubmissionStatus.ACTIVE).first()
    return None if row is None else (await views([row]))[0]


async def unfinished(session_pk: int) -> list[SubmissionView]:
    """The session's QUEUED and ACTIVE submissions, in ledger order."""
    rows = await Submission.filter(
        session_id=session_pk,
        status__in=(SubmissionStatus.QUEUED, SubmissionStatus.ACTIVE),
    ).order_by("seq")
    return await views(rows)


async def changed_between(session_pk: int, after: int, upto: int) -> list[SubmissionView]:
    """The session's submissions whose last change is in (``after``, ``upto``], in
    the order of those changes."""
    rows = await Submission.filter(
        session_id=session_pk, changed_seq__gt=after, changed_seq__lte=upto
    ).order_by("changed_seq", "seq")
    return await views(rows)
