"""JSON as runstate reads it from bodies and WebSocket messages: no NaN or
Infinity, no NUL or unpaired surrogate in a string, which PostgreSQL could not
store."""

from __future__ import annotations

import json
import re
from typing import Any

from runstate.services.domain.validation import storable_text

_SUSPECT = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")
"""An escape that may decode to NUL or to half of a surrogate pair."""


def strict_json(data: str | bytes) -> Any:
    """JSON as a GraphQL request may carry it, or ValueError saying what is wrong.

    Refused: bad UTF-8 or JSON, nesting deeper than Python's recursion limit, NaN
    and Infinity (not JSON, and stored they make invalid JSON), and strings with
    NUL characters or unpaired surrogates (PostgreSQL cannot store either; SQLite
    would store what PostgreSQL refuses). Refusing them here treats both databases
    alike.
    """
    try:
        parsed = json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("The request body nests too deeply") from None
    except ValueError as e:
        if isinstance(e, _ConstantError):
            raise ValueError(str(e)) from None
        raise ValueError("Unable to parse request body as JSON") from None
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _SUSPECT.search(raw) and not _clean_strings(parsed):
        raise ValueError("Strings must not contain NUL characters or unpaired surrogates")
    return parsed


class _ConstantError(ValueError):
    """NaN, Infinity or -Infinity in a JSON text."""


def _no_constant(name: str) -> object:
    raise _ConstantError(f"{name} is not a JSON number")


def _clean_strings(value: object) -> bool:
    """Whether every string in a decoded JSON value can be stored as text."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not storable_text(item):
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True
