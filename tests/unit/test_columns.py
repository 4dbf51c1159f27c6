"""Every step column has a place: a key, planned (``StepPlan``) or versioned
(``models.StepState``), so that a write knows whether to save and version it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tortoise import fields

from runstate.models import StepState, bounded
from runstate.schema.cost import payload_caps
from runstate.services.domain.columns import (
    BOUNDS,
    CHANGING,
    VERSIONED,
    bounds,
    checked_reported,
    unclassified,
)
from runstate.services.domain.errors import InvalidInputError
from runstate.services.domain.validation import ContentLimits, StepPlan


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


class SummaryVersion(StepState):
    """A history table with a reported text column, ``summary``, declared with no
    content limit: the recipe's step 1 as it was written before."""

    id = fields.IntField(primary_key=True)
    position = fields.IntField()
    seq = fields.IntField()
    summary = fields.TextField(null=True)

    class Meta:
        table = "summary_versions"


class BoundedSummaryVersion(StepState):
    """The same with ``summary`` bounded by the error's limit."""

    id = fields.IntField(primary_key=True)
    position = fields.IntField()
    seq = fields.IntField()
    summary = bounded(fields.TextField(null=True), "error_chars")

    class Meta:
        table = "bounded_summary_versions"


def test_a_reported_column_without_a_limit_stops_the_import() -> None:
    """Guards ``columns.bounds``, run at import: a sized column an agent reports
    that declares no content limit (or a limit that is no setting) is a TypeError
    naming it, so the server cannot start with a field stored at any length. Seen
    failing with the check of undeclared columns taken out of ``bounds``."""
    with pytest.raises(TypeError, match=r"SummaryVersion\.summary: an agent reports it"):
        bounds(SummaryVersion)
    misnamed = bounded(fields.TextField(null=True), "summary_chars")
    with pytest.raises(TypeError, match="summary"):
        bounds(type("Misnamed", (SummaryVersion,), {"summary": misnamed, "__module__": __name__}))


def test_a_reported_column_is_held_to_its_limit_and_estimated_at_it() -> None:
    """Guards the two readers of one declaration: a reported ``summary`` bounded by
    ``error_chars`` is refused past that many characters (InvalidInput naming
    ``summary``, or ``steps[1].summary`` in a patch) and text no database stores,
    and the answer's estimate caps it at those characters encoded; the limit
    changed in the settings moves both. Seen failing with ``checked_reported``
    passing every value, and with ``payload_caps`` given the hand list it had."""
    declared = bounds(BoundedSummaryVersion)
    assert declared == {"output": "json_bytes", "error": "error_chars", "summary": "error_chars"}
    limits = ContentLimits(error_chars=50)
    assert checked_reported(limits, {"summary": "s" * 50}, bound=declared) == {"summary": "s" * 50}
    with pytest.raises(InvalidInputError) as long:
        checked_reported(limits, {"summary": "s" * 51}, "steps[1].", bound=declared)
    assert long.value.message == "steps[1].summary: must be at most 50 characters"
    with pytest.raises(InvalidInputError) as nul:
        checked_reported(limits, {"summary": "a\x00"}, bound=declared)
    assert nul.value.field == "summary"
    caps = payload_caps(limits, declared)
    assert caps[("Step", "summary")] == 50 * 6
    assert caps[("Step", "error")] == 50 * 6
    assert caps[("Step", "output")] == limits.json_bytes


def test_the_steps_own_columns_are_bounded_by_their_declarations() -> None:
    """The step's columns as declared today: output by ``json_bytes``, error by
    ``error_chars``, and no hand-written cap for either left in ``payload_caps``."""
    assert BOUNDS == {"output": "json_bytes", "error": "error_chars"}
    limits = ContentLimits(json_bytes=100, error_chars=7)
    caps = payload_caps(limits)
    assert (caps[("Step", "output")], caps[("Step", "error")]) == (100, 42)
