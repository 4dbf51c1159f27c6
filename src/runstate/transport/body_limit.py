"""``BodyLimit``: a request body past the limit is refused with 413 before it is
read whole.

A LangGraph checkpoint may be far larger than any other request: a request that
says it is one (``X-Runstate-Upload: graph``) may be as large as the largest
checkpoint a write may store (``RUNSTATE_MAX_CHECKPOINT_BYTES``, in base64) on top
of the usual limit. Such a request past the usual limit is marked (``LARGE``),
and the GraphQL view runs it only if it writes checkpoints and nothing else."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runstate.services.domain.validation import stored_checkpoint
from runstate.transport.http_only import HttpOnly
from runstate.transport.refusals import refusal

LARGE = "runstate.large_body"
"""Set in the scope of an upload whose body is past the usual limit."""
UPLOAD_HEADER = b"x-runstate-upload"


def upload_limit(limit: int, checkpoint_bytes: int) -> int:
    """The largest body of a checkpoint upload: the usual limit, and the largest
    checkpoint in base64."""
    return limit + stored_checkpoint(checkpoint_bytes)


class BodyLimit(HttpOnly):
    """Answers 413 to a request body larger than ``limit`` bytes, declared or
    streamed; ``upload`` bytes for a request marked as a checkpoint upload."""

    def __init__(self, app: ASGIApp, limit: int, upload: int | None = None) -> None:
        self.app = app
        self.limit = limit
        self.upload = upload or limit

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        most = self.upload if headers.get(UPLOAD_HEADER) == b"graph" else self.limit
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > most):
            await _too_large(scope, receive, send, most)
            return
        if declared is not None and int(declared) > self.limit:
            scope[LARGE] = True
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > most:
                raise _TooLargeError
            if received > self.limit:
                scope[LARGE] = True
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLargeError:
            await _too_large(scope, receive, send, most)


class _TooLargeError(Exception):
    """A streamed body went past the limit."""


async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    await refusal(413, f"request body is larger than {limit} bytes")(scope, receive, send)
