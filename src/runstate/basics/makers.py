"""Constructors written out once per shape, as ``dataclasses`` writes ``__init__``:
for objects built per row or per step (views from rows, GraphQL objects from
views), one function with a keyword per field beats a loop over the fields per
object (``services.read.convert``, ``schema.types``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

Maker = Callable[[Any, Mapping[str, Any]], Any]
"""``make(source, given)``: the object, from ``source`` and the fields ``given``."""

NO_NAMES: frozenset[str] = frozenset()


def given_names(given: Mapping[str, Any]) -> frozenset[str]:
    """The names of the fields ``given``: with the target and source types, the key
    a maker is kept under."""
    return frozenset(given) if given else NO_NAMES


def written(
    target: type, arguments: Sequence[str], given: frozenset[str], names: Mapping[str, Any]
) -> Maker:
    """``target(<arguments>, <name>=given[name] for each given name)``: the arguments
    Python keyword expressions over ``source`` and ``names``, built from field and
    column names (never from data)."""
    parts = [*arguments, *(f"{name}=given[{name!r}]" for name in sorted(given))]
    namespace: dict[str, Any] = {"Target": target, **names}
    exec(f"def make(source, given):\n    return Target({', '.join(parts)})", namespace)
    maker: Maker = namespace["make"]
    return maker
