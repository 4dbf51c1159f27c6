"""The floors a runstate write is measured against, each an ASGI app served by
uvicorn as ``runstate serve`` is (``python -m uvicorn bench.floors:bare``):

- ``bare``: Starlette answering a JSON POST at /graphql with the version after
  the one the body expects, parsed and encoded with the standard library;
- ``trivial``: Strawberry on the same Starlette, a mutation of the same name and
  input as runstate's startStep and completeStep that does no more than that
  (parser and validation caches on, as runstate has them);
- ``executed``: the same schema executed by graphql-core from a bare Starlette
  route, each document parsed and validated once: what Strawberry's HTTP view and
  its ``Schema.execute`` (extensions, context, result processing) add to the
  execution itself is the distance from this floor to ``trivial``.

Both take the very requests ``bench/wrk_writes.lua`` sends runstate.
"""

from __future__ import annotations

import json
from typing import Any

import strawberry
from graphql import DocumentNode, ExecutionResult, execute, parse, validate
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


_documents: dict[str, DocumentNode] = {}


async def _executed(request: Request) -> Response:
    body = json.loads(await request.body())
    query = body["query"]
    document = _documents.get(query)
    if document is None:
        document = parse(query)
        if validate(schema._schema, document):
            return Response(status_code=400)
        _documents[query] = document
    result: Any = execute(schema._schema, document, variable_values=body.get("variables"))
    if not isinstance(result, ExecutionResult):
        result = await result
    answer: dict[str, Any] = {"data": result.data}
    if result.errors:
        answer["errors"] = [error.formatted for error in result.errors]
    return Response(json.dumps(answer), media_type="application/json")


executed = Starlette(routes=[Route("/graphql", _executed, methods=["POST"])])
