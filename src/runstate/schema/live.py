"""A taskProgress subscription as the house's relay sees it (``services.live.relay``):
how its live events render, and where they go.

The transport that runs a subscription names it in ``OPERATION`` (its text, its
variables as sent, and how to send a ``next`` frame around rendered data); the
subscription's resolver then lends its stream an ``EventFollower``. The relay
renders each event once per key (caller, document, operation, and the values of
the variables its selection uses, as ``schema.fanout`` keys its renderings) by
executing the subscription's selection on the event, as graphql-core does for
each subscriber, and sends that text to every follower of the key. An answer
with errors is not shared: the subscriber's own stream sends it, through
Strawberry, masked as ever.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from graphql import ExecutionResult, GraphQLSchema, execute, get_operation_ast
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from runstate.schema.context import Context
from runstate.schema.extensions import parse_document
from runstate.schema.fanout import selection_variables
from runstate.schema.types import TaskEvent
from runstate.services import validation
from runstate.services.live.relay import Sent
from runstate.services.views import EventView


@dataclass(frozen=True)
class LiveOperation:
    """A subscription as its transport received it."""

    query: str
    operation_name: str | None
    variables: Mapping[str, Any] | None
    send: Callable[[str], Sent]
    """Writes a ``next`` frame around the JSON text of an answer's data."""


OPERATION: ContextVar[LiveOperation | None] = ContextVar("runstate_live_operation", default=None)
"""The subscription the current task runs, set by its transport; None elsewhere."""


class EventFollower:
    """One subscriber's part in the relay: its key, its rendering, its socket."""

    def __init__(
        self, schema: GraphQLSchema, context: Context, operation: LiveOperation, max_tokens: int
    ) -> None:
        self.schema = schema
        self.context = context
        self.operation = operation
        self.document = parse_document(operation.query, max_tokens)
        found = get_operation_ast(self.document, operation.operation_name)
        used = () if found is None else selection_variables(operation.query, found)
        variables = operation.variables or {}
        self.key: Hashable = (
            context.user_id,
            operation.query,
            operation.operation_name,
            tuple((name, repr(variables.get(name))) for name in used),
        )

    async def render(self, event: EventView) -> str | None:
        result: Any = execute(
            self.schema,
            self.document,
            root_value=TaskEvent.of(event),
            context_value=self.context,
            variable_values=dict(self.operation.variables or {}),
            operation_name=self.operation.operation_name,
            executor_class=StrawberryGraphQLCoreExecutionContext,
        )
        if not isinstance(result, ExecutionResult):
            result = await result
        if result.errors or result.data is None:
            return None
        return validation.encoded(result.data)

    def send(self, text: str) -> Sent:
        return self.operation.send(text)
