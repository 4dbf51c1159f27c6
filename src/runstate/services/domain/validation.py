"""Checks of client-supplied values, raising ``InvalidInputError`` with the input field."""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runstate.basics.enums import StepStatus
from runstate.models import ID_LENGTH
from runstate.services.domain.errors import InvalidInputError, NotFoundError
from runstate.services.domain.views import SpendView

MAX_SESSION_TTL_SECONDS = 366 * 24 * 3600
MAX_PAGE = 100
"""The most items one page of any list may hold (``first``)."""


@dataclass(frozen=True)
class ContentLimits:
    """How large what clients store may be, and the checks that hold values to them.
    One app's are its settings' (``Settings.content``), handed to the services in
    its ``House``. Each is read from ``RUNSTATE_MAX_`` and its name in capitals
    (``RUNSTATE_MAX_GOAL_CHARS``)."""

    goal_chars: int = 10_000
    action_chars: int = 200
    steps: int = 1000
    """Steps one task may have."""
    error_chars: int = 10_000
    json_bytes: int = 65_536
    """The largest JSON payload (metadata, a step's input or output, a tool result)."""
    json_depth: int = 32
    task_bytes: int = 16 * 1_048_576
    """What one task may hold, its history included (``quota``)."""
    user_bytes: int = 1_073_741_824
    """What one user's sessions and tasks may hold together."""
    checkpoint_bytes: int = 8 * 1_048_576
    """What one LangGraph checkpoint may store in one write (its payload and the
    channel values it changed), or one task's pending writes in one call. Stored,
    it counts in base64 against ``task_bytes`` (``stored_checkpoint``): the
    default of 8 MiB is 10.7 MiB there, under the task's 16 MiB (16 MiB, the
    default before, could never be stored)."""

    def goal(self, value: str) -> str:
        """A task goal: some text, not too long."""
        if not value.strip():
            raise InvalidInputError("goal", "must not be empty")
        storable(value, "goal")
        if len(value) > self.goal_chars:
            raise InvalidInputError("goal", f"must be at most {self.goal_chars} characters")
        return value

    def step_plans(self, plans: Sequence[StepPlan], existing: int = 0) -> Sequence[StepPlan]:
        """Steps to add to a plan that already has ``existing`` steps."""
        if existing + len(plans) > self.steps:
            raise InvalidInputError("steps", f"a task has at most {self.steps} steps")
        for i, plan in enumerate(plans):
            if not plan.action.strip():
                raise InvalidInputError(f"steps[{i}].action", "must not be empty")
            if len(plan.action) > self.action_chars:
                raise InvalidInputError(
                    f"steps[{i}].action", f"must be at most {self.action_chars} characters"
                )
            storable(plan.action, f"steps[{i}].action")
            self.json_payload(plan.input, f"steps[{i}].input")
        return plans

    def error_text(self, value: str, field: str = "error") -> str:
        """A step's error message."""
        if not value.strip():
            raise InvalidInputError(field, "must not be empty")
        if len(value) > self.error_chars:
            raise InvalidInputError(field, f"must be at most {self.error_chars} characters")
        return storable(value, field)

    def json_payload(self, value: Any, field: str, most: int | None = None) -> Any:
        """A client's JSON value: at most ``json_depth`` levels deep, numbers both
        databases store (finite, integers within 64 bits), text they store
        (``storable``, keys too) and ``json_bytes`` (or ``most``) bytes as compact
        JSON."""
        if value is None:
            return None
        depth, stack = 0, [(value, 1)]
        while stack:
            item, level = stack.pop()
            depth = max(depth, level)
            if depth > self.json_depth:
                raise InvalidInputError(field, f"must nest at most {self.json_depth} levels deep")
            if isinstance(item, dict):
                stack.extend((v, level + 1) for v in item.values())
                stack.extend((k, level) for k in item)
            elif isinstance(item, list):
                stack.extend((v, level + 1) for v in item)
            elif isinstance(item, str):
                storable(item, field)
            elif isinstance(item, float) and not math.isfinite(item):
                # json.loads reads 1e309 as infinity, which would be stored as null.
                raise InvalidInputError(field, "holds a number too large to store as JSON")
            elif (
                isinstance(item, int)
                and not isinstance(item, bool)
                and not (INT64_MIN <= item <= INT64_MAX)
            ):
                raise InvalidInputError(field, "holds an integer past 64 bits")
        size, most = json_size(value), self.json_bytes if most is None else most
        if size > most:
            raise InvalidInputError(field, f"is {size} bytes of JSON, more than the {most} allowed")
        return value


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""The integers a JSON payload may hold: what both databases' JSON encoders keep
(one past them answered "Unexpected error." with a traceback in the log)."""


def stored_checkpoint(checkpoint_bytes: int) -> int:
    """What a checkpoint of ``checkpoint_bytes`` counts against its task's quota:
    its bytes in base64, as they are stored and answered."""
    return 4 * ((checkpoint_bytes + 2) // 3)


_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]*")


@dataclass(frozen=True)
class StepPlan:
    """A step to add to a task's plan."""

    action: str
    input: Any = None
    idempotent: bool = True


MAX_LONG = 2**53 - 1
"""The largest count or cost: the contract's ``Long``, exact as a JSON number."""
MODEL_CHARS = 200
"""The longest model name a report may give."""
MODELS_PER_STEP = 32
"""How many model names one step keeps; reports naming more are recorded without
adding a name."""


@dataclass(frozen=True)
class Report:
    """One report of spend (``SpendInput``)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0
    model: str | None = None

    def checked(self, field: str) -> Report:
        """This report, or InvalidInput naming its field (``field``: the input that
        carried it, ``spend`` or ``steps[2].spend``) when a count is negative or past
        ``MAX_LONG``, or the model name is blank, too long or not storable."""
        for name, value in (
            ("inputTokens", self.input_tokens),
            ("outputTokens", self.output_tokens),
            ("costMicros", self.cost_micros),
        ):
            if not 0 <= value <= MAX_LONG:
                raise InvalidInputError(f"{field}.{name}", f"must be between 0 and {MAX_LONG}")
        if self.model is not None and (
            not self.model.strip() or len(self.model) > MODEL_CHARS or not storable_text(self.model)
        ):
            raise InvalidInputError(f"{field}.model", f"must be 1 to {MODEL_CHARS} characters")
        return self

    @property
    def spend(self) -> SpendView:
        """The report as one call's spend."""
        return SpendView(self.input_tokens, self.output_tokens, self.cost_micros, 1)


def checked_report(report: Report | None) -> Report | None:
    """A write's optional report of spend (its ``spend`` input), checked."""
    return None if report is None else report.checked("spend")


@dataclass(frozen=True)
class StepPatch:
    """One step change inside a checkpoint: the step's new status, with its output
    (when ``set_output``) and error."""

    index: int
    status: StepStatus
    output: Any = None
    set_output: bool = False
    error: str | None = None
    reported: Mapping[str, Any] = field(default_factory=dict)
    """What else the step reports, by column (``columns.REPORTED``)."""
    spend: Report | None = None
    """What the step spent since its last report, or None."""


UNSTORABLE = "must not hold a NUL character or an unpaired surrogate"
"""What a refused text is told: neither database could store it alike."""


def storable(value: str, field: str) -> str:
    """``value``, or InvalidInput on ``field`` when it is text PostgreSQL cannot
    store (``storable_text``). Every text check of a service calls it, so a value
    is held to it whichever door it came in by (GraphQL, AG-UI, a call in
    process), not only where a body is parsed (``transport.strict_json``)."""
    if not storable_text(value):
        raise InvalidInputError(field, UNSTORABLE)
    return value


def storable_text(text: str) -> bool:
    """False for text with a NUL character or an unpaired surrogate: PostgreSQL
    stores neither and SQLite would, so both are refused before either sees them."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def known_id(value: str, kind: str) -> str:
    """An id to look up. One longer than any id can be is NotFound at once: Tortoise
    refuses to put it in a query at all; so is one no column could hold
    (``storable_text``): PostgreSQL would refuse the query."""
    if len(value) > ID_LENGTH or not storable_text(value):
        raise NotFoundError(kind, value)
    return value


def object_id(value: str | None, field: str = "id") -> str:
    """A client-chosen id, checked; a fresh UUID when the client chose none."""
    if value is None:
        return str(uuid.uuid4())
    if len(value) > ID_LENGTH or not _ID.fullmatch(value):
        raise InvalidInputError(
            field,
            f"an id is 1 to {ID_LENGTH} ASCII letters, digits or _.:@-, starting with a"
            " letter or digit",
        )
    return value


def ttl_seconds(value: int | None, default: int) -> int:
    """The session inactivity timeout to use."""
    if value is None:
        return default
    if not 1 <= value <= MAX_SESSION_TTL_SECONDS:
        raise InvalidInputError("ttlSeconds", f"must be between 1 and {MAX_SESSION_TTL_SECONDS}")
    return value


NOTE_CHARS = 1000
"""The longest reason a person may give with a decision (the contract's figure)."""


def note(value: str | None, field: str = "note") -> str | None:
    """A person's reason for a decision; a blank one is the same as none."""
    if value is None or not value.strip():
        return None
    if len(value) > NOTE_CHARS:
        raise InvalidInputError(field, f"must be at most {NOTE_CHARS} characters")
    return storable(value, field)


def step_index(value: int, total: int, field: str = "stepIndex") -> int:
    """An index into a plan of ``total`` steps."""
    if not 0 <= value < total:
        raise InvalidInputError(field, f"must be between 0 and {total - 1}, not {value}")
    return value


def encoded(value: Any) -> str:
    """A JSON value as the API answers it: compact, non-ASCII text as it is (sent as
    UTF-8). What is stored is counted in this form, so that a task's stored bytes
    bound what reading it answers (``schema.cost``)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def json_size(value: Any) -> int:
    """The size of a client's JSON value as compact UTF-8 JSON (None: 0): what the
    payload limit and the byte quotas (``quota``) both measure."""
    if value is None:
        return 0
    return len(encoded(value).encode())


def page_size(value: int, field: str = "first") -> int:
    """How many items one page may hold (``field``: the argument that asked)."""
    if not 0 <= value <= MAX_PAGE:
        raise InvalidInputError(field, f"must be between 0 and {MAX_PAGE}")
    return value


def non_negative(value: int, field: str) -> int:
    """A count that cannot go below zero."""
    if value < 0:
        raise InvalidInputError(field, "must not be negative")
    return value
