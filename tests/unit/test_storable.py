"""The rules of what may be stored are the services' own (``domain.validation``),
not the transport's: a value that reaches a service by any door, or from a
caller in process, is held to them. ``tests/integration/test_doors.py`` holds
the doors to them from outside."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runstate.basics.enums import GraphNodeStatus, ToolOutcome
from runstate.services.actions import leases, tools
from runstate.services.domain import validation
from runstate.services.domain.errors import InvalidInputError, NotFoundError
from runstate.services.domain.validation import ContentLimits, StepPlan
from runstate.services.threads.nodes import NodeRun

LIMITS = ContentLimits()
RUNNING = GraphNodeStatus.RUNNING
UNSTORABLE = ["a\x00b", "\ud800", "x\udfff"]
"""A NUL character, and halves of a surrogate pair: text PostgreSQL cannot store."""

CHECKS: dict[str, Callable[[str], Any]] = {
    "goal": LIMITS.goal,
    "steps[0].action": lambda text: LIMITS.step_plans([StepPlan(text)]),
    "steps[0].input": lambda text: LIMITS.step_plans([StepPlan("a", {"k": [text]})]),
    "error": LIMITS.error_text,
    "note": validation.note,
    "metadata": lambda text: LIMITS.json_payload({text: 1}, "metadata"),
    "holderId": leases.checked,
    "runOf": leases.run_kind,
    "toolName": lambda text: tools._check(LIMITS, text, ToolOutcome.SUCCESS, None, None, None),
    "nodes[0].name": lambda text: NodeRun("", "k", text, GraphNodeStatus.RUNNING).checked(
        LIMITS, "nodes[0]"
    ),
}
"""Each text a service checks, by the field its refusal names."""


@pytest.mark.parametrize("field", list(CHECKS))
@pytest.mark.parametrize("text", UNSTORABLE, ids=["nul", "high", "low"])
def test_a_service_refuses_text_no_database_stores(field: str, text: str) -> None:
    """Guards ``validation.storable`` in each text check: NUL or an unpaired
    surrogate is InvalidInput naming the field, in the same words everywhere.
    Seen failing with ``storable`` made to accept everything (every case)."""
    with pytest.raises(InvalidInputError) as refused:
        CHECKS[field](text)
    assert (refused.value.field, refused.value.message) == (
        field,
        f"{field}: {validation.UNSTORABLE}",
    )


def test_an_id_no_database_stores_is_not_found() -> None:
    """Guards ``known_id``: an id holding NUL names no task (PostgreSQL would refuse
    the lookup itself)."""
    with pytest.raises(NotFoundError):
        validation.known_id("a\x00b", "task")
