"""Typed values read back from JSON, led by type hints: times from ISO text, enums
from their values, tuples from lists, optionals, and dataclasses by a reader of
the caller's (the services' views are keyed by field name, the SDK's snapshots by
GraphQL's camelCase). Shared by ``services.domain.views`` and ``client.models``."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from dataclasses import is_dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Union, get_args, get_origin, get_type_hints

_HINTS: dict[type, dict[str, Any]] = {}


def hints(cls: type) -> dict[str, Any]:
    """The resolved type hints of a dataclass's fields, read once per class."""
    found = _HINTS.get(cls)
    if found is None:
        found = _HINTS[cls] = get_type_hints(cls)
    return found


def without_none(hint: Any) -> Any:
    """``hint`` without its ``| None``."""
    if get_origin(hint) in (Union, types.UnionType):
        (hint,) = (a for a in get_args(hint) if a is not type(None))
    return hint


def decoded(hint: Any, value: Any, dataclass_of: Callable[[Any, Any], Any]) -> Any:
    """``value`` as the type ``hint`` says; a dataclass through ``dataclass_of``
    (its type and the JSON object)."""
    return decoder(hint, dataclass_of)(value)


@functools.cache
def decoder(hint: Any, dataclass_of: Callable[[Any, Any], Any]) -> Callable[[Any], Any]:
    """What ``decoded`` does to a value of type ``hint``, worked out once per hint
    (an answer's fields are read many times over, each by the same steps)."""
    if hint is Any:
        return _same
    hint = without_none(hint)
    if get_origin(hint) is tuple:
        item = decoder(get_args(hint)[0], dataclass_of)
        return lambda value: None if value is None else tuple(item(v) for v in value)
    if hint is datetime:
        return lambda value: None if value is None else datetime.fromisoformat(value)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return lambda value: None if value is None else hint(value)
    if isinstance(hint, type) and is_dataclass(hint):
        return lambda value: None if value is None else dataclass_of(hint, value)
    return _same


def _same(value: Any) -> Any:
    return value
