"""Ending what a program's earlier runs left open on the database.

``runstate demo`` makes sessions of its own each run (``demo-<time>``, its
``-inbox``; ``langgraph-demo-<time>`` for ``--langgraph``'s threads). Stopped or
killed, a run leaves them as they were: a trip waiting for a person's decision
would ask for it on the next run's page, beside that run's own. So each run, as
it starts and before its agents do, ends the earlier runs' sessions with
``end_open_sessions``: their unfinished tasks CANCELLED with a note the log
keeps, the sessions COMPLETED, still listed as history. Done at the start, not on
Ctrl-C: a killed run never sees its Ctrl-C.
"""

from __future__ import annotations

import asyncio

from tortoise.expressions import Q

from runstate.basics.enums import SessionStatus
from runstate.models import Session, Task
from runstate.services.actions import sessions, stops
from runstate.services.domain.conditions import lease_live
from runstate.services.domain.moves import FINAL_TASKS
from runstate.services.write.house import House
from runstate.storage.clock import utcnow


async def end_open_sessions(
    house: House, user_id: str, prefixes: tuple[str, ...], note: str
) -> int:
    """End the open sessions of ``user_id`` whose ids begin with one of
    ``prefixes``, their unfinished tasks stopped with ``note`` (the reason their
    logs keep); how many sessions were ended."""
    named = Q(*(Q(public_id__startswith=prefix) for prefix in prefixes), join_type="OR")
    left = await Session.filter(
        named, user_id=user_id, status__in=[SessionStatus.ACTIVE, SessionStatus.PAUSED]
    )
    for session in left:
        for task in await Task.filter(session_id=session.id).exclude(status__in=FINAL_TASKS):
            await _lease_lapsed(task)
            written = await stops.request(house, task.id, note)
            house.publish(written.events, written.wakes)
        await sessions.update_session(
            house,
            user_id,
            session.public_id,
            expected_version=session.version,
            status=SessionStatus.COMPLETED,
        )
    return len(left)


async def _lease_lapsed(task: Task) -> None:
    """Wait until the lease of the earlier run's agent on ``task`` lapses (a few
    seconds after that run ended, as its agents did): a task nobody drives is
    cancelled at once, where a leased one would only be asked to stop."""
    while lease_live(task.lock_expires_at, now := utcnow()):
        assert task.lock_expires_at is not None
        await asyncio.sleep((task.lock_expires_at - now).total_seconds())
        await task.refresh_from_db(fields=["lock_expires_at"])
