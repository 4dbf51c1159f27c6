"""The floors a runstate write is measured against, each an ASGI app served by
uvicorn as ``runstate serve`` is (``python -m uvicorn bench.floors:bare``):

- ``bare``: Starlette answering a JSON POST at /graphql with the version after
  the one the body expects, parsed and encoded with the standard library;
- ``trivial``: Strawberry on the same Starlette, a mutation of the same name and
  input as runstate's startStep and completeStep that does no more than that
  (parser and validation caches on, as runstate has them).

Both take the very requests ``bench/wrk_writes.lua`` sends runstate.
"""

from __future__ import annotations

import json

import strawberry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from strawberry.asgi import GraphQL
from strawberry.extensions import ParserCache, ValidationCache
from strawberry.scalars import JSON


async def _answer(request: Request) -> Response:
    body = json.loads(await request.body())
    expected = body["variables"]["input"]["expectedVersion"]
    answer = {"data": {"step": {"version": expected + 1}}}
    return Response(json.dumps(answer), media_type="application/json")


bare = Starlette(routes=[Route("/graphql", _answer, methods=["POST"])])


@strawberry.type
class Task:
    version: int


@strawberry.input
class StepRefInput:
    task_id: strawberry.ID
    step_index: int
    expected_version: int


@strawberry.input
class CompleteStepInput:
    task_id: strawberry.ID
    step_index: int
    expected_version: int
    output: JSON | None = None


@strawberry.type
class Query:
    ok: bool = True


@strawberry.type
class Mutation:
    @strawberry.mutation
    def start_step(self, input: StepRefInput) -> Task:
        return Task(version=input.expected_version + 1)

    @strawberry.mutation
    def complete_step(self, input: CompleteStepInput) -> Task:
        return Task(version=input.expected_version + 1)


schema = strawberry.Schema(
    query=Query, mutation=Mutation, extensions=[ParserCache, ValidationCache]
)
trivial = Starlette(routes=[Route("/graphql", GraphQL(schema))])
