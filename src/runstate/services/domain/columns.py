"""A step's columns by what they are for, derived from the models and the plan.

Every column of ``Step`` is one of three kinds: a key (which row it is, and the
events that added and last changed it), planned (a field of ``StepPlan``, fixed
once the step is made, compared by an idempotent ``createTask``), or versioned (a
field of ``models.StepState``: saved by every write that changes the step and kept
in its history rows, ``StepVersion``). A write saves the columns it derives from
here, never a list spelled by hand, so a new column cannot be changed live and
lost in storage; ``unclassified`` names one that is none of the three, and a test
fails on it (``tests/unit/test_columns.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from tortoise.fields import CharField, JSONField, TextField
from tortoise.models import Model

from runstate.models import LIMIT, Step, StepVersion
from runstate.services.domain.errors import InvalidInputError
from runstate.services.domain.validation import ContentLimits, StepPlan, storable
from runstate.storage import sql

STEP_KEYS = ("id", "task_id", "position", "created_seq", "changed_seq")
"""The columns that place a step row: its id, task, index, and the events that
added it and last changed it."""

VERSION_KEYS = ("id", "task_id", "position", "seq")
"""The columns that place a history row: its id, and the step and event it is of."""

PLANNED = tuple(f.name for f in fields(StepPlan))
"""A step's plan: what ``createTask`` and ``addSteps`` make it of, never changed."""

VERSIONED = sql.columns(StepVersion, *VERSION_KEYS)
"""What a step's history row keeps of the step after a change."""

CHANGING = tuple(name for name in sql.columns(Step, *STEP_KEYS) if name not in PLANNED)
"""The columns of a step row that a write saves when it changes the step (with
``changed_seq``): every one but its keys and its plan."""

MANAGED = (
    "status",
    "attempts",
    "started_at",
    "completed_at",
    "output",
    "error",
    "input_tokens",
    "output_tokens",
    "cost_micros",
    "calls",
    "models",
)
"""Versioned columns each write sets by its own rules: the state machine's, a
step's output and error, and its spend (added up, ``spend.add``)."""

REPORTED = tuple(name for name in VERSIONED if name not in MANAGED)
"""Versioned columns an agent reports as they are, at ``completeStep`` or in a
checkpoint's patch: an input field of the same name carries each (a write's
``Draft.report``), with no service edited for a new one."""


def sized(model: type[Model] = StepVersion) -> tuple[str, ...]:
    """Versioned columns of ``model`` that hold what a client sent (JSON or text)."""
    return tuple(
        name
        for name in sql.columns(model, *VERSION_KEYS)
        if isinstance(field := model._meta.fields_map[name], JSONField | TextField | CharField)
        and not hasattr(field, "enum_type")  # a status: one of the server's words
    )


SIZED = sized()
"""Versioned columns that hold what a client sent (JSON or text): each history row
counts their bytes toward the quotas (``quota.version_bytes``)."""


def bounds(model: type[Model] = StepVersion) -> dict[str, str]:
    """The content limit each sized column of ``model`` declares (``models.bounded``),
    by column; TypeError naming a column an agent reports that declares none (or
    names no ``ContentLimits`` setting of characters or bytes): a reported value
    with no bound would be stored at any length, and answered past any estimate."""
    declared = {name: getattr(model._meta.fields_map[name], LIMIT, None) for name in sized(model)}
    for name, limit in declared.items():
        unbounded = limit is None and name not in MANAGED
        unknown = limit is not None and (
            not isinstance(getattr(ContentLimits, limit, None), int)
            or not limit.endswith(("_chars", "_bytes"))
        )
        if unbounded or unknown:
            raise TypeError(
                f"{model.__name__}.{name}: an agent reports it, so it declares its content"
                " limit: models.bounded(field, '<a ContentLimits setting, _chars or _bytes>')"
            )
    return {name: limit for name, limit in declared.items() if limit is not None}


BOUNDS = bounds()
"""Each sized step column's content limit, by column: what ``checked_reported``
holds a reported value to and what ``schema.cost`` estimates an answer of it at.
Computed at import, so a reported column declared without one stops the server
from starting."""


def camel(name: str) -> str:
    """A column's name as the API spells its field (``tokens_used``: ``tokensUsed``)."""
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def checked_reported(
    limits: ContentLimits,
    reported: Mapping[str, Any],
    field: str = "",
    bound: Mapping[str, str] = BOUNDS,
) -> Mapping[str, Any]:
    """``reported`` (a write's values of reported columns), or InvalidInput naming the
    first one past its column's limit (``field``: what the input's names sit under,
    ``steps[2].``): text by its characters and ``storable``, JSON by
    ``json_payload`` to the limit's bytes."""
    for name, value in reported.items():
        limit = bound.get(name)
        if value is None or limit is None:
            continue
        where, most = f"{field}{camel(name)}", getattr(limits, limit)
        if limit.endswith("_bytes"):
            limits.json_payload(value, where, most)
        elif len(value) > most:
            raise InvalidInputError(where, f"must be at most {most} characters")
        else:
            storable(value, where)
    return reported


def unclassified(step: type[Model] = Step, plan: type[Any] = StepPlan) -> list[str]:
    """Columns of the ``step`` table that are neither a key, nor planned, nor
    versioned, and ``plan`` fields with no step column (a plan that could not be
    stored): each needs a place before a write can keep it."""
    planned = [f.name for f in fields(plan)]
    stored = sql.columns(step)
    loose = [name for name in stored if name not in (*STEP_KEYS, *planned, *VERSIONED)]
    return loose + [f"StepPlan.{name}" for name in planned if name not in stored]
