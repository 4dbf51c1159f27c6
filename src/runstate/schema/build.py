"""The Schema with its extensions: parser and validation caches, limits, error masking."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import strawberry
from graphql import GraphQLError
from strawberry.extensions import (
    DisableIntrospection,
    MaskErrors,
    MaxAliasesLimiter,
    MaxTokensLimiter,
    ParserCache,
    QueryDepthLimiter,
    SchemaExtension,
    ValidationCache,
)

from runstate.resolvers.mutations import Mutation
from runstate.resolvers.queries import Query
from runstate.resolvers.subscriptions import Subscription
from runstate.schema.fanout import SharedEventExecutor
from runstate.services.errors import DomainError

MAX_DEPTH = 12
MAX_ALIASES = 30
MAX_TOKENS = 5000


def _should_mask(error: GraphQLError) -> bool:
    """Hide unexpected failures; let syntax, validation and service refusals through."""
    original = error.original_error
    return original is not None and not isinstance(original, DomainError | GraphQLError)


class MaskUnexpectedErrors(MaskErrors):
    """Strawberry's MaskErrors, finding a result's errors by attribute.

    MaskErrors runs for every message of every subscription, and tests each
    result with ``isinstance`` against a runtime-checkable Protocol, which is slow:
    8% of a server's time with 100 watchers of one task (py-spy). Overrides a
    private method of MaskErrors; ``tests/unit/test_masking.py`` checks that
    unexpected errors are still masked.
    """

    def _process_result(self, result: object) -> None:
        errors = getattr(result, "errors", None)
        if errors:
            result.errors = self._process_errors(errors)  # type: ignore[attr-defined]


def build_schema(*, introspection: bool = True) -> strawberry.Schema:
    """The runstate GraphQL schema; ``introspection=False`` refuses schema queries."""
    # Classes or factories, never instances: Strawberry builds a fresh one per request.
    extensions: list[type[SchemaExtension] | Callable[[], SchemaExtension]] = [
        ParserCache,
        ValidationCache,
        partial(QueryDepthLimiter, max_depth=MAX_DEPTH),
        partial(MaxAliasesLimiter, max_alias_count=MAX_ALIASES),
        partial(MaxTokensLimiter, max_token_count=MAX_TOKENS),
        partial(MaskUnexpectedErrors, should_mask_error=_should_mask),
    ]
    if not introspection:
        extensions.append(DisableIntrospection)
    return strawberry.Schema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        extensions=extensions,
        execution_context_class=SharedEventExecutor,
    )


schema = build_schema()
