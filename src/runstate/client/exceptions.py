"""Typed errors of the SDK: one per ``Problem`` member, one for any other error the
server answers (``ServerError``), plus the runner's own. The SDK raises no other
library's exception for what a server says or fails to say."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runstate.client.records import Budget, Spend, Submission


class RunstateError(Exception):
    """Anything the SDK raises on purpose."""


class Unauthorized(RunstateError):  # noqa: N818 - named after what the server said
    """The server refused the token: wrong, revoked, or missing (HTTP 401 over HTTP,
    close code 4403 over a WebSocket). Make one with ``runstate token create USER``."""


class ServerUnavailable(RunstateError):  # noqa: N818
    """The server did not answer, or answered 5xx, through every one of the SDK's own
    retries (``Runstate(retries=...)``): it is down, or not at that URL."""


class ServerError(RunstateError):
    """The server answered with GraphQL ``errors`` instead of an answer, or refused the
    request outside GraphQL (a 4xx without a GraphQL body): a failure of its own
    ("Unexpected error."), a document or a variable it refused, a body over its limit
    (413), a read stopped at its time limit (503), an answer too large. An answer
    came, so unlike ``ServerUnavailable`` the request was not sent again; unlike a
    ``ProblemError`` it is no member of the operation's result.

    ``operation`` is the field the SDK asked for (``taskAt``), ``errors`` the entries
    as the server sent them, ``messages`` their messages, and ``code`` and ``path``
    the first entry's ``extensions.code`` and ``path`` (None without one). Its text
    is ``"<operation>: <message>"``, the messages joined by "; "."""

    def __init__(self, operation: str, errors: Sequence[Mapping[str, Any]]) -> None:
        self.operation = operation
        self.errors = [dict(error) for error in errors]
        self.messages = [str(error.get("message", "")) for error in self.errors]
        first = self.errors[0] if self.errors else {}
        code = (first.get("extensions") or {}).get("code")
        self.code: str | None = None if code is None else str(code)
        self.path: list[str | int] | None = first.get("path")
        super().__init__(f"{operation}: {'; '.join(self.messages)}")


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


class SessionBusy(ProblemError):  # noqa: N818
    """A REJECT submission found the session's active submission unfinished
    (``active``, as it stood): nothing was written. Submit with ENQUEUE to queue
    behind it, or INTERRUPT to stop it."""

    code = "SESSION_BUSY"

    @property
    def active(self) -> Submission:
        return Submission.of(self.data["active"])


class TaskInterrupted(ProblemError):  # noqa: N818
    """An INTERRUPT or ROLLBACK of the task's submission (``submission``) asked it
    to stop: it starts no new work, and nothing was written. Let the lease go (a
    ``TaskRunner`` does on leaving): the task then ends CANCELLED, what it did kept,
    and the submission that displaced it runs next.

    The server says so to the next start of work; a ``TaskRunner`` says so itself
    at its next ``begin`` when a write's answer already told it (the step's end
    that ended the task CANCELLED), with the submission as it then stands."""

    code = "TASK_INTERRUPTED"

    def __init__(self, data: dict[str, Any], submission: Submission | None = None) -> None:
        super().__init__(data)
        self.submission = submission or Submission.of(data["submission"])


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
        SessionBusy,
        TaskInterrupted,
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
