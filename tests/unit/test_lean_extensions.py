"""The schema's extensions and the lean path's steps are one list
(``Schema.duties``, declared in ``resolvers.build``): each extension the standard
path runs on every request has what the lean path (``resolvers.lean``) does in its
place, and an extension without one stops the lean path from being built, so the
app does not start, rather than the lean path skipping what the extension does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from graphql.validation import NoSchemaIntrospectionCustomRule
from strawberry.extensions import SchemaExtension

from runstate.observe.metrics import Metrics
from runstate.resolvers.build import build_schema
from runstate.resolvers.lean import Lean
from runstate.schema.extensions import (
    Bounded,
    Counted,
    Duty,
    Masked,
    MaskUnexpectedErrors,
    NotNeeded,
    WithinTokens,
    WithRules,
)
from runstate.settings import Settings
from runstate.transport.trusted import Trusted


@pytest.mark.parametrize("introspection", [True, False])
def test_every_extension_the_schema_runs_has_its_lean_counterpart(introspection: bool) -> None:
    """Guards the one list both paths read: the extensions Strawberry makes for a
    request of the schema the app builds (``build_schema(settings,
    metrics=...)``, with introspection on as in development and off as in
    production; Strawberry's own additions included) are, one for one and in
    order, the extensions of the duties the lean path took its steps from. Seen
    failing with ``build_schema`` handing Strawberry one extension past its
    duties (``extensions=[..., Extra]``: the lean path refused to start, naming
    it), with ``DisableIntrospection`` left out of the duties but passed to
    Strawberry, and with ``Lean`` reading the duties but the last."""
    settings = Settings(introspection=introspection)
    schema = build_schema(settings, metrics=Metrics())
    lean = Lean(schema, Trusted.packaged().bodies.values())
    run = [type(extension).__qualname__ for extension in schema.get_extensions()]
    assert run == [duty.name for duty in lean.duties]
    assert ("DisableIntrospection" in run) is not introspection
    assert lean.writes, "the SDK's writes are compiled"


@pytest.mark.parametrize("introspection", [True, False])
def test_each_duty_gives_the_lean_path_what_its_extension_holds(introspection: bool) -> None:
    """Guards each row's two halves against holding different things: the rules the
    lean path validates with are the ones the extension adds, its token limit the
    extension's, its bounds, metrics and known fields the very objects the
    extension uses, and its masking the schema's masking. Seen failing with the
    limit rules of ``WithRules`` built a second time (other classes) and with
    ``WithinTokens`` given a limit of its own."""
    schema = build_schema(Settings(introspection=introspection), metrics=Metrics())
    for duty, made in zip(schema.duties, schema.get_extensions(), strict=True):
        match duty.lean:
            case WithRules(rules=rules):
                assert list(rules) == list(made.validation_rules)  # type: ignore[attr-defined]
            case WithinTokens(max_tokens=limit):
                assert limit == made.max_token_count == Settings().max_tokens  # type: ignore[attr-defined]
            case Bounded(bounds=bounds):
                assert bounds is made.bounds  # type: ignore[attr-defined]
            case Counted(metrics=metrics, known=known):
                assert metrics is made.metrics  # type: ignore[attr-defined]
                assert known is made.known  # type: ignore[attr-defined]
            case Masked():
                assert isinstance(made, MaskUnexpectedErrors)
            case NotNeeded(why=why):
                assert why
    lean = Lean(schema, ())
    assert lean.max_tokens == Settings().max_tokens
    assert (NoSchemaIntrospectionCustomRule in lean.rules) is not introspection


class Noted(SchemaExtension):
    """An extension with a side effect and nothing else: it counts the operations
    it sees and changes no answer, so every test of answers passes whether or not
    the lean path does the same."""

    operations = 0

    def on_operation(self) -> Iterator[None]:
        Noted.operations += 1
        yield


async def test_an_extension_without_a_lean_counterpart_stops_the_lean_path() -> None:
    """Guards ``Lean``'s check (``lean._duties``): a schema that runs one extension
    more than its duties declare (``Noted``, which the standard path runs) makes
    building the lean path raise a TypeError naming it, with the SDK's documents
    to compile and with none (``RUNSTATE_LEAN`` off builds it too), rather than
    the lean path answering without what the extension does. Seen failing with
    the check removed: ``Lean`` was built, silently without ``Noted``."""
    schema = build_schema()
    schema.extensions = (*schema.extensions, Noted)
    before = Noted.operations
    result = await schema.execute("query Seen { __typename }")
    assert result.errors is None
    assert Noted.operations == before + 1, "the standard path runs it"
    with pytest.raises(TypeError, match=r"runs Noted on every request"):
        Lean(schema, Trusted.packaged().bodies.values())
    with pytest.raises(TypeError, match=r"runs Noted on every request"):
        Lean(schema, ())


def test_a_duty_whose_counterpart_the_lean_path_does_not_know_stops_it() -> None:
    """Guards the same check for a row whose lean half is none of the counterparts
    ``resolvers.lean`` knows (here None): a TypeError naming the extension, never
    a step skipped. Seen failing with that part of the check removed (the
    ``match`` of ``Lean._take`` then failed on an assertion, naming nothing)."""
    schema = build_schema()
    last = schema.duties[-1]
    schema.duties = (*schema.duties[:-1], Duty(last.extension, None))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=f"knows no counterpart of {last.name}"):
        Lean(schema, ())
