"""Typed refusals raised by the services; each maps to one ``Problem`` of the API."""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runstate.services.domain.views import BudgetView, SpendView, SubmissionView


class DomainError(Exception):
    """An expected refusal: the request was understood and answered with a reason."""

    code = "DOMAIN_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def extensions(self) -> dict[str, object]:
        """What a GraphQL error raised from this refusal carries besides its message
        (graphql-core copies an original error's ``extensions``)."""
        return {"code": self.code}


class NotFoundError(DomainError):
    """No such object for this caller (someone else's object answers the same)."""

    code = "NOT_FOUND"

    def __init__(self, kind: str, object_id: str) -> None:
        super().__init__(f"{kind} {object_id!r} not found")
        self.id = object_id


class VersionConflictError(DomainError):
    """The stored version is not the one the caller expected."""

    code = "VERSION_CONFLICT"

    def __init__(self, expected: int, current: int) -> None:
        super().__init__(f"expected version {expected}, but the current version is {current}")
        self.expected_version = expected
        self.current_version = current


class InvalidTransitionError(DomainError):
    """A status change that the state machine does not allow."""

    code = "INVALID_TRANSITION"

    def __init__(self, what: str, from_status: str, to_status: str) -> None:
        super().__init__(f"{what} cannot go from {from_status} to {to_status}")
        self.from_status = from_status
        self.to_status = to_status


class InvalidInputError(DomainError):
    """A value that can never be accepted, named by the input field that carried it."""

    code = "INVALID_INPUT"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class SessionExpiredError(DomainError):
    """The session was inactive past its expiry; it stays EXPIRED."""

    code = "SESSION_EXPIRED"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} has expired")
        self.session_id = session_id


class LockHeldError(DomainError):
    """Another holder has a live lease on the task."""

    code = "LOCK_HELD"

    def __init__(self, holder_id: str, expires_at: datetime) -> None:
        super().__init__(f"task is leased by {holder_id!r} until {expires_at.isoformat()}")
        self.holder_id = holder_id
        self.expires_at = expires_at


class LockNotHeldError(DomainError):
    """The caller does not hold a live lease on the task."""

    code = "LOCK_NOT_HELD"

    def __init__(self) -> None:
        super().__init__("no live lease on this task is held by this holder")


class StaleFencingTokenError(DomainError):
    """The fencing token is not the latest one granted for the task."""

    code = "STALE_FENCING_TOKEN"

    def __init__(self, given: int, current: int) -> None:
        super().__init__(f"fencing token {given} is stale; the current token is {current}")
        self.current_token = current


class IdempotencyKeyReusedError(DomainError):
    """The idempotency key was already used, within its retention, for other input."""

    code = "IDEMPOTENCY_KEY_REUSED"

    def __init__(self, key: str) -> None:
        super().__init__(
            f"idempotency key {key!r} was already used for a different operation or input"
        )
        self.key = key


class UnmatchedWriteError(Exception):
    """A conditional write matched no row; the caller looks up why after the rollback.

    Internal to the services: never reaches a transport.
    """


class AnswerTooLargeError(DomainError):
    """An operation that could answer more than a limit allows, refused before it
    runs; the limit is named by its setting."""

    code = "RESPONSE_TOO_LARGE"

    def __init__(self, limit: str, estimate: int, maximum: int, unit: str) -> None:
        super().__init__(
            f"this operation could answer about {estimate} {unit}, more than {limit}"
            f" ({maximum}): ask for fewer items (first), fields or aliases, or read the"
            " task's history in pages (events(afterSeq, first))"
        )
        self.limit = limit
        self.estimate = estimate
        self.maximum = maximum

    @property
    def extensions(self) -> dict[str, object]:
        return {
            "code": self.code,
            "limit": self.limit,
            "estimate": self.estimate,
            "maximum": self.maximum,
        }


class RateLimitedError(DomainError):
    """The caller spent its request budget; it may try again after ``retry_after``
    seconds. Other callers are not affected.

    ``retry_after`` is the wait rounded up to the millisecond, and at least one: a
    bucket a fraction of a point short once answered "try again in 0.0 s", and a
    client that did so was refused again.
    """

    code = "RATE_LIMITED"

    def __init__(self, wait: float) -> None:
        self.retry_after = max(1, math.ceil(wait * 1000)) / 1000
        super().__init__(f"rate limited: try again in {self.retry_after:g} s")

    @property
    def extensions(self) -> dict[str, object]:
        return {"code": self.code, "retryAfterSeconds": self.retry_after}


class BudgetExceededError(DomainError):
    """New work refused: the task's or its session's spend reached its budget. The
    message says the spend in the units of the budget's limits, cost as money in
    ``currency`` with the decimals that show it exactly (``$0.024 of its $0.020
    budget``): in whole cents a spend just past its limit read as equal to it."""

    code = "BUDGET_EXCEEDED"

    def __init__(self, scope: str, budget: BudgetView, spend: SpendView, currency: str) -> None:
        whose = "the task" if scope == "TASK" else "its session"
        spent, limit = _in_units_of(budget, spend, currency)
        super().__init__(
            f"{whose} spent {spent} of its {limit} budget: no new work until it is raised"
        )
        self.scope = scope
        self.budget = budget
        self.spend = spend


def _in_units_of(budget: BudgetView, spend: SpendView, currency: str) -> tuple[str, str]:
    """What was spent and the budget's limits, each in the units the budget limits
    ("1,200 tokens", "$0.024"), each cost exact with its own decimals ("$0.024" of
    "$0.02")."""
    spent, limit = [], []
    if budget.max_tokens is not None:
        spent.append(f"{spend.tokens:,} tokens")
        limit.append(f"{budget.max_tokens:,} tokens")
    if budget.max_cost_micros is not None:
        spent.append(money(spend.cost_micros, currency))
        limit.append(money(budget.max_cost_micros, currency))
    return " and ".join(spent), " and ".join(limit)


def decimals(micros: int) -> int:
    """The fewest decimals, 2 to 6, that show ``micros`` (millionths of a currency
    unit) exactly."""
    digits = 2
    while digits < 6 and micros % 10 ** (6 - digits):
        digits += 1
    return digits


def money(micros: int, currency: str) -> str:
    """``micros`` millionths of ``currency`` with the fewest decimals that show it
    exactly, at least 2: "$0.024" in dollars, "0.024 EUR" in any other currency."""
    amount = f"{Decimal(micros).scaleb(-6):,.{decimals(micros)}f}"
    return f"${amount}" if currency == "USD" else f"{amount} {currency}"


class SessionBusyError(DomainError):
    """REJECT found the session's active submission unfinished: nothing written."""

    code = "SESSION_BUSY"

    def __init__(self, active: SubmissionView) -> None:
        super().__init__(
            f"session {active.session_id!r} is busy with submission {active.seq}"
            f" ({active.status}): nothing was written; submit with ENQUEUE to queue,"
            " or INTERRUPT to stop it"
        )
        self.active = active


class TaskInterruptedError(DomainError):
    """The task's submission was asked to stop: the task starts no new work."""

    code = "TASK_INTERRUPTED"

    def __init__(self, submission: SubmissionView) -> None:
        by = f" by submission {submission.displaced_by!r}" if submission.displaced_by else ""
        super().__init__(
            f"submission {submission.seq} of session {submission.session_id!r} was"
            f" interrupted{by}: its task starts no new work. Nothing was written."
        )
        self.submission = submission
