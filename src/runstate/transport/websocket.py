"""The graphql-transport-ws handler: each message's shape checked before it is read
(``wsmessages``: 4400 otherwise), ``connection_init`` authenticated, a cap of
connections per user (close code ``TOO_MANY_CONNECTIONS``), and the time limit of
queries and mutations sent over a WebSocket."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable
from dataclasses import replace
from functools import partial
from typing import Any, Protocol, cast, runtime_checkable

from graphql import GraphQLError, OperationType
from strawberry.asgi import ASGIWebSocketAdapter
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
    Operation,
    _OperationStreamClosed,  # private, as _send_result_stream: test_strawberry_private.py
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import (
    CompleteMessage,
    ConnectionInitMessage,
    Message,
)
from strawberry.utils.aio import aclosing

from runstate.observe import logs
from runstate.schema.context import Context
from runstate.schema.extensions import Schema
from runstate.schema.fanout import NEXT_TAIL, next_head
from runstate.schema.relayed import LiveOperation
from runstate.services.live.relay import Parked, Sent
from runstate.services.write.house import House
from runstate.settings import Settings
from runstate.transport.admission import VOUCH
from runstate.transport.callers import Tokens
from runstate.transport.connections import (
    TOO_MANY_CONNECTIONS,
    Connection,
    Connections,
    TooManyConnectionsError,
)
from runstate.transport.eager import started
from runstate.transport.operations import operation_type
from runstate.transport.refusals import stopped_after
from runstate.transport.wsmessages import MALFORMED, problem
from runstate.transport.wsprotocol import WRITE_TEXT

_TAIL = NEXT_TAIL.encode()


@runtime_checkable
class Host(Protocol):
    """What the handler needs of the view that accepted its socket
    (``view.GraphQLView``): token lookups, the per-user connection count, the
    settings, and the house whose relay delivers live events."""

    @property
    def tokens(self) -> Tokens:
        """Live tokens, looked up by digest."""

    @property
    def connections(self) -> Connections:
        """Open WebSocket connections per user."""

    @property
    def settings(self) -> Settings:
        """The app's settings."""

    @property
    def house(self) -> House:
        """The app's services."""


class TransportWS(BaseGraphQLTransportWSHandler[Context, None]):
    """graphql-transport-ws, authenticated in ``connection_init`` and counted per user.

    The caller comes from ``{"authorization": "Bearer <token>"}`` in the init payload
    (or GraphiQL's ``Authorization``); anything else closes the socket with 4403, and
    a user past ``max_connections`` on this process gets ``TOO_MANY_CONNECTIONS``.
    """

    connection: Connection | None = None
    live: dict[str, tuple[LiveOperation, Context, contextvars.Context]]
    """The connection's subscriptions by id, each with its own GraphQL context and
    the context variables it began with (a parked one is run again in them when
    the relay hands it back)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.view, Host):
            raise TypeError("a TransportWS runs under a view that is its Host")
        self.host: Host = self.view
        self.live = {}

    async def handle_message(self, message: Message) -> None:
        """Strawberry's handling of a message graphql-transport-ws allows; any other
        (``wsmessages.problem``: not an object, a ``type`` that is not a string,
        a field of the wrong type) closes the socket 4400 saying what is wrong,
        before Strawberry reads a field of it."""
        wrong = problem(cast(object, message))
        if wrong is not None:
            await self.websocket.close(MALFORMED, wrong)
            return
        await super().handle_message(message)

    async def handle_connection_init(self, message: ConnectionInitMessage) -> None:
        """Strawberry's handling of ``connection_init``, with runstate's checks in
        place of ``on_ws_connect`` (which can only answer 4403)."""
        if self.connection_timed_out:
            return
        if self.connection_init_timeout_task:
            # Let the cancelled timer go: kept, its task, traceback and frames would
            # stay for the socket's life (about 1 KB of each subscriber's memory).
            self.connection_init_timeout_task.cancel()
            self.connection_init_timeout_task = None
        payload = message.get("payload") or {}  # an object or null (``handle_message``)
        if self.connection_init_received:
            await self.websocket.close(4429, "Too many initialisation requests")
            return
        self.connection_init_received = True
        header = payload.get("authorization", payload.get("Authorization"))
        principal = await self.host.tokens.principal(header if isinstance(header, str) else None)
        if principal is None:
            await self.websocket.close(4403, "Forbidden: missing or invalid bearer token")
            return
        logs.name_user(principal.user_id)
        connection = Connection(principal.user_id, principal.token_digest, self.websocket.close)
        try:
            await self.host.connections.add(connection)
        except TooManyConnectionsError:
            await self.websocket.close(TOO_MANY_CONNECTIONS, self.host.connections.too_many)
            return
        self.connection = connection
        vouch = cast(ASGIWebSocketAdapter, self.websocket).ws.scope["extensions"].get(VOUCH)
        if vouch is not None:  # the per-user cap counts it now, not its address's
            vouch()
        self.context.connection_params = payload
        self.context.principal = principal
        await self.send_message({"type": "connection_ack"})
        self.connection_acknowledged = True

    async def run_operation(self, operation: Operation[Context, None]) -> None:
        """Strawberry's, with a query stopped after ``operation_seconds`` and answered
        with an error, as over HTTP; a mutation finishes or rolls back, and says
        which; a subscription runs as long as its client wants it, and parks with
        the house's relay when caught up."""
        seconds = self.host.settings.operation_seconds
        kind = self._kind(operation)
        if kind is OperationType.SUBSCRIPTION:
            live = LiveOperation(
                cast(Schema, self.schema)._schema,
                self.context,
                operation.query,
                operation.operation_name,
                operation.variables,
                self.host.settings.max_tokens,
                partial(self._send_next, operation, next_head(operation.id).encode()),
                partial(self._resume, operation),
            )
            # The operation's own copy of the connection's context, lending it the
            # subscription; the connection's other operations never see it.
            context = replace(self.context, live=live)
            self.live[operation.id] = live, context, contextvars.copy_context()
            await self._subscribed(operation, context)
            return
        if kind is OperationType.MUTATION:  # as over HTTP (``deadline.CancelOnDisconnect``)
            await super().run_operation(operation)
            return
        try:
            async with asyncio.timeout(seconds):
                await super().run_operation(operation)
        except TimeoutError:
            await operation.send_initial_errors([GraphQLError(stopped_after(seconds))])

    async def _subscribed(self, operation: Operation[Context, None], context: Context) -> None:
        """Run a subscription in ``context`` until it completes, or until its stream
        parks: then the relay delivers its events, and the task running it ends
        here. Strawberry's ``run_operation``, which runs every operation in the
        connection's one context, with the operation's own."""
        parked = False
        try:
            source = await self.schema.stream(
                operation.query,
                variable_values=operation.variables,
                context_value=context,
                root_value=self.root_value,
                operation_name=operation.operation_name,
            )
            async with aclosing(source):
                await self._send_result_stream(operation, source)
            await operation.send_operation_message(
                CompleteMessage(id=operation.id, type="complete")
            )
        except Parked:
            parked = True
        except _OperationStreamClosed:
            return
        except Exception as error:
            await self.handle_task_exception(error)
            with contextlib.suppress(Exception):
                await operation.send_operation_message({"id": operation.id, "type": "complete"})
            self.operations.pop(operation.id, None)
            raise
        finally:
            if not parked:
                self._forget(operation)

    def _resume(
        self,
        operation: Operation[Context, None],
        live: LiveOperation,
        sending: Awaitable[object] | None,
    ) -> None:
        """Run a parked subscription again, after the seq the relay last sent it
        (``live.after``), in a task of its own, in the context it began in."""
        entry = self.live.get(operation.id)
        if entry is None or entry[0] is not live:
            return  # it ended meanwhile
        _, context, began = entry
        operation.task = asyncio.create_task(
            self._resumed(operation, context, sending),
            context=began.copy(),  # each run its own, as each task of Strawberry's has
        )
        operation.task.add_done_callback(_retrieved)

    async def _resumed(
        self,
        operation: Operation[Context, None],
        context: Context,
        sending: Awaitable[object] | None,
    ) -> None:
        if sending is not None:
            with contextlib.suppress(Exception):
                await sending  # the frame the relay began goes out first
        await self._subscribed(operation, context)

    def _forget(self, operation: Operation[Context, None]) -> None:
        """Let an ended subscription's relay record go (if it is parked) and its entry."""
        entry = self.live.pop(operation.id, None)
        if entry is not None:
            self.host.house.relay.leave(entry[0])

    async def cleanup_operation(self, operation_id: str) -> None:
        """Strawberry's (the client completed it, or the socket closed), and the
        subscription's relay record let go: a parked one has no task to cancel."""
        operation = self.operations.get(operation_id)
        await super().cleanup_operation(operation_id)
        if operation is not None:
            self._forget(operation)

    def _send_next(self, operation: Operation[Context, None], head: bytes, data: bytes) -> Sent:
        """A ``next`` frame of ``operation`` around rendered data (``head``: what its
        JSON holds before the data, made once per operation), written now if the
        socket takes it (``eager``); False once the operation or the socket ended."""
        if operation.completed or self.operations.get(operation.id) is not operation:
            return False
        socket = cast(ASGIWebSocketAdapter, self.websocket).ws
        write = socket.scope["extensions"].get(WRITE_TEXT)
        if write is not None:
            written: bool | None = write(head, data, _TAIL)
            if written is not None:
                return written
        return started(socket.send_text((head + data + _TAIL).decode()))

    def _kind(self, operation: Operation[Context, None]) -> OperationType | None:
        """The operation's kind, parsed within the token limit and through the
        schema's parser cache, so Strawberry does not parse it again."""
        return operation_type(
            operation.query, operation.operation_name, self.host.settings.max_tokens
        )

    async def shutdown(self) -> None:
        """End the connection's operations, then stop counting it."""
        try:
            await super().shutdown()
        finally:
            if self.connection is not None:
                await self.host.connections.remove(self.connection)


def _retrieved(task: asyncio.Task[None]) -> None:
    """Take a finished task's exception, so that asyncio does not report it as
    never retrieved (``handle_task_exception`` logged it): what Strawberry does
    for its own operation tasks, in a private method of its handler."""
    if not task.cancelled():
        task.exception()
