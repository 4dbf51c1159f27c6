"""The isolation sweep: every operation that takes an id, enumerated from the schema
(so a new one cannot be forgotten), called by another user with the first user's
ids, answers exactly as it does for ids nobody has, and changes nothing."""

from __future__ import annotations

import hashlib
import re
import secrets
import sqlite3
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from graphql import (
    GraphQLEnumType,
    GraphQLField,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLScalarType,
    GraphQLUnionType,
    get_named_type,
)

from runstate.resolvers.build import build_schema
from tests.integration.test_api import create_task, start_session, step
from tests.support import (
    Api,
    Server,
    Subscriber,
    SubscriptionError,
    create_token,
    mutate,
    sqlite_server,
)

schema = build_schema()

GRAPHQL = schema._schema


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with sqlite_server(tmp_path_factory, "isolation") as srv:
        yield srv


@pytest.fixture(scope="module")
def owned(server: Server) -> Iterator[tuple[Api, dict[str, str]]]:
    """The first user, with a session and a task (one step started, so it has a
    lease-free history of two events)."""
    with Api(server.url, create_token(server.database_url, "owner")) as owner:
        session = start_session(owner)
        task = create_task(owner, session["id"], steps=2)
        step(owner, "startStep", "StepRefInput", taskId=task["id"], expectedVersion=1, stepIndex=0)
        submitted = mutate(
            owner, "submitInput", "SubmitInput", "... on Submission { id }",
            sessionId=session["id"], goal="g", steps=[{"action": "a"}],
        )  # fmt: skip
        scheduled = mutate(
            owner, "createSchedule", "CreateScheduleInput", "... on Schedule { id }",
            sessionId=session["id"], cron="@yearly", goal="g", steps=[{"action": "a"}],
        )  # fmt: skip
        yield (
            owner,
            {
                "session": session["id"],
                "task": task["id"],
                "submission": submitted["id"],
                "schedule": scheduled["id"],
            },
        )


def fresh_caller(server: Server) -> Api:
    """A new user with nothing of its own, so one call cannot change what another
    sees (a token written straight into the database: the CLI takes a second)."""
    token = "rs_" + secrets.token_urlsafe(32)
    with sqlite3.connect(server.database_url.removeprefix("sqlite://"), timeout=30) as db:
        db.execute(
            "INSERT INTO api_tokens (user_id, token_hash, created_at) VALUES (?, ?, ?)",
            (
                f"u{uuid.uuid4().hex[:12]}",
                hashlib.sha256(token.encode()).hexdigest(),
                datetime.now(UTC).isoformat(" "),
            ),
        )
    return Api(server.url, token)


def takes_an_id(type_: GraphQLInputType, seen: frozenset[str] = frozenset()) -> bool:
    named = get_named_type(type_)
    if isinstance(named, GraphQLScalarType):
        return named.name == "ID"
    if isinstance(named, GraphQLInputObjectType) and named.name not in seen:
        return any(takes_an_id(f.type, seen | {named.name}) for f in named.fields.values())
    return False


def root(kind: str) -> GraphQLObjectType:
    """The schema's query, mutation or subscription type."""
    found = {
        "query": GRAPHQL.query_type,
        "mutation": GRAPHQL.mutation_type,
        "subscription": GRAPHQL.subscription_type,
    }[kind]
    assert found is not None
    return found


def operations(kind: str) -> list[str]:
    return sorted(
        name
        for name, field in root(kind).fields.items()
        if any(takes_an_id(arg.type) for arg in field.args.values())
    )


def value(type_: GraphQLInputType, name: str, owner: str, ids: dict[str, str]) -> Any:
    """A plausible value for an argument or input field: ids from ``ids``, chosen by
    name; one element in every list; required fields of input objects only."""
    nullable = type_.of_type if isinstance(type_, GraphQLNonNull) else type_
    if isinstance(nullable, GraphQLList):
        return [value(nullable.of_type, name, owner, ids)]
    if isinstance(nullable, GraphQLInputObjectType):
        return {
            field_name: value(field.type, field_name, nullable.name, ids)
            for field_name, field in nullable.fields.items()
            if isinstance(field.type, GraphQLNonNull) or takes_an_id(field.type)
        }
    if isinstance(nullable, GraphQLEnumType):
        return next(iter(nullable.values))
    match nullable.name:
        case "ID":
            lowered = name.lower()
            for kind in ("submission", "schedule", "session"):
                if kind in lowered or (name == "id" and kind in owner.lower()):
                    return ids[kind]
            return ids["task"]
        case "Int":
            return 1
        case "Float":
            return 1.0
        case "Boolean":
            return False
        case "DateTime":
            return datetime.now(UTC).isoformat()
        case "JSON":
            return {"k": 1}
    return "x"


def selection(field: GraphQLField) -> str:
    named = get_named_type(field.type)
    if isinstance(named, GraphQLUnionType):
        return "{ __typename ... on Problem { code message } }"
    return "{ edges { cursor } }" if named.name.endswith("Connection") else "{ __typename }"


def document(kind: str, name: str, ids: dict[str, str]) -> tuple[str, dict[str, Any]]:
    field = root(kind).fields[name]
    variables = {
        arg: value(a.type, arg, name, ids)
        for arg, a in field.args.items()
        if isinstance(a.type, GraphQLNonNull) or takes_an_id(a.type)
    }
    declared = ", ".join(f"${arg}: {field.args[arg].type}" for arg in variables)
    passed = ", ".join(f"{arg}: ${arg}" for arg in variables)
    body = f"{name}({passed}) {selection(field)}"
    return f"{kind}({declared}) {{ {body} }}", variables


def normalised(answer: object, ids: dict[str, str]) -> str:
    text = repr(answer)
    for kind, id_ in ids.items():
        text = text.replace(id_, f"<{kind}>")
    return re.sub(r"\d+\.\d+ s", "<s>", text)


def state_of(owner: Api, ids: dict[str, str]) -> dict[str, Any]:
    return owner(
        "query($s: ID!, $t: ID!) { session(id: $s) { ... on AgentSession { version"
        " messageCount status submissions { id seq status } schedules { id version enabled } } }"
        " task(id: $t) { ... on Task { version eventSeq status"
        " lock { holderId } steps { status output } toolStates { toolName version } } } }",
        s=ids["session"],
        t=ids["task"],
    )


def test_the_sweep_covers_every_operation_that_takes_an_id() -> None:
    """Control: the enumeration finds the operations it must (a new one is included
    by construction; these are the ones that exist today)."""
    assert {"task", "taskAt", "session", "tasks"} <= set(operations("query"))
    assert {"startStep", "decideStep", "claimTask", "forkTask", "deleteSession"} <= set(
        operations("mutation")
    )
    assert {"submitInput", "cancelSubmission", "updateSchedule"} <= set(operations("mutation"))
    assert {"submission", "schedule"} <= set(operations("query"))
    assert operations("subscription") == [
        "sessionActivity",
        "sessionConversation",
        "sessionSubmissions",
        "taskProgress",
    ]


@pytest.mark.parametrize("name", operations("query") + operations("mutation"))
def test_another_users_ids_answer_like_unknown_ids(
    server: Server, owned: tuple[Api, dict[str, str]], name: str
) -> None:
    """Guards the per-user scoping of every lookup: the answer to the owner's ids
    (NotFound, an empty page, or a new object of the caller's own) is the answer to
    ids nobody has, word for word but the id, and the owner's state is unchanged."""
    owner, ids = owned
    kind = "query" if name in operations("query") else "mutation"
    before = state_of(owner, ids)
    unknown = {
        kind: f"{kind[:3]}-{uuid.uuid4().hex}"
        for kind in ("session", "task", "submission", "schedule")
    }
    answers = []
    for chosen in (ids, unknown):
        with fresh_caller(server) as intruder:
            query, variables = document(kind, name, chosen)
            body = intruder.post({"query": query, "variables": variables}).json()
        assert "errors" not in body, body  # an answer, not a malformed request
        answers.append(normalised(body, chosen))
    assert answers[0] == answers[1]
    assert state_of(owner, ids) == before


@pytest.mark.parametrize("name", operations("subscription"))
async def test_another_users_ids_cannot_be_watched(
    server: Server, owned: tuple[Api, dict[str, str]], name: str
) -> None:
    """The subscriptions: the owner's ids answer "not found" before anything is sent."""
    _, ids = owned
    query, variables = document("subscription", name, ids)
    selected = {"sessionConversation": "{ itemSeq }", "sessionSubmissions": "{ kind }"}
    query = query.replace("{ __typename }", selected.get(name, "{ seq }"))
    with fresh_caller(server) as intruder:
        async with Subscriber(server.url, intruder.token, query, variables) as spy:
            with pytest.raises(SubscriptionError, match="not found"):
                await spy.next()
