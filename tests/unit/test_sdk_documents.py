"""The SDK's documents, written from its dataclasses, are valid against the schema."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pytest
from graphql import parse, validate

from runstate.basics.enums import StepStatus
from runstate.client import documents, records
from runstate.resolvers.build import build_schema

schema = build_schema()

DOCUMENTS = {
    name: value
    for name, value in vars(documents).items()
    if isinstance(value, str) and value.startswith(("mutation", "query", "subscription"))
}


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_every_sdk_document_is_valid(name: str) -> None:
    """Guards ``records.selection``: each field of an SDK dataclass is asked for by its
    GraphQL name, so a field the schema lacks (or misspelled) fails validation here."""
    assert validate(schema._schema, parse(DOCUMENTS[name])) == []


def test_a_field_added_to_a_dataclass_is_asked_for_and_read() -> None:
    """Guards the single declaration: the field list and the decoding of an answer
    both come from the dataclass, times parsed and statuses as enums."""

    @dataclasses.dataclass(frozen=True)
    class Probe(records.Answer):
        retry_count: int
        status: StepStatus
        at: datetime | None = None
        lock: records.Lock | None = None

    assert records.selection(Probe) == (
        "retryCount status at lock { taskId holderId fencingToken expiresAt }"
    )
    lock = {
        "taskId": "t",
        "holderId": "w",
        "fencingToken": 3,
        "expiresAt": "2026-01-01T00:00:00+00:00",
    }
    probe = Probe.of({"retryCount": 2, "status": "SUCCESS", "at": None, "lock": lock})
    assert probe.status is StepStatus.SUCCESS
    assert probe.lock == records.Lock(
        "t", "w", 3, datetime.fromisoformat("2026-01-01T00:00:00+00:00")
    )
    assert Probe.of({"retryCount": 1, "status": "PENDING"}).lock is None
