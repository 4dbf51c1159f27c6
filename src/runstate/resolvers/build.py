"""The GraphQL API assembled: the resolvers' root types in one Schema with the
limits and extensions of the settings. It sits above the resolvers, which import
nothing from here (``make lint``'s import contracts)."""

from __future__ import annotations

from functools import partial

from graphql.validation import NoSchemaIntrospectionCustomRule
from strawberry.extensions import (
    AddValidationRules,
    DisableIntrospection,
    MaxTokensLimiter,
)
from strawberry.schema.config import StrawberryConfig

from runstate.observe.metrics import Metrics
from runstate.resolvers.mutations import Mutation
from runstate.resolvers.queries import Query
from runstate.resolvers.subscriptions import Subscription
from runstate.schema.bounds import BoundedAnswers, Bounds
from runstate.schema.extensions import (
    Bounded,
    Counted,
    Duty,
    Masked,
    MaskUnexpectedErrors,
    Measured,
    NotNeeded,
    ParseOnce,
    Schema,
    SmallValidationCache,
    WithinTokens,
    WithRules,
)
from runstate.schema.fanout import SharedEventExecutor
from runstate.schema.limits import limit_rules
from runstate.schema.spending import LONG, Long
from runstate.schema.turns import Turns
from runstate.settings import Settings


def build_schema(
    settings: Settings | None = None,
    turns: Turns | None = None,
    metrics: Metrics | None = None,
) -> Schema:
    """The runstate GraphQL schema with the limits of ``settings`` (the defaults when
    None); ``settings.introspection`` off refuses schema queries. ``turns``: whose
    heavy reads run when (``schema.turns.Turns``; a new one when None). ``metrics``:
    the app's instruments that count its operations (a registry of its own when
    None)."""
    settings = settings or Settings()
    # Built once here, so that every request hands graphql-core's validation cache
    # the same rule classes (see ``schema.limits``).
    rules = limit_rules(
        max_depth=settings.max_depth, max_aliases=settings.max_aliases, max_nodes=settings.max_nodes
    )
    known: set[str] = {"__typename", "__schema", "__type"}  # filled once the schema is built
    bounds = Bounds(
        limits=settings.content,
        max_nodes=settings.max_nodes,
        max_bytes=settings.max_response_bytes,
        max_body_bytes=settings.max_body_bytes,
        burst=settings.rate_burst,
        turns=turns,
    )
    metrics = metrics or Metrics()
    # The one list of the schema's extensions, each with what the lean path
    # (``resolvers.lean``) does in its place: Strawberry runs the extensions, the
    # lean path derives its steps from the counterparts, and refuses to start for
    # an extension of the schema no row declares. Classes or partials, never
    # instances: Strawberry builds a fresh extension per request.
    duties = [
        Duty(
            ParseOnce,
            NotNeeded("a trusted write is parsed once, when the app starts: no parse to cache"),
        ),
        Duty(
            SmallValidationCache,
            NotNeeded("a trusted write is validated once, when the app starts: none to cache"),
        ),
        Duty(partial(AddValidationRules, rules), WithRules(rules)),
        Duty(
            partial(MaxTokensLimiter, max_token_count=settings.max_tokens),
            WithinTokens(settings.max_tokens),
        ),
        Duty(partial(BoundedAnswers, bounds), Bounded(bounds)),
        Duty(MaskUnexpectedErrors, Masked()),
        Duty(partial(Measured, known, metrics), Counted(metrics, known)),
    ]
    if not settings.introspection:
        duties.append(Duty(DisableIntrospection, WithRules([NoSchemaIntrospectionCustomRule])))
    built = Schema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        extensions=[duty.extension for duty in duties],
        execution_context_class=SharedEventExecutor,
        config=StrawberryConfig(scalar_map={Long: LONG}),
    )
    built.duties = tuple(duties)
    roots = (built._schema.query_type, built._schema.mutation_type, built._schema.subscription_type)
    known.update(name for root in roots if root is not None for name in root.fields)
    return built
