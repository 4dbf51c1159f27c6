"""Every step column has a place: a key, planned (``StepPlan``) or versioned
(``models.StepState``), so that a write knows whether to save and version it."""

from __future__ import annotations

from dataclasses import dataclass

from tortoise import fields

from runstate.models import StepState
from runstate.services.domain.columns import CHANGING, VERSIONED, unclassified
from runstate.services.domain.validation import StepPlan


def test_every_step_column_is_a_key_planned_or_versioned() -> None:
    """Guards the classification: none is left over, and what a write saves of a
    step row is exactly what its history keeps."""
    assert unclassified() == []
    assert set(CHANGING) == set(VERSIONED)


class LooseStep(StepState):
    """A step table with one column added beside ``StepState`` (the trap: changed by
    a write, kept by no history row)."""

    id = fields.IntField(primary_key=True)
    position = fields.IntField()
    action = fields.CharField(max_length=200)
    input = fields.JSONField[object](null=True)
    idempotent = fields.BooleanField(default=True)
    created_seq = fields.IntField(default=1)
    changed_seq = fields.IntField(default=0)
    priority = fields.IntField(default=0)

    class Meta:
        table = "loose_steps"


@dataclass(frozen=True)
class WiderPlan(StepPlan):
    """A plan with a field no step column stores."""

    deadline: str | None = None


def test_a_column_without_a_place_is_named() -> None:
    """Control: a column added to the step table alone, and a plan field with no
    column, are each named."""
    loose = unclassified(step=LooseStep)  # its plan columns are today's alone
    assert [name for name in loose if not name.startswith("StepPlan.")] == ["priority"]
    assert unclassified(plan=WiderPlan) == ["StepPlan.deadline"]
