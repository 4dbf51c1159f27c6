"""docs/writes.md, the listing of every mutation's service and what feeds each of
its parameters, is what ``runstate export-writes`` prints, and names every
mutation the schema serves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import strawberry

from runstate.cli import main
from runstate.resolvers import listing
from runstate.resolvers.build import build_schema

LISTING = Path(__file__).resolve().parents[2] / "docs" / "writes.md"


def test_the_committed_listing_is_the_commands_output(capsys: pytest.CaptureFixture[str]) -> None:
    """Guards docs/writes.md against drifting from the table: a row, a service's
    parameter or a computed value changed without writing the file again."""
    main(["export-writes"])
    printed = capsys.readouterr().out
    assert printed == LISTING.read_text(), (
        "docs/writes.md is out of date: runstate export-writes > docs/writes.md"
    )


def test_the_listing_names_every_mutation_of_the_schema() -> None:
    """Guards the listing's coverage: a section and an index line for each
    mutation the built schema serves, each naming a service, and nothing else."""
    mutation = build_schema()._schema.mutation_type
    assert mutation is not None
    text = LISTING.read_text()
    sections = re.findall(r"^## (\w+)\n\n`\1\(input: (\w+)!\): (\w+)!`\n", text, re.M)
    assert [name for name, _, _ in sections] == list(mutation.fields)
    indexed = re.findall(
        r"^\| \[`(\w+)`\]\(#(\w+)\) \| `runstate\.services\.[\w.]+` \|", text, re.M
    )
    assert indexed == [(name, name.lower()) for name in mutation.fields]
    services = re.findall(r"^- service: `runstate\.services\.[\w.]+`", text, re.M)
    assert len(services) == len(mutation.fields)


@strawberry.type
class Query:
    @strawberry.field
    def ok(self) -> bool:
        return True


@strawberry.type
class Mutation:
    @strawberry.mutation
    def plain(self) -> bool:
        return True


def test_a_mutation_that_is_no_row_of_the_table_is_named() -> None:
    """Guards the listing against leaving out, without a sound, a mutation whose
    resolver ``answers.write`` did not make."""
    with pytest.raises(LookupError, match=r"Mutation\.plain is not a row of the mutation table"):
        listing.writes(strawberry.Schema(query=Query, mutation=Mutation))


def test_each_of_two_lambdas_on_one_line_is_shown_as_written() -> None:
    """Guards the search for a computed value's text: of the lambdas starting on
    its line, the one whose body holds its code."""
    pair = {"a": lambda _, input: input.first_name, "b": lambda info, input: info.x + input.y}
    assert listing._expression(pair["a"]) == ("input.first_name", ["first_name"])
    assert listing._expression(pair["b"]) == ("info.x + input.y", ["y"])
