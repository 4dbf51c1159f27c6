"""What every resolver of a union does the same way: refusals answered as Problem
members (``AnswerProblems``, applied by ``answered`` and ``answered_mutation``),
and a write charged and run under its idempotency key, its events published
after commit (``once``, through ``services.write.door``). ``write`` makes a whole
write mutation from its service function: the resolvers of ``mutations`` are one
table of them."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

import strawberry

from runstate.schema.context import Info
from runstate.schema.problems import AnswerProblems
from runstate.services.domain.columns import REPORTED
from runstate.services.domain.views import Written, unpublished
from runstate.services.write import door

V = TypeVar("V")


def answered(**options: Any) -> Any:
    """``strawberry.field`` whose refusals are answered as Problem members."""
    return strawberry.field(extensions=[AnswerProblems()], **options)


def answered_mutation(**options: Any) -> Any:
    """``strawberry.mutation`` whose refusals are answered as Problem members."""
    return strawberry.mutation(extensions=[AnswerProblems()], **options)


async def once(
    info: Info, input: Any, kind: type[Any], write: Callable[[], Awaitable[Written[V]]]
) -> V:
    """The service's answer to a mutation, through the one door every write takes
    (``door.enter``): charged, run once per ``input.idempotencyKey`` (the
    operation is the mutation's name, the fingerprint the input without its key),
    its events published after commit. ``kind`` is the type of the service's
    answer, to read a stored one back."""
    context = info.context
    ttl = context.settings.idempotency_ttl
    caller = door.Caller(context.house, context.user_id, context.charge, ttl, context.owe)

    def fields() -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(input).items() if k != "idempotency_key"}

    return await door.enter(caller, info.field_name, input.idempotency_key, fields, kind, write)


WRITES: set[Callable[..., Awaitable[Any]]] = set()
"""The resolvers ``write`` made: they read only ``info.context`` and
``info.field_name``, so the lean path may call them itself (``resolvers.lean``)."""

CALLER = frozenset({"house", "user_id"})
"""Service parameters a write takes from its caller's context."""

UNBOUND = frozenset({"idempotency_key"})
"""Input fields no service takes: ``once`` reads them."""

Given = Mapping[str, Callable[[Info, Any], Any]]
"""Service parameters computed from the context and the input, by name."""


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the mutation table as ``write`` bound it, and as its resolver
    calls the service: what ``resolvers.listing`` prints (``runstate
    export-writes``, docs/writes.md)."""

    service: Callable[..., Awaitable[Any]]
    input_type: type[Any]
    answer: Callable[[Any], Any]
    by_name: tuple[str, ...]
    """Parameters given the input field of their own name (``reported`` too)."""
    reported: tuple[str, ...]
    """Of those, the reported columns a service's ``**reported`` takes."""
    computed: Given
    from_caller: tuple[str, ...]
    """Parameters given the caller's house and user id (``CALLER``)."""


ROWS: dict[Callable[..., Awaitable[Any]], Row] = {}
"""Each resolver ``write`` made, with its row."""


def write(
    service: Callable[..., Awaitable[Any]],
    input_type: type[Any],
    result: Any,
    answer: Callable[[Any], Any],
    *,
    given: Given | None = None,
    reads: tuple[str, ...] = (),
    kept_as: Any = None,
    **options: Any,
) -> Any:
    """A write mutation taking ``input_type`` and answering ``result`` (a union of
    ``answer``'s type and Problem members): ``service`` called with the caller's
    house and user id, each other parameter from the input field of its name or
    from ``given`` (computed, reading the input fields named in ``reads``), under
    ``once``; its value answered through ``answer``. A service that takes keywords
    (``**reported``) is given the input's fields that are columns a step reports
    (``columns.REPORTED``). A service that makes no events (it answers a view, not
    a ``Written``) is answered as writes are. ``kept_as``: the type a repeat reads a
    kept answer back as, for a service answering a union of a task (kept by
    reference) and one other view.

    Checked as the schema is built, so that nothing is lost without a sound: a
    service parameter without a default that nothing gives, and an input field no
    parameter takes, each fail naming the field.
    """
    name = service.__name__
    parameters = inspect.signature(service).parameters
    returned = get_type_hints(service)["return"]
    publishes = get_origin(returned) is Written  # else a view, answered as writes are
    kind = get_args(returned)[0] if publishes else returned
    if kept_as is not None:
        kind = kept_as
    computed = dict(given or {})
    fields = {f.name for f in dataclasses.fields(input_type)}
    by_name = [n for n in parameters if n in fields and n not in computed]
    ungiven = [
        n
        for n, p in parameters.items()
        if n not in CALLER
        and n not in by_name
        and n not in computed
        and p.default is p.empty
        and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]
    if ungiven:
        raise TypeError(f"{name}: nothing gives {ungiven} from {input_type.__name__}")
    left = fields - UNBOUND - set(by_name) - set(computed) - set(reads)
    keywords = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    reported = sorted(left & set(REPORTED)) if keywords else []
    untaken = left - set(reported)
    if untaken:
        raise TypeError(f"{input_type.__name__}: no parameter of {name} takes {sorted(untaken)}")
    row = Row(
        service,
        input_type,
        answer,
        by_name=(*by_name, *reported),
        reported=tuple(reported),
        computed=computed,
        from_caller=tuple(n for n in parameters if n in CALLER),
    )
    taken, from_caller = row.by_name, row.from_caller

    async def resolver(root: Any, info: Info, input: Any) -> Any:
        async def call() -> Written[Any]:
            # Inside ``once``: the key is checked before any input is decoded.
            arguments = {n: getattr(input, n) for n in taken}
            arguments |= {n: make(info, input) for n, make in computed.items()}
            caller = {"house": info.context.house, "user_id": info.context.user_id}
            arguments |= {n: caller[n] for n in from_caller}
            made = service(**arguments)
            return await (made if publishes else unpublished(made))

        return answer(await once(info, input, kind, call))

    resolver.__annotations__ = {"info": Info, "input": input_type, "return": result}
    resolver.__name__ = resolver.__qualname__ = name
    WRITES.add(resolver)
    ROWS[resolver] = row
    return answered_mutation(**options)(resolver)
