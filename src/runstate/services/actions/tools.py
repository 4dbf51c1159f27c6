"""Tool states: per task and tool, retries used, last result or error, rate limit.

A tool call report opens like every task write, with the task row's conditional
UPDATE (lease checked; the task's version is left alone, its event seq grows),
so reports on one task are serialized by the database; the retry count itself
is incremented in SQL. ``expectedVersion``, when given, is the tool state's.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tortoise.expressions import F

from runstate.basics.enums import StepStatus, TaskEventKind, ToolOutcome, ToolStatus
from runstate.models import ToolState, box
from runstate.services.domain import validation
from runstate.services.domain.errors import (
    InvalidInputError,
    InvalidTransitionError,
    VersionConflictError,
)
from runstate.services.domain.validation import ContentLimits, Report
from runstate.services.domain.views import ToolStateView, Written
from runstate.services.read.convert import tool_state_view
from runstate.services.write.engine import Change, Draft, versioned, write_task
from runstate.services.write.house import House

DEFAULT_MAX_RETRIES = 3
MAX_RETRY_BUDGET = 1000
MAX_RETRY_AFTER = 24 * 3600
TOOL_NAME_LENGTH = 128


def _check(
    limits: ContentLimits,
    tool_name: str,
    outcome: ToolOutcome,
    error: str | None,
    retry_after_seconds: int | None,
    max_retries: int | None,
) -> None:
    if not tool_name.strip() or len(tool_name) > TOOL_NAME_LENGTH:
        raise InvalidInputError("toolName", f"must be 1 to {TOOL_NAME_LENGTH} characters")
    validation.storable(tool_name, "toolName")
    if max_retries is not None and not 0 <= max_retries <= MAX_RETRY_BUDGET:
        raise InvalidInputError("maxRetries", f"must be between 0 and {MAX_RETRY_BUDGET}")
    if outcome is ToolOutcome.RATE_LIMITED and (
        retry_after_seconds is None or not 1 <= retry_after_seconds <= MAX_RETRY_AFTER
    ):
        raise InvalidInputError(
            "retryAfterSeconds", f"RATE_LIMITED needs 1 to {MAX_RETRY_AFTER} seconds"
        )
    if error is not None:
        limits.error_text(error)


async def record_tool_call(
    house: House,
    user_id: str,
    task_id: str,
    tool_name: str,
    outcome: ToolOutcome,
    *,
    expected_version: int | None = None,
    fencing_token: int | None = None,
    result: Any = None,
    error: str | None = None,
    retry_after_seconds: int | None = None,
    max_retries: int | None = None,
    spend: Report | None = None,
) -> Written[ToolStateView]:
    """Apply one tool-call report (semantics.md, "Tool state"); TOOL_STATE_CHANGED.

    CALLING is refused while the tool is rate-limited, and once the task's or its
    session's spend reached its budget (BudgetExceeded). FAILURE adds 1 to the retry
    count and leaves the tool RETRYING while the count is below its budget, FAILED
    after. A tool is created IDLE at version 0 by its first report. ``spend`` (what
    the call cost) is added to the task's first RUNNING step, which the event
    carries.
    """
    _check(house.limits, tool_name, outcome, error, retry_after_seconds, max_retries)
    house.limits.json_payload(result, "result")
    report = validation.checked_report(spend)
    written: list[ToolStateView] = []

    async def apply(draft: Draft) -> Change:
        conn, now = draft.conn, draft.now
        if outcome is ToolOutcome.CALLING:
            await draft.refuse_interrupted()
            await draft.refuse_over_budget()
        if report is not None:
            running = await draft.with_status(StepStatus.RUNNING)
            if not running:
                raise InvalidInputError(
                    "spend", "no step is RUNNING to add it to: report it with recordSpend"
                )
            draft.spend(running[0], report)
        row = (
            await ToolState.filter(task_id=draft.task.id, tool_name=tool_name)
            .using_db(conn)
            .first()
        )
        if row is None:
            row = await ToolState.create(
                task_id=draft.task.id,
                tool_name=tool_name,
                status=ToolStatus.IDLE,
                version=0,
                retry_count=0,
                max_retries=DEFAULT_MAX_RETRIES if max_retries is None else max_retries,
                updated_at=now,
                created_seq=draft.task.event_seq,
                using_db=conn,
            )
        limited = row.rate_limit_reset_at is not None and row.rate_limit_reset_at > now
        if outcome is ToolOutcome.CALLING and limited:
            raise InvalidTransitionError("tool", row.status, ToolStatus.CALLING)
        changes: dict[str, Any] = {
            "version": F("version") + 1,
            "updated_at": now,
            "changed_seq": draft.task.event_seq,
        }
        if max_retries is not None:
            changes["max_retries"] = max_retries
        if outcome is ToolOutcome.CALLING:
            changes["status"] = ToolStatus.CALLING
        elif outcome is ToolOutcome.SUCCESS:
            changes.update(status=ToolStatus.SUCCESS, last_result=box(result), retry_count=0)
        elif outcome is ToolOutcome.FAILURE:
            changes.update(retry_count=F("retry_count") + 1, last_error=error)
        else:
            assert retry_after_seconds is not None  # checked above
            changes.update(
                status=ToolStatus.RETRYING,
                rate_limit_reset_at=now + timedelta(seconds=retry_after_seconds),
            )
        cas = ToolState.filter(id=row.id)
        if expected_version is not None:
            cas = cas.filter(version=expected_version)
        if not await cas.using_db(conn).update(**changes):
            raise VersionConflictError(expected_version or row.version, row.version)
        row = await ToolState.filter(id=row.id).using_db(conn).get()
        if outcome is ToolOutcome.FAILURE:
            spent = row.retry_count >= row.max_retries
            row.status = ToolStatus.FAILED if spent else ToolStatus.RETRYING
            await ToolState.filter(id=row.id).using_db(conn).update(status=row.status)
        draft.tool_state = tool_state_view(row, draft.task.public_id)
        written.append(draft.tool_state)
        return Change(TaskEventKind.TOOL_STATE_CHANGED, tool_name=tool_name)

    guard = versioned(None, fencing_token, bump_version=False)
    done = await write_task(house, user_id, task_id, apply, guard)
    return done.giving(written[-1])
