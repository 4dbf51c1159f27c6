"""The mutation table (``resolvers.answers.write``) binds each service parameter to
the input field of its name, and refuses, as the schema is built, a table row that
would lose a field: an input field no parameter takes, a parameter nothing gives."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from runstate.client.calls import wire
from runstate.resolvers.answers import write
from runstate.services.domain.views import TaskView, Written
from runstate.services.write.house import House


async def report(
    house: House,
    user_id: str,
    task_id: str,
    *,
    tokens_used: int,
    note: str | None = None,
) -> Written[TaskView]:
    """A write service whose ``tokens_used`` has no default."""
    raise AssertionError("never called here")


@dataclass
class ReportInput:
    task_id: str
    tokens_used: int
    note: str | None = None
    idempotency_key: str | None = None


@dataclass
class WiderInput(ReportInput):
    spent_micros: int = 0


@dataclass
class NarrowerInput:
    task_id: str
    idempotency_key: str | None = None


def test_a_row_whose_fields_all_reach_the_service_is_built() -> None:
    """Control: every input field is a parameter of the service (or the key)."""
    assert write(report, ReportInput, TaskView, lambda v: v) is not None


def test_an_input_field_no_parameter_takes_is_refused_by_name() -> None:
    """Guards the untaken-field check: a field added to the input alone would be
    dropped on every call."""
    with pytest.raises(
        TypeError, match=r"WiderInput: no parameter of report takes \['spent_micros'\]"
    ):
        write(report, WiderInput, TaskView, lambda v: v)


def test_a_parameter_nothing_gives_is_refused_by_name() -> None:
    """Guards the ungiven-parameter check: a service parameter without a default
    that neither an input field nor ``given`` supplies."""
    with pytest.raises(TypeError, match=r"report: nothing gives \['tokens_used'\]"):
        write(report, NarrowerInput, TaskView, lambda v: v)
    given = {"tokens_used": lambda info, input: 0}
    assert write(report, NarrowerInput, TaskView, lambda v: v, given=given) is not None


def test_the_sdk_sends_any_field_name_as_graphql_spells_it() -> None:
    """Guards ``calls.wire``: a step's reported fields and checkpoint patches go out
    in camelCase whatever their Python names (a two-word name once went out as
    it was, and the server refused the patch)."""
    patch = {"index": 0, "status": "SUCCESS", "tokens_used": 5, "started_at": None}
    assert wire(patch) == {"index": 0, "status": "SUCCESS", "tokensUsed": 5, "startedAt": None}
