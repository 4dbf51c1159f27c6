"""The Schema class and its extensions: parser and validation caches, error masking,
metrics; and the form of the one list of them that both paths read (``Duty``: an
extension, and what the lean path does in its place). The schema itself is
assembled above the resolvers, in ``runstate.resolvers.build``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence, Set
from dataclasses import dataclass
from functools import lru_cache, partial

import strawberry
from graphql import (
    ASTValidationRule,
    DocumentNode,
    FieldNode,
    GraphQLError,
    OperationDefinitionNode,
    parse,
)
from strawberry.extensions import SchemaExtension, ValidationCache
from strawberry.types import ExecutionContext

from runstate.observe.metrics import Metrics
from runstate.schema.bounds import Bounds
from runstate.services.domain.errors import DomainError


def should_mask(error: GraphQLError) -> bool:
    """Hide unexpected failures; let syntax, validation and service refusals through."""
    original = error.original_error
    return original is not None and not isinstance(original, DomainError | GraphQLError)


MASKED = "Unexpected error."
"""What a client reads in place of an unexpected error's message."""


def masked(errors: list[GraphQLError]) -> list[GraphQLError]:
    """``errors`` as a client sees them: each unexpected one (``should_mask``)
    replaced by ``MASKED`` at its place (its locations and path kept, its cause
    dropped), the others as they are. The one masking of both paths:
    ``MaskUnexpectedErrors`` and the lean path (``resolvers.lean``)."""
    return [_anonymised(error) if should_mask(error) else error for error in errors]


def _anonymised(error: GraphQLError) -> GraphQLError:
    return GraphQLError(
        message=MASKED,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        original_error=None,
    )


CACHED_DOCUMENT_CHARS = 16_384
"""Documents longer than this are parsed and validated each time, never cached:
the caches hold 128 entries each, so their size stays bounded in bytes too
(about 128 x 16 KiB of text, with the parsed trees), whatever clients send."""


PARSED_DOCUMENTS = 128
"""How many parsed documents the parser cache keeps (Strawberry's ParserCache's
default)."""

_parsed = lru_cache(maxsize=PARSED_DOCUMENTS)(parse)
"""graphql-core's ``parse``, remembering the latest ``PARSED_DOCUMENTS``
documents: the cache ``ParseOnce`` and ``parse_document`` share, so a document
is parsed once whichever of them sees it first."""


class ParseOnce(SchemaExtension):
    """A parser cache as Strawberry's ParserCache, leaving a document it cannot
    parse (or a long one) to Strawberry.

    The cache is runstate's own (``_parsed``), not ParserCache's, whose shared
    cache is reached only through a private function of Strawberry's; the
    document a repeat gets is the same object, so the validation cache
    (``SmallValidationCache``) hits on it as before.

    ParserCache raises the syntax error (or "more than N tokens") from its hook,
    where the HTTP path catches it but the WebSocket path does not: the operation
    then ended with a bare ``complete``, no error, and a traceback in the log.
    Left unparsed, the document is parsed again by Strawberry, which answers the
    error as a GraphQL error on every transport. Only bad documents parse twice.
    """

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        if context.query is not None and len(context.query) > CACHED_DOCUMENT_CHARS:
            yield
            return
        with contextlib.suppress(GraphQLError):
            context.graphql_document = _parsed(context.query, **context.parse_options)
        yield


def parse_document(query: str, max_tokens: int) -> DocumentNode:
    """``query`` parsed as the schema parses it (within ``max_tokens``, through the
    same parser cache unless it is long), for a transport that must see a document
    before executing it; raises GraphQLError as the parser does."""
    if len(query) > CACHED_DOCUMENT_CHARS:
        return parse(query, max_tokens=max_tokens)
    document: DocumentNode = _parsed(query, max_tokens=max_tokens)
    return document


class SmallValidationCache(ValidationCache):
    """Strawberry's ValidationCache for documents up to ``CACHED_DOCUMENT_CHARS``;
    a longer one is validated by Strawberry itself, each time."""

    def on_validate(self) -> Iterator[None]:
        query = self.execution_context.query
        if query is not None and len(query) > CACHED_DOCUMENT_CHARS:
            yield
            return
        yield from super().on_validate()


class MaskUnexpectedErrors(SchemaExtension):
    """Masks the unexpected errors (``masked``) of every result: an operation's
    answer, and each result of a stream (every message of a subscription, an
    operation over a WebSocket), as Strawberry's MaskErrors does.

    Not MaskErrors itself: it runs for every message of every subscription, and
    tests each result with ``isinstance`` against a runtime-checkable Protocol,
    which is slow (8% of a server's time with 100 watchers of one task, py-spy);
    speeding it up meant overriding a private method of it. This one finds a
    result's errors by attribute, on Strawberry's public hooks alone.
    ``tests/unit/test_masking.py`` checks that unexpected errors are masked in
    answers and in subscription messages.
    """

    def __init__(self) -> None:
        self.streamed = False
        """Whether the operation's results were masked as its stream yielded them."""

    def on_operation(self) -> Iterator[None]:
        self.streamed = False
        yield
        if not self.streamed:  # a stream's results were each masked as it went
            result = self.execution_context.result
            _mask(getattr(result, "initial_result", result))

    def on_stream_result(self, result: object) -> Iterator[None]:
        self.streamed = True
        _mask(result)
        for part in getattr(result, "incremental", None) or ():  # @defer, @stream
            _mask(part)
        for part in getattr(result, "completed", None) or ():
            _mask(part)
        yield


def _mask(result: object) -> None:
    """Mask the unexpected errors of a result (of any kind: found by attribute)."""
    errors = getattr(result, "errors", None)
    if errors:
        result.errors = masked(errors)  # type: ignore[attr-defined]


class Measured(SchemaExtension):
    """Counts every operation by its top-level fields and outcome, and times
    mutations, in the app's ``Metrics``. A field the schema does not have counts as
    "-": label values stay few whatever clients send."""

    def __init__(self, known: Set[str], metrics: Metrics) -> None:
        self.known = known
        self.metrics = metrics

    def on_operation(self) -> Iterator[None]:
        began = time.perf_counter()
        yield
        context = self.execution_context
        try:
            kind = context.operation_type.value
        except RuntimeError:  # no document: it did not parse
            kind = "-"
        errors = getattr(context.result, "errors", None)
        failed = bool(errors or context.pre_execution_errors)
        counted(self.metrics, self.known, kind, context.graphql_document, failed, began)


def counted(
    metrics: Metrics,
    known: Set[str],
    kind: str,
    document: DocumentNode | None,
    failed: bool,
    began: float,
) -> None:
    """Count an operation by its top-level fields and outcome, and time a mutation
    from ``began`` (``time.perf_counter``): ``Measured``'s count, and the lean
    path's (``resolvers.lean``)."""
    outcome = "error" if failed else "ok"
    for field in _top_fields(document):
        field = field if field in known else "-"
        metrics.operations.labels(kind, field, outcome).inc()
        if kind == "mutation":
            metrics.write_seconds.labels(field).observe(time.perf_counter() - began)


def _top_fields(document: DocumentNode | None) -> list[str]:
    """The top-level field names of a document's operations ("-" when there are none)."""
    if document is None:
        return ["-"]
    names = [
        selection.name.value
        for definition in document.definitions
        if isinstance(definition, OperationDefinitionNode)
        for selection in definition.selection_set.selections
        if isinstance(selection, FieldNode)
    ]
    return names or ["-"]


@dataclass(frozen=True)
class WithinTokens:
    """The lean path parses each document within ``max_tokens`` (once, when it
    compiles it)."""

    max_tokens: int


@dataclass(frozen=True)
class WithRules:
    """The lean path validates each document with ``rules`` too, past
    graphql-core's own (once, when it compiles it)."""

    rules: Sequence[type[ASTValidationRule]]


@dataclass(frozen=True)
class Bounded:
    """The lean path bounds and charges each request of a caller with ``bounds``
    (``Bounds.bound``) before its resolver runs."""

    bounds: Bounds


@dataclass(frozen=True)
class Masked:
    """The lean path masks the unexpected errors of each answer (``masked``)."""


@dataclass(frozen=True)
class Counted:
    """The lean path counts and times each operation (``counted``) in ``metrics``."""

    metrics: Metrics
    known: Set[str]


@dataclass(frozen=True)
class NotNeeded:
    """The lean path has nothing to do in the extension's place, for ``why``."""

    why: str


Counterpart = WithinTokens | WithRules | Bounded | Masked | Counted | NotNeeded
"""What the lean path (``resolvers.lean``) does in an extension's place: at
compile time (``WithinTokens``, ``WithRules``), per request (``Bounded``,
``Masked``, ``Counted``), or nothing, with the reason (``NotNeeded``)."""

Extension = type[SchemaExtension] | Callable[[], SchemaExtension]
"""An extension as Strawberry takes it: its class, or a factory of it (a
``partial`` with its arguments), never an instance: Strawberry makes a fresh one
per request."""


@dataclass(frozen=True)
class Duty:
    """One row of the schema's one list of extensions: the extension the standard
    path runs (``extension``) and what the lean path does in its place (``lean``).
    ``resolvers.build`` declares the rows; the schema runs their extensions, and
    the lean path derives its steps from their counterparts, refusing to start
    (``TypeError``) for an extension of the schema that no row declares."""

    extension: Extension
    lean: Counterpart

    @property
    def name(self) -> str:
        """The extension's class name."""
        return extension_name(self.extension)


def extension_name(extension: object) -> str:
    """The class name of an extension as a schema holds it (a class, a ``partial``
    of one, or anything else a schema was given)."""
    made = extension.func if isinstance(extension, partial) else extension
    return str(getattr(made, "__qualname__", made))


class Schema(strawberry.Schema):
    """Strawberry's Schema, logging only unexpected errors.

    Strawberry logs every error with its traceback, so each NotFound, refused
    transition or syntax error a client caused filled the log; those are answers,
    not faults. Unexpected errors are logged in full (and masked for the client).

    ``duties`` is the list its extensions are made of, each with what the lean
    path (``resolvers.lean``) does in its place; set where the schema is built.
    """

    duties: tuple[Duty, ...] = ()

    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        unexpected = [error for error in errors if should_mask(error)]
        if unexpected:
            super().process_errors(unexpected, execution_context)
