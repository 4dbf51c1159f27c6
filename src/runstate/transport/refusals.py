"""Requests refused or stopped outside GraphQL, answered as GraphQL responses."""

from __future__ import annotations

import json
from collections.abc import Mapping

from starlette.responses import Response

from runstate.transport import media

ALLOWED_METHODS = "GET, POST"


def stopped_after(seconds: float) -> str:
    """What an operation stopped by the time limit answers."""
    return f"stopped after {seconds:g} s: ask for less"


def refusal(
    status: int,
    message: str,
    media_type: str = media.JSON,
    *,
    extensions: Mapping[str, object] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """A request refused (or stopped: 503) outside GraphQL, as a GraphQL response with
    one error and no ``data``; a 405 names the methods that are allowed."""
    error: dict[str, object] = {"message": message}
    if extensions is not None:
        error["extensions"] = dict(extensions)
    headers = {**(headers or {}), **({"Allow": ALLOWED_METHODS} if status == 405 else {})}
    body = json.dumps({"errors": [error]}, separators=(",", ":"))
    return Response(body, status_code=status, media_type=media_type, headers=headers)
