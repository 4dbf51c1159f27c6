"""Fan-out that renders each event once per selection, not once per subscriber.

Every subscriber of a task in one app receives the same decoded event. Left
alone, graphql-core would execute the subscription's selection on it and the
WebSocket handler would serialise the answer for each subscriber again: with a
hundred watchers, a hundred times the work of one. Here the per-event execution
is shared: ``SharedEventExecutor`` keys it by the event (task, seq, kind), the
caller, the document text and the variables the selection uses, executes it once
and keeps the result with its JSON text; ``next_message`` then builds each
subscriber's ``next`` message around that text. SNAPSHOTs are built per
subscriber (they are its own view of the task at subscribe time) and never shared.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from graphql import ExecutionResult, OperationDefinitionNode, VariableNode, visit
from graphql.language import Visitor
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from runstate.basics import inflight
from runstate.basics.bounded import BoundedCache
from runstate.basics.enums import TaskEventKind
from runstate.services.domain import validation
from runstate.services.domain.views import EventView

MAX_ITEMS = 1024
MAX_BYTES = 16 * 1024 * 1024

Key = tuple[Any, ...]


@dataclass(frozen=True)
class Rendered:
    """One event executed for one selection, and its ``data`` as JSON text."""

    result: ExecutionResult
    text: str


class SharedEvents:
    """The rendered events of one app (its requests' context carries them), bounded
    in entries and bytes."""

    def __init__(self, max_items: int = MAX_ITEMS, max_bytes: int = MAX_BYTES) -> None:
        self.executions = 0
        """Events executed for a selection (each one also serialised once)."""
        self.unshared = 0
        """``next`` messages serialised on their own (snapshots, evicted entries)."""
        self._rendered: BoundedCache[Key, Rendered] = BoundedCache(
            max_items, max_bytes, on_evict=self._forget
        )
        self._by_data: dict[int, Rendered] = {}
        self.pending: dict[Key, asyncio.Future[ExecutionResult]] = {}
        """Executions under way: other subscribers of the same key wait for them."""

    def _forget(self, key: Key, rendered: Rendered) -> None:
        self._by_data.pop(id(rendered.result.data), None)

    def rendered(self, key: Key) -> Rendered | None:
        """The rendering kept for ``key``, if any."""
        return self._rendered.get(key)

    def store(self, key: Key, result: ExecutionResult) -> None:
        """Keep a result that every subscriber with this key may be sent."""
        self.executions += 1
        if result.errors or result.data is None:
            return
        rendered = Rendered(result, validation.encoded(result.data))
        self._rendered.put(key, rendered, len(rendered.text))
        if self._rendered.get(key) is rendered:
            self._by_data[id(result.data)] = rendered

    def next_message(self, message: Mapping[str, Any]) -> str | None:
        """The JSON of a ``next`` message whose data was rendered here, else None."""
        if message.get("type") != "next":
            return None
        payload = message.get("payload")
        if not isinstance(payload, Mapping) or set(payload) != {"data"}:
            self.unshared += 1
            return None
        rendered = self._by_data.get(id(payload["data"]))
        if rendered is None or rendered.result.data is not payload["data"]:
            self.unshared += 1
            return None
        return next_frame(message["id"], rendered.text)


def next_frame(operation_id: str, data: str) -> str:
    """A graphql-transport-ws ``next`` message around the JSON text of its data, as
    Strawberry would write it: compact, keys in the protocol's order."""
    return next_head(operation_id) + data + NEXT_TAIL


def next_head(operation_id: str) -> str:
    """What a ``next`` message's JSON text holds before its data (``NEXT_TAIL``
    after it)."""
    return f'{{"id":{json.dumps(operation_id)},"type":"next","payload":{{"data":'


NEXT_TAIL = "}}"


class SharedEventExecutor(StrawberryGraphQLCoreExecutionContext):
    """Strawberry's executor, sharing the execution of one subscription event among
    the subscribers that select the same fields of it (see the module's docstring),
    in the ``SharedEvents`` of the request's context (``Context.shared``)."""

    def execute_operation(self, serially: bool | None = None) -> Any:
        shared = getattr(self.context_value, "shared", None)
        key = _key(self)
        if key is None or not isinstance(shared, SharedEvents):
            return super().execute_operation(serially)
        rendered = shared.rendered(key)
        if rendered is not None:
            return rendered.result
        pending = shared.pending.get(key)
        if pending is not None:
            return _wait(pending)
        result = super().execute_operation(serially)
        if isinstance(result, ExecutionResult):
            shared.store(key, result)
            return result
        if not self.is_awaitable(result):  # incremental delivery: never for subscriptions
            return result
        future: asyncio.Future[ExecutionResult] = asyncio.get_running_loop().create_future()
        shared.pending[key] = future
        return _finish(shared, key, cast(Awaitable[ExecutionResult], result), future)


async def _wait(pending: asyncio.Future[ExecutionResult]) -> ExecutionResult:
    return await asyncio.shield(pending)


async def _finish(
    shared: SharedEvents,
    key: Key,
    result: Awaitable[ExecutionResult],
    future: asyncio.Future[ExecutionResult],
) -> ExecutionResult:
    done = await inflight.shared(future, result, lambda: shared.pending.pop(key, None))
    shared.store(key, done)
    return done


def _key(executor: SharedEventExecutor) -> Key | None:
    """What makes two subscribers' renderings of an event the same, or None for a
    root value that is not a shareable event."""
    view = getattr(executor.root_value, "view", None)
    operation = executor.operation
    if not isinstance(view, EventView) or view.kind is TaskEventKind.SNAPSHOT:
        return None
    if operation.loc is None:
        return None
    name = None if operation.name is None else operation.name.value
    query = operation.loc.source.body
    values = executor.variable_values.coerced
    return (
        getattr(executor.context_value, "user_id", None),
        view.task_pk,
        view.seq,
        view.kind,
        (query, name),
        tuple((used, repr(values.get(used))) for used in selection_variables(query, operation)),
    )


def selection_variables(query: str, operation: OperationDefinitionNode) -> tuple[str, ...]:
    """The variables used below the subscription field of ``operation`` (of the
    document ``query``), kept per document: what, with the caller and the document,
    makes two subscribers' renderings of an event the same."""
    name = None if operation.name is None else operation.name.value
    document = (query, name)
    names = _USED.get(document)
    if names is None:
        names = _variables_in_selection(operation)
        _USED.put(document, names, len(query))
    return names


_USED: BoundedCache[tuple[str, Any], tuple[str, ...]] = BoundedCache(MAX_ITEMS, MAX_BYTES)


class _Variables(Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def enter_variable(self, node: VariableNode, *_: object) -> None:
        self.names.add(node.name.value)


def _variables_in_selection(operation: OperationDefinitionNode) -> tuple[str, ...]:
    """Variables used below the subscription field (its own arguments, such as
    ``afterSeq``, do not change how an event renders)."""
    found = _Variables()
    for selection in operation.selection_set.selections:
        inner = getattr(selection, "selection_set", None)
        if inner is not None:
            visit(inner, found)
    return tuple(sorted(found.names))
