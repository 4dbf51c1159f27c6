"""Live ledger: a session's submissions as they are admitted and change
(``sessionSubmissions``).

As with a conversation, the database is the stream's only source: every change
of a ledger moves its session's ``ledger_seq`` and wakes the session's ledger
channel once committed (``ledger.wakes``); the stream reads the submissions
changed since the position it last sent, up to the head it read first, so
no change is skipped (one made while the SNAPSHOT is read may come again after
it, as it then stands). A lost wake-up (a Redis outage)
costs only time: a quiet stream reads its head again every ``interval`` seconds.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass

from runstate.basics.enums import SubmissionEventKind
from runstate.models import Session
from runstate.pubsub import Broker
from runstate.services.domain.views import SubmissionView
from runstate.services.live.messages import ledger_channel
from runstate.services.live.streams import refuse_expired
from runstate.services.read import entries
from runstate.services.read.lookups import get_session


@dataclass(frozen=True)
class LedgerEventView:
    """One message of a ledger stream."""

    kind: SubmissionEventKind
    submissions: tuple[SubmissionView, ...]


async def ledger(
    broker: Broker, user_id: str, session_id: str, *, interval: float
) -> AsyncGenerator[LedgerEventView, None]:
    """The session's ledger: a SNAPSHOT of its unfinished submissions in order,
    then each one admitted (ADMITTED) or changed (CHANGED), in the order of the
    changes, until the session is deleted (the stream ends) or expires
    (SessionExpired). Someone else's session answers NotFound first."""
    session = await get_session(user_id, session_id)
    async with broker.subscription([ledger_channel(session.pk)]) as inbox:
        head = await _head(session.pk, session_id)
        if head is None:
            return
        last, admitted = head
        yield LedgerEventView(
            SubmissionEventKind.SNAPSHOT, tuple(await entries.unfinished(session.pk))
        )
        while True:
            await inbox.next(interval)  # a wake-up, a resync, or a quiet spell: read again
            head = await _head(session.pk, session_id)
            if head is None:
                return  # deleted with the session
            if head[0] <= last:
                continue
            for view in await entries.changed_between(session.pk, last, head[0]):
                new = view.seq > admitted
                kind = SubmissionEventKind.ADMITTED if new else SubmissionEventKind.CHANGED
                yield LedgerEventView(kind, (view,))
            last, admitted = head


async def _head(session_pk: int, session_id: str) -> tuple[int, int] | None:
    """The ledger's change count and last seq; None once the session is deleted,
    SessionExpiredError once it has expired."""
    row = await (
        Session.filter(id=session_pk)
        .first()
        .values_list("ledger_seq", "submission_seq", "status", "expires_at")
    )
    if row is None:
        return None
    changed, seq, status, expires_at = row
    refuse_expired(session_id, status, expires_at)
    return int(changed), int(seq)
