"""The ``Problem`` interface and its members: expected failures returned as data."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from enum import Enum
from typing import Any

import strawberry
from strawberry.extensions import FieldExtension

from runstate.basics.enums import BudgetScope
from runstate.schema.spending import Budget, Spend
from runstate.services.domain import errors


@strawberry.enum
class ProblemCode(Enum):
    """Machine-readable kind of a Problem."""

    NOT_FOUND = "NOT_FOUND"
    VERSION_CONFLICT = "VERSION_CONFLICT"
    INVALID_TRANSITION = "INVALID_TRANSITION"
    INVALID_INPUT = "INVALID_INPUT"
    SESSION_EXPIRED = "SESSION_EXPIRED"
    LOCK_HELD = "LOCK_HELD"
    LOCK_NOT_HELD = "LOCK_NOT_HELD"
    STALE_FENCING_TOKEN = "STALE_FENCING_TOKEN"
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    RATE_LIMITED = "RATE_LIMITED"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    SESSION_BUSY = "SESSION_BUSY"
    TASK_INTERRUPTED = "TASK_INTERRUPTED"


@strawberry.interface
class Problem:
    """An expected refusal: what went wrong, for machines (code) and people (message)."""

    code: ProblemCode
    message: str


@strawberry.type
class NotFound(Problem):
    """No such object for this caller."""

    id: strawberry.ID


@strawberry.type
class VersionConflict(Problem):
    """The object changed since the caller read it; read it again and retry."""

    expected_version: int
    current_version: int


@strawberry.type
class InvalidTransition(Problem):
    """A status change the state machine does not allow."""

    from_: str = strawberry.field(name="from")
    to: str


@strawberry.type
class InvalidInput(Problem):
    """A value that can never be accepted; ``field`` names the input that carried it."""

    field: str


@strawberry.type
class SessionExpired(Problem):
    """The session was inactive past its expiry."""

    session_id: strawberry.ID


@strawberry.type
class LockHeld(Problem):
    """Another holder has a live lease on the task."""

    holder_id: str
    expires_at: datetime


@strawberry.type
class LockNotHeld(Problem):
    """The caller holds no live lease on the task."""


@strawberry.type
class StaleFencingToken(Problem):
    """A write carried a fencing token older than the latest granted."""

    current_token: int


@strawberry.type(
    description=(
        "The idempotencyKey was already used, within its retention, for a different "
        "operation or input."
    )
)
class IdempotencyKeyReused(Problem):
    """A key sent again with other input: nothing was written."""

    idempotency_key: str


@strawberry.type(
    description=(
        "The caller has used up its request budget for now; nothing was done. Try "
        "again after retryAfterSeconds. Reads cost 1 point, writes 2, subscriptions 5."
    )
)
class RateLimited(Problem):
    """A refusal of the per-user rate limit."""

    retry_after_seconds: float


@strawberry.type(
    description=(
        "New work refused: the task's or its session's spend reached its budget. Nothing was done."
    )
)
class BudgetExceeded(Problem):
    """A start of new work refused by a budget (``scope``: whose)."""

    scope: BudgetScope
    budget: Budget
    spend: Spend


MORE: dict[type[errors.DomainError], Callable[[Any], Problem]] = {}
"""The Problem members of other modules of the schema, by the refusal each
answers (``schema.ledger``'s, whose members hold types that import this module)."""


def to_problem(error: errors.DomainError) -> Problem:
    """The Problem member that answers a service refusal."""
    more = MORE.get(type(error))
    if more is not None:
        return more(error)
    code = ProblemCode(error.code)
    message = error.message
    match error:
        case errors.NotFoundError():
            return NotFound(code=code, message=message, id=strawberry.ID(error.id))
        case errors.VersionConflictError():
            return VersionConflict(
                code=code,
                message=message,
                expected_version=error.expected_version,
                current_version=error.current_version,
            )
        case errors.InvalidTransitionError():
            return InvalidTransition(
                code=code, message=message, from_=error.from_status, to=error.to_status
            )
        case errors.InvalidInputError():
            return InvalidInput(code=code, message=message, field=error.field)
        case errors.SessionExpiredError():
            return SessionExpired(
                code=code, message=message, session_id=strawberry.ID(error.session_id)
            )
        case errors.LockHeldError():
            return LockHeld(
                code=code, message=message, holder_id=error.holder_id, expires_at=error.expires_at
            )
        case errors.LockNotHeldError():
            return LockNotHeld(code=code, message=message)
        case errors.StaleFencingTokenError():
            return StaleFencingToken(code=code, message=message, current_token=error.current_token)
        case errors.IdempotencyKeyReusedError():
            return IdempotencyKeyReused(code=code, message=message, idempotency_key=error.key)
        case errors.RateLimitedError():
            return RateLimited(code=code, message=message, retry_after_seconds=error.retry_after)
        case errors.BudgetExceededError():
            budget = Budget.of(error.budget)
            assert budget is not None  # a refusal names the budget that refused
            return BudgetExceeded(
                code=code,
                message=message,
                scope=BudgetScope(error.scope),
                budget=budget,
                spend=Spend.of(error.spend),
            )
    raise TypeError(f"no Problem answers {type(error).__name__}")


class AnswerProblems(FieldExtension):
    """Answers a refusal raised by the field's resolver (a ``DomainError``, the rate
    limit's included) as its Problem member: the one place where the services'
    errors become answers of the contract's unions."""

    def resolve(self, next_: Callable[..., Any], source: Any, info: Any, **kwargs: Any) -> Any:
        try:
            return next_(source, info, **kwargs)
        except errors.DomainError as error:
            return to_problem(error)

    async def resolve_async(
        self, next_: Callable[..., Awaitable[Any]], source: Any, info: Any, **kwargs: Any
    ) -> Any:
        try:
            return await next_(source, info, **kwargs)
        except errors.DomainError as error:
            return to_problem(error)
