"""``BodyLimit``: a request body past the limit is refused with 413 before it is
read whole."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runstate.transport.refusals import refusal


class BodyLimit:
    """Answers 413 to a request body larger than ``limit`` bytes, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _too_large(scope, receive, send, self.limit)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise _TooLargeError
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLargeError:
            await _too_large(scope, receive, send, self.limit)


class _TooLargeError(Exception):
    """A streamed body went past the limit."""


async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    await refusal(413, f"request body is larger than {limit} bytes")(scope, receive, send)
