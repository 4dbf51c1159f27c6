"""What every resolver of a union does the same way: refusals answered as Problem
members (``AnswerProblems``, applied by ``answered`` and ``answered_mutation``),
and a write charged and run under its idempotency key, its events published
after commit (``once``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import strawberry

from runstate.schema.context import Info
from runstate.schema.problems import AnswerProblems
from runstate.services.domain.ratelimit import WRITE_COST
from runstate.services.domain.views import Written
from runstate.services.write import idempotency

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
    """The service's answer to a mutation, charged to the caller's budget: with
    ``input.idempotencyKey``, a repeat answers as the first call did and writes
    nothing (``services.idempotency``). The operation is the mutation's name; its
    fingerprint covers the input without the key. ``kind`` is the type of the
    service's answer, to read a stored one back. Once the write has committed, its
    events are published through the app's house (``idempotency.once``): the one
    place a mutation's events are published."""
    await info.context.charge(WRITE_COST)
    payload = {k: v for k, v in dataclasses.asdict(input).items() if k != "idempotency_key"}
    call = idempotency.keyed(info.context.user_id, input.idempotency_key, info.field_name, payload)
    ttl = info.context.settings.idempotency_ttl
    return await idempotency.once(info.context.house, call, ttl, kind, write)
