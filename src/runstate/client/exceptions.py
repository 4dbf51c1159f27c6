"""Typed errors of the SDK: one per ``Problem`` member, plus the runner's own."""

from __future__ import annotations

from typing import Any

from runstate.client.records import Budget, Spend


class RunstateError(Exception):
    """Anything the SDK raises on purpose."""


class Unauthorized(RunstateError):  # noqa: N818 - named after what the server said
    """The server refused the token: wrong, revoked, or missing (HTTP 401 over HTTP,
    close code 4403 over a WebSocket). Make one with ``runstate token create USER``."""


class ServerUnavailable(RunstateError):  # noqa: N818
    """The server did not answer, or answered 5xx, through every one of the SDK's own
    retries (``Runstate(retries=...)``): it is down, or not at that URL."""


class ProblemError(RunstateError):
    """The server refused an operation with a ``Problem`` (its ``code`` and ``message``)."""

    code = "PROBLEM"

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data.get("message", self.code))
        self.data = data
        self.message: str = data.get("message", "")


class NotFound(ProblemError):  # noqa: N818 - named after the Problem member
    """No such object for this caller."""

    code = "NOT_FOUND"


class VersionConflict(ProblemError):  # noqa: N818
    """The object changed; ``current_version`` is what it is now."""

    code = "VERSION_CONFLICT"

    @property
    def current_version(self) -> int:
        return int(self.data["currentVersion"])


class InvalidTransition(ProblemError):  # noqa: N818
    """A status change the state machine does not allow."""

    code = "INVALID_TRANSITION"


class InvalidInput(ProblemError):  # noqa: N818
    """A value the server can never accept."""

    code = "INVALID_INPUT"


class SessionExpired(ProblemError):  # noqa: N818
    """The session expired; start a new one."""

    code = "SESSION_EXPIRED"


class LockHeld(ProblemError):  # noqa: N818
    """Another worker holds the task's lease."""

    code = "LOCK_HELD"

    @property
    def holder_id(self) -> str:
        return str(self.data["holderId"])


class LockNotHeld(ProblemError):  # noqa: N818
    """This worker holds no live lease on the task."""

    code = "LOCK_NOT_HELD"


class StaleFencingToken(ProblemError):  # noqa: N818
    """Another worker took the task over; this one must stop."""

    code = "STALE_FENCING_TOKEN"


class RateLimited(ProblemError):  # noqa: N818
    """The caller's request budget is spent for now; nothing was done."""

    code = "RATE_LIMITED"

    @property
    def retry_after(self) -> float:
        return float(self.data["retryAfterSeconds"])


class BudgetExceeded(ProblemError):  # noqa: N818
    """New work refused: the task's (``scope`` TASK) or its session's (SESSION) spend
    reached its budget. Nothing was done; raise the budget (the dashboard,
    ``Runstate.set_budget``) and run the task again."""

    code = "BUDGET_EXCEEDED"

    @property
    def scope(self) -> str:
        return str(self.data["scope"])

    @property
    def budget(self) -> Budget:
        return Budget.of(self.data["limit"])

    @property
    def spend(self) -> Spend:
        return Spend.of(self.data["spent"])


PROBLEMS: dict[str, type[ProblemError]] = {
    cls.__name__: cls
    for cls in (
        NotFound,
        VersionConflict,
        InvalidTransition,
        InvalidInput,
        SessionExpired,
        LockHeld,
        LockNotHeld,
        StaleFencingToken,
        RateLimited,
        BudgetExceeded,
    )
}


class LeaseLost(RunstateError):  # noqa: N818
    """The runner's lease lapsed or was taken over: it stops writing."""


class NeedsDecision(RunstateError):  # noqa: N818
    """A non-idempotent step was running at a crash: it is IN_DOUBT until a person
    decides (RETRY, SKIP or COMPLETE)."""

    def __init__(self, task_id: str, step_index: int) -> None:
        super().__init__(
            f"task {task_id!r}: step {step_index} needs a decision (RETRY, SKIP or COMPLETE)"
        )
        self.task_id = task_id
        self.step_index = step_index
