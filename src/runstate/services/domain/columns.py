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

from dataclasses import fields
from typing import Any

from tortoise.fields import CharField, JSONField, TextField
from tortoise.models import Model

from runstate.models import Step, StepVersion
from runstate.services.domain.validation import StepPlan
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

SIZED = tuple(
    name
    for name in VERSIONED
    if isinstance(field := StepVersion._meta.fields_map[name], JSONField | TextField | CharField)
    and not hasattr(field, "enum_type")  # a status: one of the server's words
)
"""Versioned columns that hold what a client sent (JSON or text): each history row
counts their bytes toward the quotas (``quota.version_bytes``)."""


def unclassified(step: type[Model] = Step, plan: type[Any] = StepPlan) -> list[str]:
    """Columns of the ``step`` table that are neither a key, nor planned, nor
    versioned, and ``plan`` fields with no step column (a plan that could not be
    stored): each needs a place before a write can keep it."""
    planned = [f.name for f in fields(plan)]
    stored = sql.columns(step)
    loose = [name for name in stored if name not in (*STEP_KEYS, *planned, *VERSIONED)]
    return loose + [f"StepPlan.{name}" for name in planned if name not in stored]
