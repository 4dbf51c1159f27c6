"""Operations bounded by what they could answer, before they run (``schema.cost``).

An operation whose estimate passes ``RUNSTATE_MAX_NODES`` objects or
``RUNSTATE_MAX_RESPONSE_BYTES`` bytes is refused with ``RESPONSE_TOO_LARGE``,
naming the limit, the estimate and the maximum; nothing of it runs. One that
passes pays its estimate from the caller's rate budget (``ratelimit``), so large
reads sent together run out of points instead of taking the server's memory.

Each document is first estimated at the most the limits allow, which reads
nothing and is kept per document: a write answering its task's version and
status (what the SDK asks) stays under every limit and costs no points that way,
and needs nothing more. Otherwise the sizes are read (``lookups.task_sizes``,
``quota.held`` for a list: one or two indexed SELECTs) and the operation estimated
again.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterable

from graphql import DocumentNode, GraphQLSchema, OperationDefinitionNode
from strawberry.extensions import SchemaExtension
from strawberry.types.graphql import OperationType as StrawberryOperationType

from runstate.basics.bounded import BoundedCache
from runstate.schema.context import Context
from runstate.schema.cost import Estimate, Sizes, Walk, unknown_sizes
from runstate.schema.turns import Turns
from runstate.services.domain import quota, validation
from runstate.services.domain.errors import AnswerTooLargeError
from runstate.services.domain.ratelimit import ANSWER_BYTES_PER_POINT, ANSWER_OBJECTS_PER_POINT
from runstate.services.domain.validation import ContentLimits
from runstate.services.read import lookups

DocumentKey = tuple[str, str | None]
"""A document's text and the operation it runs."""


class Bounds:
    """The limits, and the estimates at the most they allow, kept per document."""

    def __init__(
        self,
        *,
        limits: ContentLimits,
        max_nodes: int,
        max_bytes: int,
        max_body_bytes: int,
        burst: float,
        turns: Turns | None = None,
    ):
        self.limits = limits
        self.max_nodes = max_nodes
        self.max_bytes = max_bytes
        self.max_body_bytes = max_body_bytes
        self.burst = math.floor(burst)
        self.unsized: BoundedCache[DocumentKey, Estimate] = BoundedCache(256, 4 * 1_048_576)
        self.heavy = turns or Turns()

    def check(self, estimate: Estimate) -> None:
        """Raise ``AnswerTooLargeError`` for an estimate past a limit."""
        if estimate.objects > self.max_nodes:
            raise AnswerTooLargeError(
                "RUNSTATE_MAX_NODES", estimate.objects, self.max_nodes, "objects"
            )
        if estimate.bytes > self.max_bytes:
            raise AnswerTooLargeError(
                "RUNSTATE_MAX_RESPONSE_BYTES", estimate.bytes, self.max_bytes, "bytes"
            )

    def points(self, estimate: Estimate) -> int:
        """What an estimate costs beyond the operation's own price, at most the whole
        burst (a read larger than the budget still runs, taking all of it)."""
        points = estimate.bytes // ANSWER_BYTES_PER_POINT
        points += estimate.objects // ANSWER_OBJECTS_PER_POINT
        return min(points, self.burst)

    def free(self, estimate: Estimate, charging: bool) -> bool:
        """Whether an estimate is within every limit and, when the rate limit is on
        (``charging``), costs nothing."""
        return (
            estimate.objects <= self.max_nodes
            and estimate.bytes <= self.max_bytes
            and not (charging and self.points(estimate))
        )

    def at_most(self, walk: Walk, key: DocumentKey) -> Estimate:
        """The walk's estimate at the most the limits allow, kept for its document
        when it read no variable."""
        estimate = walk.estimate(unknown_sizes(self.limits, self.max_body_bytes))
        if not walk.varied:
            self.unsized.put(key, estimate, len(key[0]))
        return estimate

    async def bound(
        self,
        schema: GraphQLSchema,
        document: DocumentNode,
        name: str | None,
        variables: dict[str, object] | None,
        caller: Context,
        query: str,
    ) -> int:
        """Refuse the operation past a limit, else charge its estimate: the points
        it paid for it. The one implementation of both paths (``BoundedAnswers``
        and ``resolvers.lean``)."""
        charging = caller.limiter is not None
        key = (query, name)
        most = self.unsized.get(key)
        if most is not None and self.free(most, charging):
            return 0  # the SDK's writes: nothing more to read or pay
        operation = _operation(document.definitions, name)
        if operation is None:
            return 0  # none or several to choose from: execution refuses it
        walk = Walk(schema, document, operation, variables, self.limits)
        if most is None and self.free(self.at_most(walk, key), charging):
            return 0
        input_bytes = len(query) + validation.json_size(variables)
        estimate = await estimate_of(walk, caller.user_id, input_bytes)
        self.check(estimate)
        points = self.points(estimate)
        if points:
            await caller.charge(points)
        return points


class BoundedAnswers(SchemaExtension):
    """Refuses an operation that could answer too much; charges one that may run,
    and runs a query whose estimate it charged in its user's turn (``Turns``)."""

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds

    async def on_execute(self) -> AsyncIterator[None]:
        context = self.execution_context
        caller = context.context
        document = context.graphql_document
        if isinstance(caller, Context) and caller.resumed:  # bounded as it began
            yield
            return
        if isinstance(caller, Context) and caller.principal is not None and document is not None:
            paid = await self.bounds.bound(
                context.schema._schema,
                document,
                context.operation_name,
                context.variables,
                caller,
                context.query or "",
            )
            if paid and context.operation_type is StrawberryOperationType.QUERY:
                async with self.bounds.heavy.turn(caller.user_id):
                    yield
                return
        yield


async def estimate_of(walk: Walk, user_id: str, input_bytes: int) -> Estimate:
    """The walk's estimate from the sizes stored for ``user_id``: the tasks it names,
    and, when it lists tasks or sessions, what the user holds."""
    tasks = await lookups.task_sizes(user_id, walk.task_ids())
    estimate = walk.estimate(Sizes(tasks=tasks, user_bytes=0, input_bytes=input_bytes))
    if not walk.listed:
        return estimate
    held = await quota.held(user_id)
    return walk.estimate(Sizes(tasks=tasks, user_bytes=held, input_bytes=input_bytes))


def _operation(definitions: Iterable[object], name: str | None) -> OperationDefinitionNode | None:
    """The operation a request runs: the one named, or the only one."""
    operations = [d for d in definitions if isinstance(d, OperationDefinitionNode)]
    if name is None:
        return operations[0] if len(operations) == 1 else None
    return next((o for o in operations if o.name is not None and o.name.value == name), None)
