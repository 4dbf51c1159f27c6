"""Hostile input in every argument position of the schema: each field and mutation
of Query and Mutation, as introspection describes them, gets strings, booleans,
objects, lists, null, huge numbers, floats and over-long texts where each of its
arguments (and each field of an input object, each item of a list) goes, as
literals in the document and as variables. Every answer is a validation error or
a typed Problem: never "Unexpected error.", never a traceback in the server log.

The other arguments hold plausible values (the caller's own session and task
ids, base64 payloads, ...), so a hostile value reaches the services, not only
the validation of the document."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLScalarType,
    build_client_schema,
    introspection_from_schema,
    is_leaf_type,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runstate.resolvers.build import build_schema
from tests.integration.test_api import create_task, start_session
from tests.support import Api, Server, create_token, server_on, sqlite_server

SCHEMA = build_client_schema(introspection_from_schema(build_schema()._schema))
"""The schema as a client learns it: from introspection."""

MASKED = "Unexpected error."

HOSTILE_LITERALS = [
    '"x"',
    '""',
    "true",
    "false",
    "null",
    "{a: 1}",
    "{}",
    '[1, "x"]',
    "[]",
    "1.5",
    "-0.0",
    "1e400",
    "0",
    "-1",
    "2147483648",
    "9223372036854775808",
    "99999999999999999999999",
    "-99999999999999999999999",
    "FOO",
    '"2024-13-45T99:00:00"',
    '"' + "c" * 70 + '"',
    '"' + "c" * 300 + '"',
    '"' + "é" * 5000 + '"',
    '"\\u0000"',
]
"""GraphQL literals of every kind, wrong for most positions and right for some."""

HOSTILE_VALUES: list[Any] = [
    "x",
    "",
    True,
    None,
    {"a": 1},
    {},
    [1, "x"],
    [],
    1.5,
    -0.0,
    1e300,
    0,
    -1,
    2**31,
    2**63,
    2**80,
    -(2**80),
    "c" * 70,
    "c" * 300,
    "\u0000",
    "2024-13-45T99:00:00",
]
"""JSON variable values of every kind."""


@dataclass(frozen=True)
class Position:
    """Where a value goes: ``path`` from an argument of ``root``'s field ``field``
    (input object fields by name, a list's item as 0)."""

    root: str
    field: str
    path: tuple[str | int, ...]

    def __str__(self) -> str:
        return f"{self.root}.{self.field}({'.'.join(map(str, self.path))})"


def _bare(kind: GraphQLInputType) -> GraphQLInputType:
    return kind.of_type if isinstance(kind, GraphQLNonNull) else kind


def _paths(kind: GraphQLInputType, depth: int = 0) -> Iterator[tuple[str | int, ...]]:
    """Every place under a value of ``kind`` (itself first), to a bounded depth."""
    yield ()
    bare = _bare(kind)
    if depth > 4:
        return
    if isinstance(bare, GraphQLList):
        for path in _paths(bare.of_type, depth + 1):
            yield (0, *path)
    elif isinstance(bare, GraphQLInputObjectType):
        for name, field in bare.fields.items():
            for path in _paths(field.type, depth + 1):
                yield (name, *path)


def _roots() -> Iterator[tuple[str, Any]]:
    for root in (SCHEMA.query_type, SCHEMA.mutation_type):
        assert root is not None
        yield root.name, root


POSITIONS = [
    Position(root_name, name, (arg_name, *path))
    for root_name, root in _roots()
    for name, field in root.fields.items()
    for arg_name, arg in field.args.items()
    for path in _paths(arg.type)
]


def _type_at(position: Position) -> GraphQLInputType:
    """The input type at ``position``."""
    root = SCHEMA.query_type if position.root == "Query" else SCHEMA.mutation_type
    assert root is not None
    kind: GraphQLInputType = root.fields[position.field].args[str(position.path[0])].type
    for step in position.path[1:]:
        bare = _bare(kind)
        if isinstance(bare, GraphQLList):
            kind = bare.of_type
        else:
            assert isinstance(bare, GraphQLInputObjectType)
            kind = bare.fields[str(step)].type
    return kind


@dataclass(frozen=True)
class Ids:
    """The fuzzer's own session and task: plausible ids for every position."""

    session: str
    task: str


def _plausible(kind: GraphQLInputType, name: str, field: str, ids: Ids) -> str:
    """A literal of ``kind`` a service could take, for the argument or input field
    ``name`` of root field ``field``."""
    bare = _bare(kind)
    if isinstance(bare, GraphQLList):
        return f"[{_plausible(bare.of_type, name, field, ids)}]"
    if isinstance(bare, GraphQLInputObjectType):
        inner = [
            f"{n}: {_plausible(f.type, n, field, ids)}"
            for n, f in bare.fields.items()
            if isinstance(f.type, GraphQLNonNull)
        ]
        return "{" + ", ".join(inner) + "}"
    if isinstance(bare, GraphQLEnumType):
        return str(next(iter(bare.values)))
    assert isinstance(bare, GraphQLScalarType)
    return _scalar(bare.name, name, field, ids)


def _scalar(kind: str, name: str, field: str, ids: Ids) -> str:
    if kind == "ID":
        if field.startswith("delete"):
            return '"gone"'  # the fuzz deletes nothing of its own
        if "session" in name.lower() or ("session" in field.lower() and name == "id"):
            return json.dumps(ids.session)
        return json.dumps(ids.task)
    if kind == "String":
        return '"eA=="' if name == "payload" else '"json"' if name == "type" else '"x"'
    return {
        "Int": "0",
        "Long": "1",
        "Float": "1.0",
        "Boolean": "false",
        "DateTime": '"2030-01-01T00:00:00Z"',
        "JSON": "{}",
    }[kind]


def _with(
    kind: GraphQLInputType,
    path: tuple[str | int, ...],
    hostile: str,
    name: str,
    field: str,
    ids: Ids,
) -> str:
    """A literal of ``kind`` holding ``hostile`` at ``path``, plausible elsewhere."""
    if not path:
        return hostile
    bare = _bare(kind)
    if isinstance(bare, GraphQLList):
        return f"[{_with(bare.of_type, path[1:], hostile, name, field, ids)}]"
    assert isinstance(bare, GraphQLInputObjectType)
    parts = []
    for n, f in bare.fields.items():
        if n == path[0]:
            parts.append(f"{n}: {_with(f.type, path[1:], hostile, n, field, ids)}")
        elif isinstance(f.type, GraphQLNonNull):
            parts.append(f"{n}: {_plausible(f.type, n, field, ids)}")
    return "{" + ", ".join(parts) + "}"


def document(position: Position, hostile: str, ids: Ids, declare: str = "") -> str:
    """The operation calling ``position``'s field with ``hostile`` at its place."""
    root = SCHEMA.query_type if position.root == "Query" else SCHEMA.mutation_type
    assert root is not None
    field = root.fields[position.field]
    arguments = []
    for arg_name, arg in field.args.items():
        if arg_name == position.path[0]:
            value = _with(arg.type, position.path[1:], hostile, arg_name, position.field, ids)
            arguments.append(f"{arg_name}: {value}")
        elif isinstance(arg.type, GraphQLNonNull):
            arguments.append(f"{arg_name}: {_plausible(arg.type, arg_name, position.field, ids)}")
    called = position.field + (f"({', '.join(arguments)})" if arguments else "")
    selection = "" if is_leaf_type(_bare(field.type)) else " { __typename }"
    operation = "query" if position.root == "Query" else "mutation"
    return f"{operation}{declare} {{ {called}{selection} }}"


@pytest.fixture(scope="module")
def literal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with sqlite_server(tmp_path_factory, "literals", RUNSTATE_RATE_LIMIT="false") as server:
        yield server


@contextmanager
def caller(server: Server) -> Iterator[tuple[Api, Ids]]:
    """The fuzzer, with a session and a task of its own."""
    with Api(server.url, create_token(server.database_url, "hostile")) as api:
        session = start_session(api)["id"]
        yield api, Ids(session, create_task(api, session, steps=2)["id"])


@pytest.fixture(scope="module")
def hostile(literal_server: Server) -> Iterator[tuple[Api, Ids]]:
    with caller(literal_server) as fuzzer:
        yield fuzzer


def unclean(api: Api, body: dict[str, Any]) -> str | None:
    """What is wrong with the answer to ``body`` (None: a validation error or data,
    nothing masked)."""
    response = api.post(body)
    if response.status_code not in (200, 400) or MASKED in response.text:
        return f"{body['query'][:200]} -> {response.status_code} {response.text[:200]}"
    return None


def assert_clean(api: Api, body: dict[str, Any]) -> None:
    """The answer to ``body`` is a validation error or data, never a masked one."""
    assert unclean(api, body) is None


def test_the_positions_cover_every_argument() -> None:
    """Guards the fuzz's reach: every argument of every field and mutation, and
    every field of their input objects, is a position."""
    arguments = {(p.root, p.field, p.path[0]) for p in POSITIONS}
    expected = {
        (root_name, name, arg)
        for root_name, root in _roots()
        for name, field in root.fields.items()
        for arg in field.args
    }
    assert arguments == expected
    assert len(POSITIONS) > 300


SCALAR_POSITIONS = {
    _bare(_type_at(p)).name: p  # type: ignore[union-attr]
    for p in reversed(POSITIONS)
    if isinstance(_bare(_type_at(p)), GraphQLScalarType | GraphQLEnumType)
}
"""One position of each scalar and enum type (the first in the schema's order)."""


@pytest.mark.parametrize("kind", sorted(SCALAR_POSITIONS))
def test_every_hostile_literal_of_each_scalar_is_refused_cleanly(
    hostile: tuple[Api, Ids], kind: str
) -> None:
    """Guards each scalar's parsing of literals (``Long``, ``JSON``, ``DateTime`` and
    the built-in ones): a ``Long`` given as a string, a bool or an object was a
    ValueError out of its parser, masked as "Unexpected error." with a traceback
    (205 of 211 tracebacks of an HTTP fuzz). Seen failing on Long."""
    api, ids = hostile
    answers = (
        unclean(api, {"query": document(SCALAR_POSITIONS[kind], literal, ids)})
        for literal in HOSTILE_LITERALS
    )
    assert [a for a in answers if a is not None] == []


TEXT_POSITIONS = [
    p for p in POSITIONS if getattr(_bare(_type_at(p)), "name", None) in ("ID", "String")
]
"""Every place an id or a text goes."""
LONG_TEXTS = {
    "ID": ['"' + "c" * 65 + '"', '"' + "c" * 1000 + '"', '"a\\u0000b"'],
    "String": ['"' + "c" * 1100 + '"', '"' + "c" * 65 + '/1"', '"a\\u0000b"'],
}
"""Ids one past their column (64 characters) and far past it, texts past any
column (a LangGraph namespace holds 1,024), a cursor of an over-long id, and a
NUL (which PostgreSQL cannot store in text)."""


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_ids_and_texts_past_their_columns_are_refused_cleanly(
    kind: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Guards ids and texts longer than the columns they are looked up in or stored
    to, on both backends: a 65-character checkpointId of one's own thread (or a
    ``before`` bound) was Tortoise's ValidationError (a CharField's max_length),
    masked as "Unexpected error." with a traceback. Each is now InvalidInput or
    NotFound (``validation.known_id``, ``storable``), and the log holds no
    traceback. Seen failing on ``graphCheckpoint`` and ``graphCheckpoints``."""
    with (
        server_on(kind, tmp_path_factory, "texts", RUNSTATE_RATE_LIMIT="false") as server,
        caller(server) as (api, ids),
    ):
        answers = (
            unclean(api, {"query": document(position, literal, ids)})
            for position in TEXT_POSITIONS
            for literal in LONG_TEXTS[_bare(_type_at(position)).name]  # type: ignore[union-attr]
        )
        assert [a for a in answers if a is not None] == []
        assert api("{ __typename }") == {"__typename": "Query"}  # the log is written
        assert "Traceback" not in server.log_path.read_text()


EXAMPLES = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
"""Each hypothesis test below: 300 examples on the module's one server."""


@EXAMPLES
@given(position=st.sampled_from(POSITIONS), literal=st.sampled_from(HOSTILE_LITERALS))
def test_hostile_literals_anywhere_get_clean_answers(
    hostile: tuple[Api, Ids], position: Position, literal: str
) -> None:
    """Guards every argument position against literals of the wrong kind, too long
    or too large: each answer is a validation error or a typed Problem."""
    api, ids = hostile
    assert_clean(api, {"query": document(position, literal, ids)})


@EXAMPLES
@given(position=st.sampled_from(POSITIONS), value=st.sampled_from(HOSTILE_VALUES))
def test_hostile_variables_anywhere_get_clean_answers(
    hostile: tuple[Api, Ids], position: Position, value: Any
) -> None:
    """Guards every argument position against variables of the wrong kind, too
    long or too large, declared with the position's own type."""
    api, ids = hostile
    declare = f"($v: {_type_at(position)})"
    query = document(position, "$v", ids, declare)
    assert_clean(api, {"query": query, "variables": {"v": value}})


def test_the_server_logged_no_traceback(literal_server: Server, hostile: tuple[Api, Ids]) -> None:
    """Runs after the fuzz above (pytest keeps the file's order): whatever it sent,
    the server logged no unexpected failure."""
    api, _ = hostile
    assert api("{ __typename }") == {"__typename": "Query"}  # the log is written
    assert "Traceback" not in literal_server.log_path.read_text()
