"""A subscription as the house's relay sees it (``services.live.relay``): how its
live events render, where they go, and how it starts again.

The transport that runs a subscription lends it to the operation's context
(``Context.live``): a ``LiveOperation`` with its text, its variables as sent, how to send a ``next``
frame around rendered data, and how to run the operation again. The taskProgress
and sessionActivity resolvers lend it to their streams as the relay's follower.
The relay renders each event once per key (caller, document, operation, and the
values of the variables its selection uses, as ``schema.fanout`` keys its
renderings) by executing the subscription's selection on the event, as graphql-
core does for each subscriber, and sends that text to every follower of the key.
An answer with errors is not shared: the subscription resumes, and its own
stream sends it, through Strawberry, masked as ever.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any

from graphql import ExecutionResult, GraphQLSchema, execute, get_operation_ast
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from runstate.schema.context import Context
from runstate.schema.extensions import parse_document
from runstate.schema.fanout import selection_variables
from runstate.schema.types import TaskEvent
from runstate.services.domain import validation
from runstate.services.domain.views import EventView
from runstate.services.live.relay import Position, Sent

Resume = Callable[["LiveOperation", Awaitable[object] | None], None]
"""Runs the operation again from the stored events after its ``after``, once a
frame still on its way (if any) is out."""


class LiveOperation:
    """One subscription as its transport received it, and its part in the relay:
    its key, its rendering, its socket, its resumption. Kept by the relay for as
    long as the subscriber follows it: slots, and nothing it does not need."""

    __slots__ = (
        "_resume",
        "after",
        "context",
        "document",
        "key",
        "operation_name",
        "query",
        "schema",
        "send",
        "variables",
    )

    def __init__(
        self,
        schema: GraphQLSchema,
        context: Context,
        query: str,
        operation_name: str | None,
        variables: Mapping[str, Any] | None,
        max_tokens: int,
        send: Callable[[bytes], Sent],
        resume: Resume,
    ) -> None:
        self.schema = schema
        self.context = context
        self.query = query
        self.operation_name = operation_name
        self.variables = variables
        self.send = send
        """Writes a ``next`` frame around an answer's data (JSON, UTF-8)."""
        self._resume = resume
        self.after: Position | None = None
        """Set once the relay has handed the subscription back: its stream starts
        again from there, neither charged nor bounded again (it already was)."""
        self.document = parse_document(query, max_tokens)
        found = get_operation_ast(self.document, operation_name)
        used = () if found is None else selection_variables(query, found)
        values = variables or {}
        self.key: Hashable = (
            context.user_id,
            query,
            operation_name,
            tuple((name, repr(values.get(name))) for name in used),
        )

    async def render(self, event: EventView) -> bytes | None:
        result: Any = execute(
            self.schema,
            self.document,
            root_value=TaskEvent.of(event),
            context_value=self.context,
            variable_values=dict(self.variables or {}),
            operation_name=self.operation_name,
            executor_class=StrawberryGraphQLCoreExecutionContext,
        )
        if not isinstance(result, ExecutionResult):
            result = await result
        if result.errors or result.data is None:
            return None
        return validation.encoded(result.data).encode()

    def resume(self, after: Position, sending: Awaitable[object] | None) -> None:
        self.after = after
        self._resume(self, sending)
