"""The log's promises under every mutation, in random order, over HTTP.

A Hypothesis state machine drives every mutation of the schema against real
servers (SQLite with one process; PostgreSQL with two processes on one database,
each request sent to either): fresh, repeated and reused idempotency keys,
current, stale and future versions, valid and invalid input, leases with and
without fencing tokens, writes that change nothing. After every step:

- every answer is data: HTTP 200 and no GraphQL ``errors`` (so no "Unexpected
  error."), and no traceback in the servers' logs;
- each task's log is seq 1..eventSeq with no gap, each event's version at or
  past the one before, the last one's the task's;
- ``taskAt(s)`` answers every new seq s with that seq and that event's version,
  and ``taskAt(eventSeq)`` is the task as it stands (its live lease aside);
- every (version, eventSeq) an answer showed is explained by the log: the event
  at that seq carries that version;
- each of the user's sessions answers as its spend (the running total every write
  reporting spend keeps on the session's row, ``services.domain.spend``) exactly
  the sum of its tasks' spend (no task is ever deleted but with its session);
- a keyed call sent again, to either process, answers byte for byte what its
  first call answered (but for the two fields the contract answers as things
  stand now, ``NOW``) and changes nothing; its key with other input answers
  IdempotencyKeyReused and changes nothing.

At the end of each run, a ``taskProgress`` subscriber from seq 0 receives exactly
each task's stored log. ``test_the_machine_sends_every_mutation`` fails the day
a mutation joins the schema without joining the machine.

Examples per backend: ``RUNSTATE_PROPERTY_EXAMPLES`` (default 6, 10 under CI=true,
each up to 40 steps: about 15 and 25 s a backend in ``make test``);
``RUNSTATE_PROPERTY_EXAMPLES=200`` for a long run (about 5 minutes a backend).
Each example is a user of its own, so examples share nothing.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import random
import secrets
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest
from graphql import (
    GraphQLField,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLUnionType,
    build_schema,
    get_named_type,
    is_leaf_type,
)
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

import runstate
import runstate.resolvers.build
from runstate.services.actions.tokens import PREFIX, digest
from tests.support import IN_CI, Api, Server, Subscriber, create_token, server_on, two_servers

SCHEMA = build_schema(runstate.resolvers.build.build_schema().as_str())
MUTATION_TYPE = SCHEMA.mutation_type
assert MUTATION_TYPE is not None
EXAMPLES = int(os.environ.get("RUNSTATE_PROPERTY_EXAMPLES", "10" if IN_CI else "6"))
STEPS = 40
ENV = {
    "RUNSTATE_RATE_LIMIT": "false",
    "RUNSTATE_MAX_ALIASES": "1000",
    "RUNSTATE_MAX_TOKENS": "100000",
}
NESTED = frozenset(
    {"lock", "steps", "toolStates", "spend", "budget", "task", "active", "submission"}
)
"""The object fields an answer selects besides its scalars (never a list of tasks
or events: those are read by the checks)."""
PROBLEM_MARK = "code"


def _selection(kind: GraphQLOutputType, depth: int = 0) -> str:
    """Every leaf field of ``kind`` that takes no required argument, and the
    ``NESTED`` objects' leaves, as a selection set. A field that two members of a
    union give different types is aliased ``field_Type`` in each (GraphQL refuses
    to merge them)."""
    named = get_named_type(kind)
    if isinstance(named, GraphQLUnionType):
        types: dict[str, set[str]] = {}
        for member in named.types:
            for name, found in member.fields.items():
                types.setdefault(name, set()).add(str(found.type))
        clashing = frozenset(name for name, seen in types.items() if len(seen) > 1)
        members = " ".join(
            f"... on {m.name} {{ {_fields(m, depth, clashing)} }}" for m in named.types
        )
        return f"__typename {members}"
    assert isinstance(named, GraphQLObjectType)
    return f"__typename {_fields(named, depth, frozenset())}"


def _fields(kind: GraphQLObjectType, depth: int, clashing: frozenset[str]) -> str:
    chosen = []
    for name, found in kind.fields.items():
        if any(isinstance(a.type, GraphQLNonNull) for a in found.args.values()):
            continue
        alias = f"{name}_{kind.name}: " if name in clashing else ""
        if is_leaf_type(get_named_type(found.type)):
            chosen.append(f"{alias}{name}")
        elif name in NESTED and depth < 2:
            chosen.append(f"{alias}{name} {{ {_selection(found.type, depth + 1)} }}")
    return " ".join(chosen)


def _document(name: str, mutation: GraphQLField) -> str:
    input_type = mutation.args["input"].type
    return (
        f"mutation M($input: {input_type}) {{ {name}(input: $input)"
        f" {{ {_selection(mutation.type)} }} }}"
    )


DOCUMENTS = {name: _document(name, f) for name, f in MUTATION_TYPE.fields.items()}
MANIFEST = Path(runstate.__file__).parent / "web" / "static" / "documents.json"
TRUSTED = {
    op["name"]: f"sha256:{op['id']}"
    for op in json.loads(MANIFEST.read_text())["operations"]
    if op["type"] == "mutation" and op["name"] in MUTATION_TYPE.fields
}
"""The mutations the SDK sends as trusted documents (by ``documentId``, run by the
lean executor): the machine sends each through either door."""
TIMED = frozenset({"LOCK_HELD", "LOCK_NOT_HELD", "NOT_FOUND", "SESSION_EXPIRED"})
"""Refusals that a lease or a session lapsing between two calls may turn into a
write (a lease of 1 s; claimTask's NotFound once a leased task stalls)."""
TASK_HEAD = (
    "... on Task { id version eventSeq status currentStep totalSteps goal runOf updatedAt"
    " interruptRequested"
    " steps { index status attempts output error startedAt completedAt }"
    " toolStates { toolName status version retryCount lastResult lastError }"
    " spend { inputTokens outputTokens costMicros calls } budget { maxTokens maxCostMicros }"
    " events(first: 100) { seq taskVersion kind } }"
    " ... on Problem { code message }"
)
AT = (
    "... on Task { version eventSeq status currentStep totalSteps goal runOf updatedAt"
    " interruptRequested"
    " steps { index status attempts output error startedAt completedAt }"
    " toolStates { toolName status version retryCount lastResult lastError }"
    " spend { inputTokens outputTokens costMicros calls } budget { maxTokens maxCostMicros } }"
    " ... on Problem { code message }"
)


SPEND_KEYS = ("inputTokens", "outputTokens", "costMicros", "calls")
SPENT = "spend { " + " ".join(SPEND_KEYS) + " }"
SESSION_SPEND = (
    "{ sessions(first: 10) { pageInfo { hasNextPage } edges { node { id "
    + SPENT
    + " tasks(first: 100) { pageInfo { hasNextPage } edges { node { "
    + SPENT
    + " } } } submissions(status: ROLLED_BACK, first: 100) { "
    + SPENT
    + " } } } } }"
)
"""Every session of the user with its spend, each of its tasks' spend, and what the
tasks a ROLLBACK removed had spent."""
LEDGERS = (
    "{ sessions(first: 5) { pageInfo { hasNextPage } edges { node { id submissions(first: 30) {"
    " id seq status task { status steps { status } } } } } } }"
)
"""Every session's ledger, with each submission's task as it stands."""
UNFINISHED = frozenset({"QUEUED", "ACTIVE"})
ENDED_TASKS = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
CRONS = ["0 0 1 1 *", "@yearly", "30 4 29 2 *", "61 * * * *", "* * * *", ""]
"""Schedules the machine makes: valid ones that never fall due while it runs
(a fire would move a known task between a refusal and the check that nothing
moved: ``test_schedules`` follows fires), and refused ones."""
ZONES = ["UTC", "Europe/Lisbon", "Nowhere/Else"]
policies = st.sampled_from([None, "REJECT", "ENQUEUE", "INTERRUPT", "ROLLBACK"])


def _blob(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@dataclass
class Door:
    """One server process as a caller reaches it."""

    server: Server
    api: Api
    log_mark: int = 0


@dataclass
class Known:
    """What the machine knows of one task, from the last check."""

    session: str
    version: int = 1
    event_seq: int = 1
    steps: int = 0
    verified: int = 0
    """taskAt has answered every seq up to this one."""
    token: int | None = None
    holder: str | None = None
    checkpoints: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Sent:
    """A keyed call that committed: sent again, it must answer ``answer`` again."""

    name: str
    variables: dict[str, Any]
    answer: bytes
    trusted: bool
    """Sent as the SDK's trusted document (``documentId``), not as text."""
    deletions: int
    """How many sessions the machine had deleted by then."""


ids = st.sampled_from(["a", "b", "c"])
holders = st.sampled_from(["h1", "h2"])
json_values = st.one_of(
    st.none(), st.integers(-5, 5), st.text("xyz", max_size=3), st.just({"k": [1, "v"]})
)
spends = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "inputTokens": st.integers(0, 50),
            "outputTokens": st.integers(0, 50),
            "costMicros": st.integers(0, 500),
            "model": st.sampled_from(["m1", "m2"]),
        }
    ),
)
budgets = st.fixed_dictionaries(
    {"maxTokens": st.one_of(st.none(), st.integers(0, 300)), "maxCostMicros": st.none()}
)
plans = st.lists(
    st.fixed_dictionaries(
        {"action": st.sampled_from(["search", "book", "mail"]), "idempotent": st.booleans()}
    ),
    max_size=3,
)
RUN_KINDS = [None, None, "openai-agents", ""]
"""A task's or a claim's ``runOf``: mostly none (ordinary), a framework's runs, and
one the server refuses (blank: InvalidInput)."""
step_statuses = st.sampled_from(["PENDING", "RUNNING", "SUCCESS", "FAILED", "SKIPPED", "IN_DOUBT"])
task_statuses = st.sampled_from(
    ["PLANNED", "RUNNING", "WAITING_TOOL", "AWAITING_DECISION", "COMPLETED", "FAILED", "CANCELLED"]
)


T = TypeVar("T")


def _pick(data: st.DataObject, options: Sequence[T], label: str) -> T | None:
    """One of ``options`` (None: there are none), drawn as an index of a fixed range
    whatever they are. What the machine knows comes from the servers' answers,
    which a lease lapsing can change between two runs of one case; Hypothesis
    replays a case by its draws, so their number and ranges must not depend on it."""
    index = data.draw(st.integers(0, 255), label=label)
    return options[index % len(options)] if options else None


NOW = frozenset({"graphThread", "overBudget", "submission"})
"""Task fields the contract answers as things stand now, on taskAt and on a keyed
call's repeat too (a thread's first checkpoint makes its task a graph thread; a
session's spend, its budget reached; the submission it carries out, which moves
on through the ledger)."""

SUBMISSION_NOW = frozenset({"task", "spend"})
"""Submission fields answered as things stand now on a repeat too: its task and
what that task spent (a repeat answers the submission as it was admitted)."""

SESSION_NOW = frozenset({"spend"})
"""Session fields answered as things stand now on a repeat too: a session's spend,
the running total of its tasks'."""


def _as_then(answer: Any) -> Any:
    """An answer without its ``NOW`` fields (and a session's ``SESSION_NOW``): what
    a repeat must answer alike."""
    if isinstance(answer, dict):
        kind = answer.get("__typename")
        now = NOW | SESSION_NOW if kind == "AgentSession" else NOW
        now = now | SUBMISSION_NOW if kind == "Submission" else now
        return {k: _as_then(v) for k, v in answer.items() if k not in now}
    if isinstance(answer, list):
        return [_as_then(v) for v in answer]
    return answer


def _given(variables: dict[str, Any]) -> dict[str, Any]:
    """A mutation's input as its key's fingerprint sees it: a field sent as null is a
    field not sent."""
    return {k: v for k, v in variables["input"].items() if v is not None}


class LogMachine(RuleBasedStateMachine):
    """Random mutations of one fresh user's sessions and tasks, checked after each."""

    doors: ClassVar[list[Door]]
    tokens: ClassVar[Tokens]

    def __init__(self) -> None:
        super().__init__()
        self.user_token = self.tokens()
        for door in self.doors:
            door.api = Api(door.server.url, self.user_token)
            door.log_mark = len(door.server.log())
        self.sessions: dict[str, int] = {}
        self.tasks: dict[str, Known] = {}
        self.sent: list[Sent] = []
        self.shown: list[tuple[str, int, int]] = []
        self.serial = itertools.count()
        self.deletions = 0
        self.submissions: list[str] = []
        self.schedules: dict[str, int] = {}
        self.graph_parents: dict[str, str] = {}
        """Each thread's last checkpoint sent by ``graph_super_step``."""

    # ------------------------------------------------------------ sending

    def door(self, data: st.DataObject) -> Door:
        return self.doors[data.draw(st.integers(0, len(self.doors) - 1), label="door")]

    def post(self, door: Door, name: str, variables: dict[str, Any], trusted: bool) -> bytes:
        """One mutation through one door: its text, or the SDK's trusted document."""
        if trusted:
            body: dict[str, Any] = {"documentId": TRUSTED[name], "variables": variables}
        else:
            body = {"query": DOCUMENTS[name], "variables": variables}
        response = door.api.post(body)
        assert response.status_code == 200, (name, response.status_code, response.text)
        answer = response.json()
        assert "errors" not in answer, (name, variables, answer["errors"])
        return response.content

    def send(self, data: st.DataObject, name: str, **input: Any) -> dict[str, Any]:
        """``name`` with ``input`` through either door, under no key, a fresh key, or
        a key already used (by this or another call): the answer, after checking
        what a key promises, and that the other door refuses alike."""
        trusted = name in TRUSTED and data.draw(st.booleans(), label="trusted door")
        mode = data.draw(st.sampled_from(["none", "fresh", "fresh", "reuse"]), label="key")
        earlier = _pick(data, self.sent, "reused")
        door, other = self.door(data), self.door(data)
        if mode == "reuse" and earlier is not None:
            key = earlier.variables["input"]["idempotencyKey"]
            variables = {"input": {**input, "idempotencyKey": key}}
            raw = self.post(door, name, variables, trusted)
            answer = json.loads(raw)["data"][name]
            if (name, _given(variables)) != (earlier.name, _given(earlier.variables)):
                assert answer["__typename"] == "IdempotencyKeyReused", answer
            elif trusted == earlier.trusted:
                self.check_replay(earlier, raw)
            self.check_unchanged()
            return dict(answer)
        key = f"k-{uuid.uuid4().hex}" if mode != "none" else None
        variables = {"input": {**input, "idempotencyKey": key}}
        raw = self.post(door, name, variables, trusted)
        answer = json.loads(raw)["data"][name]
        if PROBLEM_MARK not in answer:
            if key is not None:
                self.sent.append(Sent(name, variables, raw, trusted, self.deletions))
        elif name in TRUSTED and answer["code"] != "RATE_LIMITED":
            self.refused_alike(other, name, input, answer, not trusted)
        self.note(answer)
        return dict(answer)

    def refused_alike(
        self,
        door: Door,
        name: str,
        input: dict[str, Any],
        refusal: dict[str, Any],
        trusted: bool,
    ) -> None:
        """The same refused input through the other door: the same refusal (a
        refusal writes nothing, so nothing between the two calls changed), unless a
        lease or a session lapsed in between (``TIMED``)."""
        raw = self.post(door, name, {"input": input}, trusted)
        other = json.loads(raw)["data"][name]
        same = {k: refusal.get(k) for k in ("__typename", "code", "message")}
        if refusal["code"] in TIMED and other.get("code") != refusal["code"]:
            self.note(other)
            return
        assert {k: other.get(k) for k in same} == same, (name, input, refusal, other)

    def note(self, answer: Any) -> None:
        """Remember every (task, version, eventSeq) an answer shows."""
        if isinstance(answer, dict):
            if answer.get("__typename") == "Task" and "eventSeq" in answer:
                self.shown.append((answer["id"], answer["version"], answer["eventSeq"]))
                self.tasks.setdefault(answer["id"], Known(answer.get("sessionId", "")))
            if answer.get("__typename") == "TaskLock":
                known = self.tasks.setdefault(answer["taskId"], Known(""))
                known.token, known.holder = answer["fencingToken"], answer["holderId"]
            for value in answer.values():
                self.note(value)

    def task(self, data: st.DataObject) -> str:
        """A known task's id, or now and then one nobody has."""
        unknown = data.draw(st.integers(0, 19), label="unknown task") == 0
        known = _pick(data, sorted(self.tasks), "task")
        return "nobody" if unknown or known is None else known

    def version(self, data: st.DataObject, current: int) -> int:
        shift = data.draw(st.sampled_from([0, 0, 0, 0, -1, 1]), label="version shift")
        return current + shift

    def token(self, data: st.DataObject, task_id: str) -> int | None:
        known = self.tasks.get(task_id)
        held = None if known is None else known.token
        mode = data.draw(st.sampled_from(["none", "held", "held", "stale"]), label="token")
        if mode == "none" or held is None:
            return None
        return held if mode == "held" else held - 1

    def step_index(self, data: st.DataObject, task_id: str) -> int:
        known = self.tasks.get(task_id)
        steps = known.steps if known else 0
        outside = data.draw(st.integers(0, 9), label="a step out of range") == 0
        index = data.draw(st.integers(0, 255), label="step")
        if outside:
            return -1 if index % 2 else steps
        return index % max(steps, 1)

    def session(self, data: st.DataObject) -> str:
        options = [*sorted(self.sessions), "s-none"] if self.sessions else ["s-a"]
        chosen = _pick(data, options, "session")
        assert chosen is not None
        return chosen

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self.serial)}"

    # ------------------------------------------------------------ checks

    def read(self, query: str) -> dict[str, Any]:
        data: dict[str, Any] = self.doors[0].api(query)
        return data

    def heads(self) -> dict[str, Any]:
        """Every known task's head and log, and every session's version, in one read."""
        parts = [f't{i}: task(id: "{t}") {{ {TASK_HEAD} }}' for i, t in enumerate(self.tasks)]
        parts += [
            f's{i}: session(id: "{s}") {{ ... on AgentSession {{ version }} }}'
            for i, s in enumerate(self.sessions)
        ]
        if not parts:
            return {}
        found = self.read("{ " + " ".join(parts) + " }")
        heads = {t: found[f"t{i}"] for i, t in enumerate(self.tasks)}
        heads |= {f"session:{s}": found[f"s{i}"] for i, s in enumerate(self.sessions)}
        return heads

    def check_unchanged(self) -> None:
        """Nothing moved since the last check: every task's version and seq, every
        session's version."""
        for name, head in self.heads().items():
            if name.startswith("session:"):
                if head is not None:
                    assert head["version"] == self.sessions[name.removeprefix("session:")]
            elif "version" in head:
                known = self.tasks[name]
                assert (head["version"], head["eventSeq"]) == (known.version, known.event_seq)

    @invariant()
    def the_log_explains_everything(self) -> None:
        heads = self.heads()
        wanted: list[tuple[str, int]] = []
        for name, head in heads.items():
            if name.startswith("session:"):
                session = name.removeprefix("session:")
                if head is None or "version" not in head:
                    self.sessions.pop(session, None)
                else:
                    self.sessions[session] = head["version"]
                continue
            if "version" not in head:
                assert head["code"] == "NOT_FOUND", head
                del self.tasks[name]
                continue
            events = head["events"]
            assert [e["seq"] for e in events] == list(range(1, head["eventSeq"] + 1)), (
                name,
                events,
            )
            versions = [e["taskVersion"] for e in events]
            assert versions == sorted(versions), events
            assert versions[-1] == head["version"], events
            known = self.tasks[name]
            known.version, known.event_seq = head["version"], head["eventSeq"]
            known.steps = head["totalSteps"]
            wanted += [(name, s) for s in range(known.verified + 1, head["eventSeq"] + 1)]
        for task_id, version, seq in self.shown:
            head = heads.get(task_id)
            if head is None or "events" not in head:
                continue  # deleted since
            assert head["events"][seq - 1]["taskVersion"] == version, (task_id, version, seq)
        self.shown.clear()
        if wanted:
            parts = [
                f'a{i}: taskAt(id: "{t}", seq: {s}) {{ {AT} }}' for i, (t, s) in enumerate(wanted)
            ]
            found = self.read("{ " + " ".join(parts) + " }")
            for i, (task_id, seq) in enumerate(wanted):
                past = found[f"a{i}"]
                head = heads[task_id]
                assert "version" in past, (task_id, seq, past)
                assert past["eventSeq"] == seq
                assert past["version"] == head["events"][seq - 1]["taskVersion"]
                if seq == head["eventSeq"]:
                    now = {k: v for k, v in head.items() if k not in ("id", "events")}
                    assert past == now, (task_id, seq)
                self.tasks[task_id].verified = seq
        for door in self.doors:
            written = door.server.log()[door.log_mark :]
            assert "Traceback" not in written, written[-3000:]

    @invariant()
    def each_session_s_spend_is_its_tasks(self) -> None:
        """Guards the session's running spend (issue 54, item 6a): after every step,
        each of the user's sessions answers as its spend the sum of its tasks',
        whichever mutation ran (completeStep, failStep, checkpointTask, recordSpend,
        recordToolCall and the LangGraph writes with spend; forks and copies, which
        start at none; deleteSession, which takes the session with its tasks). Seen
        failing with ``engine._settle`` leaving the session's totals alone at the
        default 10 examples on both backends (session s-a answered 0 calls, its
        tasks 1): every example reports spend once at least
        (``spent_on_a_new_task``)."""
        sessions = self.read(SESSION_SPEND)["sessions"]
        assert not sessions["pageInfo"]["hasNextPage"], "more sessions than one page"
        for edge in sessions["edges"]:
            session = edge["node"]
            tasks = session["tasks"]
            assert not tasks["pageInfo"]["hasNextPage"], session["id"]
            removed = session["submissions"]
            summed = {
                k: sum(t["node"]["spend"][k] for t in tasks["edges"])
                + sum(r["spend"][k] for r in removed)
                for k in SPEND_KEYS
            }
            assert session["spend"] == summed, (session["id"], session["spend"], summed)

    @invariant()
    def each_ledger_is_in_order(self) -> None:
        """Guards the session's admission ledger after every step: its seqs are 1..n
        with no gap; at most one submission is ACTIVE, and one is whenever any is
        QUEUED (the next is promoted in the transaction that ends the active one's
        task); an unfinished submission's task stands unfinished; a QUEUED one's
        task has no step running (no claim or start ran it out of turn)."""
        sessions = self.read(LEDGERS)["sessions"]
        assert not sessions["pageInfo"]["hasNextPage"], "more sessions than one page"
        for edge in sessions["edges"]:
            ledger = edge["node"]["submissions"]
            assert [s["seq"] for s in ledger] == list(range(1, len(ledger) + 1)), ledger
            states = [s["status"] for s in ledger]
            assert states.count("ACTIVE") == (1 if UNFINISHED & set(states) else 0), ledger
            for entry in ledger:
                if entry["status"] in UNFINISHED:
                    assert entry["task"]["status"] not in ENDED_TASKS, entry
                if entry["status"] == "QUEUED":
                    assert "RUNNING" not in {s["status"] for s in entry["task"]["steps"]}, entry

    def teardown(self) -> None:
        """A subscriber from seq 0 of each task receives exactly its stored log."""
        try:
            heads = self.heads()
            asyncio.run(self.followed(heads))
        finally:
            for door in self.doors:
                door.api.close()

    async def followed(self, heads: dict[str, Any]) -> None:
        query = (
            "subscription($id: ID!) { taskProgress(taskId: $id, afterSeq: 0)"
            " { seq taskVersion kind } }"
        )
        for task_id, head in heads.items():
            if task_id.startswith("session:") or "events" not in head:
                continue
            door = random.choice(self.doors)
            async with Subscriber(door.server.url, self.user_token, query, {"id": task_id}) as sub:
                last = head["eventSeq"]
                got = await sub.until(
                    lambda e, last=last: e["taskProgress"]["seq"] >= last, within=20
                )
            assert [e["taskProgress"] for e in got] == head["events"], task_id

    # ------------------------------------------------------------ sessions

    @initialize(data=st.data(), steps=plans.filter(bool))
    def a_session_and_tasks(self, data: st.DataObject, steps: list[Any]) -> None:
        """A session with a task to run and a thread's task: most writes name them;
        and a task that has spent (``spent_on_a_new_task``)."""
        self.send(data, "startSession", id="s-a")
        self.send(data, "createTask", sessionId="s-a", id="t-0", goal="g", steps=steps)
        self.send(data, "createTask", sessionId="s-a", id="g-0", goal="a graph", steps=[])
        self.spent_on_a_new_task(data, data.draw(spends.filter(bool), label="spend"))

    @rule(data=st.data(), session=ids, budget=st.one_of(st.none(), budgets))
    def start_session(self, data: st.DataObject, session: str, budget: Any) -> None:
        self.send(data, "startSession", id=f"s-{session}", budget=budget)

    @rule(data=st.data(), status=st.sampled_from([None, "ACTIVE", "PAUSED"]))
    def update_session(self, data: st.DataObject, status: str | None) -> None:
        session = self.session(data)
        version = self.version(data, self.sessions.get(session, 1))
        self.send(
            data,
            "updateSession",
            id=session,
            expectedVersion=version,
            status=status,
            messageCountDelta=data.draw(st.sampled_from([None, 0, 1]), label="delta"),
            metadata=data.draw(json_values, label="metadata"),
        )

    @rule(data=st.data())
    def delete_session(self, data: st.DataObject) -> None:
        if data.draw(st.integers(0, 3), label="rarely") == 0:
            answer = self.send(data, "deleteSession", id=self.session(data))
            self.deletions += answer["__typename"] == "Deleted"

    @rule(data=st.data(), items=st.lists(json_values.filter(lambda v: v is not None), max_size=3))
    def add_session_items(self, data: st.DataObject, items: list[Any]) -> None:
        self.send(data, "addSessionItems", sessionId=self.session(data), items=items)

    @rule(data=st.data())
    def pop_session_item(self, data: st.DataObject) -> None:
        self.send(data, "popSessionItem", sessionId=self.session(data))

    @rule(data=st.data())
    def clear_session_items(self, data: st.DataObject) -> None:
        self.send(data, "clearSessionItems", sessionId=self.session(data))

    @rule(data=st.data(), budget=budgets, note=st.sampled_from([None, "more"]))
    def set_budget(self, data: st.DataObject, budget: Any, note: str | None) -> None:
        if data.draw(st.booleans(), label="of the session"):
            session = self.session(data)
            version = self.version(data, self.sessions.get(session, 1))
            target = {"sessionId": session}
        else:
            task_id = self.task(data)
            version = self.version(
                data, self.tasks[task_id].version if task_id in self.tasks else 1
            )
            target = {"taskId": task_id}
        self.send(data, "setBudget", **target, expectedVersion=version, budget=budget, note=note)

    # ------------------------------------------------------------ tasks

    @rule(data=st.data(), steps=plans, budget=st.one_of(st.none(), budgets))
    def create_task(self, data: st.DataObject, steps: list[Any], budget: Any) -> None:
        session = self.session(data)
        reuse = data.draw(st.integers(0, 5), label="existing id") == 0 and bool(self.tasks)
        task_id = sorted(self.tasks)[0] if reuse else self.new_id("t")
        lease = data.draw(
            st.one_of(
                st.none(),
                st.fixed_dictionaries(
                    {"holderId": holders, "ttlSeconds": st.sampled_from([1, 60])}
                ),
            ),
            label="lease",
        )
        answer = self.send(
            data,
            "createTask",
            sessionId=session,
            id=task_id,
            goal="g",
            steps=steps,
            budget=budget,
            lease=lease,
            runOf=data.draw(st.sampled_from(RUN_KINDS), label="run of"),
        )
        if answer["__typename"] == "Task":
            self.tasks[task_id].session = session

    @rule(data=st.data(), spend=spends.filter(lambda s: s is not None))
    def a_step_that_spends(self, data: st.DataObject, spend: Any) -> None:
        self.spent_on_a_new_task(data, spend)

    def spent_on_a_new_task(self, data: st.DataObject, spend: Any) -> None:
        """A new task in a session whose one step starts, then completes reporting
        ``spend``, each at the version the answer before it gave, unkeyed. Drawn
        versions are mostly stale, so reports of spend are otherwise rare, and the
        session's running total (``each_session_s_spend_is_its_tasks``) is only
        checked against reports that happened. Each call is sent whatever the one
        before answered, so the draws do not depend on the servers."""
        session = self.session(data)
        task_id = self.new_id("t")
        plan = [{"action": "search", "idempotent": True}]
        calls: list[tuple[str, dict[str, Any]]] = [
            ("createTask", {"sessionId": session, "id": task_id, "goal": "g", "steps": plan}),
            ("startStep", {"taskId": task_id, "stepIndex": 0}),
            ("completeStep", {"taskId": task_id, "stepIndex": 0, "spend": spend}),
        ]
        version = 1
        for name, input in calls:
            door = self.door(data)
            if name != "createTask":
                input["expectedVersion"] = version
            raw = self.post(door, name, {"input": input}, name in TRUSTED)
            answer = json.loads(raw)["data"][name]
            version = answer.get("version", version)
            self.note(answer)
        if task_id in self.tasks:
            self.tasks[task_id].session = session

    @rule(data=st.data(), steps=plans)
    def add_steps(self, data: st.DataObject, steps: list[Any]) -> None:
        task_id = self.task(data)
        self.send(data, "addSteps", taskId=task_id, steps=steps, **self.versioned(data, task_id))

    def versioned(self, data: st.DataObject, task_id: str) -> dict[str, Any]:
        known = self.tasks.get(task_id)
        return {
            "expectedVersion": self.version(data, known.version if known else 1),
            "fencingToken": self.token(data, task_id),
        }

    @rule(data=st.data())
    def start_step(self, data: st.DataObject) -> None:
        task_id = self.task(data)
        self.send(
            data,
            "startStep",
            taskId=task_id,
            stepIndex=self.step_index(data, task_id),
            **self.versioned(data, task_id),
        )

    @rule(data=st.data(), output=json_values, spend=spends)
    def complete_step(self, data: st.DataObject, output: Any, spend: Any) -> None:
        task_id = self.task(data)
        self.send(
            data,
            "completeStep",
            taskId=task_id,
            stepIndex=self.step_index(data, task_id),
            output=output,
            spend=spend,
            **self.versioned(data, task_id),
        )

    @rule(data=st.data(), error=st.sampled_from(["boom", ""]), spend=spends)
    def fail_step(self, data: st.DataObject, error: str, spend: Any) -> None:
        task_id = self.task(data)
        self.send(
            data,
            "failStep",
            taskId=task_id,
            stepIndex=self.step_index(data, task_id),
            error=error,
            spend=spend,
            **self.versioned(data, task_id),
        )

    @rule(data=st.data(), spend=spends.filter(lambda s: s is not None))
    def record_spend(self, data: st.DataObject, spend: Any) -> None:
        task_id = self.task(data)
        self.send(
            data,
            "recordSpend",
            taskId=task_id,
            stepIndex=self.step_index(data, task_id),
            spend=spend,
            fencingToken=self.token(data, task_id),
        )

    @rule(data=st.data(), status=st.one_of(st.none(), task_statuses))
    def checkpoint_task(self, data: st.DataObject, status: str | None) -> None:
        task_id = self.task(data)
        patches = data.draw(
            st.lists(
                st.fixed_dictionaries(
                    {"index": st.integers(0, 3), "status": step_statuses, "output": json_values}
                ),
                max_size=2,
            ),
            label="patches",
        )
        self.send(
            data,
            "checkpointTask",
            taskId=task_id,
            status=status,
            steps=patches,
            **self.versioned(data, task_id),
        )

    @rule(data=st.data(), status=task_statuses)
    def set_task_status(self, data: st.DataObject, status: str) -> None:
        task_id = self.task(data)
        self.send(
            data, "setTaskStatus", taskId=task_id, status=status, **self.versioned(data, task_id)
        )

    @rule(data=st.data())
    def resume_task(self, data: st.DataObject) -> None:
        task_id = self.task(data)
        versioned = self.versioned(data, task_id)
        if data.draw(st.booleans(), label="without a version"):
            versioned["expectedVersion"] = None
        self.send(data, "resumeTask", taskId=task_id, **versioned)

    @rule(
        data=st.data(),
        decision=st.sampled_from(["RETRY", "SKIP", "COMPLETE"]),
        note=st.sampled_from([None, "checked"]),
    )
    def decide_step(self, data: st.DataObject, decision: str, note: str | None) -> None:
        task_id = self.task(data)
        self.send(
            data,
            "decideStep",
            taskId=task_id,
            stepIndex=self.step_index(data, task_id),
            decision=decision,
            note=note,
            output=None,
            **self.versioned(data, task_id),
        )

    @rule(
        data=st.data(),
        decision=st.sampled_from(["RETRY", "SKIP", "COMPLETE"]),
        note=st.sampled_from([None, "checked", "n" * 1001]),
    )
    def decide_through_agui(self, data: st.DataObject, decision: str, note: str | None) -> None:
        """The AG-UI door: a resume answering one step's interrupt at a version. A
        refusal by ``decideStep``'s rules (``step N: ...``, or a value refused before
        any is applied, ``resume: <interrupt>: ...``) is the refusal GraphQL gives
        the same decision, in the same words; AG-UI's own checks of the resume (the
        steps in doubt at that version) are its own. Rate limits are off here."""
        task_id = self.task(data)
        known = self.tasks.get(task_id)
        session = known.session if known and known.session else "s-none"
        index = self.step_index(data, task_id)
        version = self.version(data, known.version if known else 1)
        payload = {"decision": decision, "note": note}
        entry = {"interruptId": f"{task_id}:{index}@{version}", "status": "resolved"}
        body = {
            "threadId": session,
            "runId": "r",
            "messages": [],
            "resume": [entry | {"payload": payload}],
        }
        refusal = self.agui(self.door(data), task_id, body)
        checked = (f"step {index}: ", f"resume: {entry['interruptId']}: ")
        if refusal is None or not refusal["message"].startswith(checked):
            return
        input = {"taskId": task_id, "stepIndex": index, "decision": decision, "note": note}
        twin = {**input, "output": None, "expectedVersion": version}
        raw = self.post(self.door(data), "decideStep", {"input": twin}, False)
        other = json.loads(raw)["data"]["decideStep"]
        message = refusal["message"].removeprefix(checked[0]).removeprefix(checked[1])
        if refusal["code"] in TIMED and other.get("code") != refusal["code"]:
            self.note(other)
            return
        assert (other.get("code"), other.get("message")) == (refusal["code"], message), (
            body,
            refusal,
            other,
        )

    def agui(self, door: Door, task_id: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """A run of ``task_id`` posted with ``body``, read up to its opening state or
        its end: the RUN_ERROR's code and message, or None for a run that began (or a
        404 of a task or session it does not know)."""
        with door.api.http.stream("POST", f"/agui/tasks/{task_id}", json=body) as response:
            if response.status_code == 404:
                return None
            assert response.status_code == 200, (response.status_code, response.read())
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line.removeprefix("data: "))
                if event["type"] == "RUN_ERROR":
                    return {"code": event["code"], "message": event["message"]}
                if event["type"] in ("STATE_SNAPSHOT", "RUN_FINISHED"):
                    return None
        return None

    @rule(data=st.data(), value=json_values.filter(lambda v: v is not None))
    def answer_interrupt(self, data: st.DataObject, value: Any) -> None:
        task_id = self.task(data)
        known = self.tasks.get(task_id)
        self.send(
            data,
            "answerInterrupt",
            taskId=task_id,
            stepIndex=self.step_index(data, task_id),
            value=value,
            expectedVersion=self.version(data, known.version if known else 1),
        )

    @rule(data=st.data(), holder=holders, ttl=st.sampled_from([1, 60, 0]))
    def acquire_task_lock(self, data: st.DataObject, holder: str, ttl: int) -> None:
        self.send(data, "acquireTaskLock", taskId=self.task(data), holderId=holder, ttlSeconds=ttl)

    @rule(data=st.data(), holder=holders, ttl=st.sampled_from([1, 600]))
    def renew_task_lock(self, data: st.DataObject, holder: str, ttl: int) -> None:
        self.send(data, "renewTaskLock", taskId=self.task(data), holderId=holder, ttlSeconds=ttl)

    @rule(data=st.data(), holder=holders)
    def release_task_lock(self, data: st.DataObject, holder: str) -> None:
        self.send(data, "releaseTaskLock", taskId=self.task(data), holderId=holder)

    @rule(
        data=st.data(),
        tool=st.sampled_from(["search", "hotel"]),
        outcome=st.sampled_from(["CALLING", "SUCCESS", "FAILURE", "RATE_LIMITED"]),
        result=json_values,
        spend=spends,
    )
    def record_tool_call(
        self, data: st.DataObject, tool: str, outcome: str, result: Any, spend: Any
    ) -> None:
        task_id = self.task(data)
        versioned = self.versioned(data, task_id)
        if data.draw(st.booleans(), label="without a version"):
            versioned["expectedVersion"] = None
        self.send(
            data,
            "recordToolCall",
            taskId=task_id,
            toolName=tool,
            outcome=outcome,
            result=result,
            error="e" if outcome == "FAILURE" else None,
            retryAfterSeconds=30 if outcome == "RATE_LIMITED" else None,
            maxRetries=data.draw(st.sampled_from([None, 1, 3]), label="max retries"),
            spend=spend,
            **versioned,
        )

    @rule(data=st.data())
    def fork_task(self, data: st.DataObject) -> None:
        task_id = self.task(data)
        known = self.tasks.get(task_id)
        at = data.draw(st.integers(0, 255), label="at") % ((known.event_seq if known else 1) + 2)
        self.send(data, "forkTask", taskId=task_id, atSeq=at, id=self.new_id("f"))

    @rule(data=st.data(), holder=holders, ttl=st.sampled_from([1, 60]))
    def claim_task(self, data: st.DataObject, holder: str, ttl: int) -> None:
        session = self.session(data) if data.draw(st.booleans(), label="in a session") else None
        self.send(
            data,
            "claimTask",
            holderId=holder,
            ttlSeconds=ttl,
            sessionId=session,
            stalledForSeconds=0,
            runOf=data.draw(st.sampled_from(RUN_KINDS), label="run of"),
        )

    # ------------------------------------------------------------ the ledger

    @rule(data=st.data(), steps=plans, policy=policies, value=json_values)
    def submit_input(
        self, data: st.DataObject, steps: list[Any], policy: str | None, value: Any
    ) -> None:
        answer = self.send(
            data,
            "submitInput",
            sessionId=self.session(data),
            goal="g",
            steps=steps,
            input=value,
            policy=policy,
            budget=data.draw(st.one_of(st.none(), budgets), label="budget"),
        )
        if answer["__typename"] == "Submission":
            self.submissions.append(answer["id"])

    @rule(data=st.data(), note=st.sampled_from([None, "not now"]))
    def cancel_submission(self, data: st.DataObject, note: str | None) -> None:
        chosen = _pick(data, [*self.submissions, "nobody"], "submission")
        self.send(data, "cancelSubmission", id=chosen, note=note)

    @rule(
        data=st.data(),
        cron=st.sampled_from(CRONS),
        zone=st.sampled_from(ZONES),
        policy=policies,
        misfire=st.sampled_from([None, "SKIP", "RUN_ONCE"]),
    )
    def create_schedule(
        self, data: st.DataObject, cron: str, zone: str, policy: str | None, misfire: str | None
    ) -> None:
        answer = self.send(
            data,
            "createSchedule",
            sessionId=self.session(data),
            cron=cron,
            timezone=zone,
            goal="g",
            steps=[{"action": "search"}],
            policy=policy,
            misfire=misfire,
            enabled=data.draw(st.sampled_from([None, True, False]), label="enabled"),
        )
        if answer["__typename"] == "Schedule":
            self.schedules[answer["id"]] = answer["version"]

    @rule(
        data=st.data(),
        cron=st.sampled_from([None, *CRONS]),
        enabled=st.sampled_from([None, True, False]),
    )
    def update_schedule(self, data: st.DataObject, cron: str | None, enabled: bool | None) -> None:
        chosen = _pick(data, [*sorted(self.schedules), "nobody"], "schedule")
        assert chosen is not None
        answer = self.send(
            data,
            "updateSchedule",
            id=chosen,
            expectedVersion=self.version(data, self.schedules.get(chosen, 1)),
            cron=cron,
            enabled=enabled,
        )
        if answer["__typename"] == "Schedule":
            self.schedules[chosen] = answer["version"]

    @rule(data=st.data())
    def delete_schedule(self, data: st.DataObject) -> None:
        chosen = _pick(data, [*sorted(self.schedules), "nobody"], "schedule")
        answer = self.send(data, "deleteSchedule", id=chosen)
        if answer["__typename"] == "Deleted":
            self.schedules.pop(answer["id"], None)

    # ------------------------------------------------------------ LangGraph threads

    @rule(
        data=st.data(), checkpoint=st.sampled_from(["c1", "c2"]), value=st.sampled_from(["1", "2"])
    )
    def put_graph_checkpoint(self, data: st.DataObject, checkpoint: str, value: str) -> None:
        """A checkpoint of a known thread, or of a new one, with or without
        ``newThread`` (in a known session or a new one, or with a goal refused),
        with or without a node's held writes and its report, and with or without the
        node's next start (``nextNodes``): one node name, so that a node's end
        adopts the start an earlier checkpoint showed and the same write expects it
        again (a loop)."""
        fresh = data.draw(st.integers(0, 4), label="a new thread") == 0
        task_id = self.new_id("g") if fresh else self.task(data)
        new_thread = data.draw(
            st.one_of(
                st.none(),
                st.fixed_dictionaries(
                    {
                        "sessionId": st.sampled_from([self.session(data), self.new_id("s")]),
                        "goal": st.sampled_from(["a graph", "a graph", " "]),
                    }
                ),
            ),
            label="new thread",
        )
        run = data.draw(st.sampled_from(["r1", "r2"]), label="run")
        held = []
        if data.draw(st.booleans(), label="held writes"):
            key = data.draw(st.sampled_from(["g1", "g2"]), label="graph task")
            status = data.draw(
                st.sampled_from([None, "SUCCESS", "FAILED", "INTERRUPTED"]), label="node"
            )
            node = {"graphTaskId": key, "name": "node", "status": status, "error": "boom"}
            write = {"idx": 0, "channel": "a", "type": "json", "payload": _blob(value)}
            held = [{"graphTaskId": key, "writes": [write], "node": status and node}]
        self.send(
            data,
            "putGraphCheckpoint",
            taskId=task_id,
            checkpointId=checkpoint,
            parentId="c1" if checkpoint == "c2" else None,
            type="json",
            payload=_blob(checkpoint),
            metadata={"run_id": run},
            channelVersions={"a": value},
            channels=[{"channel": "a", "version": value, "type": "json", "payload": _blob(value)}],
            writes=held,
            nextNodes=data.draw(st.sampled_from([[], ["node"]]), label="next nodes"),
            fencingToken=self.token(data, task_id),
            newThread=new_thread,
        )

    @rule(data=st.data(), status=st.sampled_from(["SUCCESS", "SUCCESS", "INTERRUPTED", "FAILED"]))
    def graph_super_step(self, data: st.DataObject, status: str) -> None:
        """A super-step of a watched graph whose one node routes to itself: a new
        checkpoint carrying the node's writes and report (under a new LangGraph
        task id) and its next start (``nextNodes``), so that the node's end adopts
        the start the checkpoint before showed and the same write expects it again."""
        task_id = self.task(data)
        parent = self.graph_parents.get(task_id)
        checkpoint = self.new_id("cp")
        key = self.new_id("gt")
        node = {"graphTaskId": key, "name": "node", "status": status, "error": "boom"}
        write = {"idx": 0, "channel": "a", "type": "json", "payload": _blob(checkpoint)}
        answer = self.send(
            data,
            "putGraphCheckpoint",
            taskId=task_id,
            checkpointId=checkpoint,
            parentId=parent,
            type="json",
            payload=_blob(checkpoint),
            metadata={"source": "loop"},
            channelVersions={"a": checkpoint},
            channels=[],
            writes=[]
            if parent is None
            else [{"graphTaskId": key, "writes": [write], "node": node}],
            nextNodes=["node"],
            fencingToken=self.token(data, task_id),
        )
        if answer["__typename"] == "Task":
            self.graph_parents[task_id] = checkpoint

    @rule(data=st.data(), idx=st.sampled_from([0, 1, -1]), value=st.sampled_from(["x", "y"]))
    def put_graph_writes(self, data: st.DataObject, idx: int, value: str) -> None:
        task_id = self.task(data)
        self.send(
            data,
            "putGraphWrites",
            taskId=task_id,
            checkpointId="c1",
            graphTaskId="g1",
            writes=[{"idx": idx, "channel": "a", "type": "json", "payload": _blob(value)}],
            fencingToken=self.token(data, task_id),
        )

    @rule(
        data=st.data(),
        status=st.sampled_from(["RUNNING", "SUCCESS", "FAILED", "INTERRUPTED"]),
        ended=st.sampled_from([None, "COMPLETED", "FAILED"]),
    )
    def record_graph_run(self, data: st.DataObject, status: str, ended: str | None) -> None:
        task_id = self.task(data)
        nodes = data.draw(
            st.lists(st.just({"graphTaskId": "g1", "name": "node", "status": status}), max_size=1),
            label="nodes",
        )
        self.send(
            data,
            "recordGraphRun",
            taskId=task_id,
            nodes=nodes,
            ended=ended,
            fencingToken=self.token(data, task_id),
        )

    @rule(data=st.data())
    def clear_graph(self, data: st.DataObject) -> None:
        task_id = self.task(data)
        self.send(data, "clearGraph", taskId=task_id, fencingToken=self.token(data, task_id))

    @rule(data=st.data(), strategy=st.sampled_from(["KEEP_LATEST", "DELETE"]))
    def prune_graph(self, data: st.DataObject, strategy: str) -> None:
        task_id = self.task(data)
        self.send(
            data,
            "pruneGraph",
            taskId=task_id,
            strategy=strategy,
            fencingToken=self.token(data, task_id),
        )

    @rule(data=st.data(), runs=st.lists(st.sampled_from(["r1", "r2"]), max_size=2))
    def delete_graph_runs(self, data: st.DataObject, runs: list[str]) -> None:
        self.send(data, "deleteGraphRuns", runIds=runs)

    @rule(data=st.data())
    def copy_graph(self, data: st.DataObject) -> None:
        task_id = self.task(data)
        onto = data.draw(st.booleans(), label="onto an existing task")
        existing = _pick(data, sorted(self.tasks), "target")
        target = existing if onto and existing is not None else self.new_id("c")
        self.send(data, "copyGraph", taskId=task_id, newTaskId=target)

    # ------------------------------------------------------------ retries

    @rule(data=st.data())
    def retry_a_keyed_call(self, data: st.DataObject) -> None:
        """A keyed call sent again, to either process: the same bytes, nothing written."""
        earlier = _pick(data, self.sent, "retried")
        door = self.door(data)
        if earlier is None:
            return
        raw = self.post(door, earlier.name, earlier.variables, earlier.trusted)
        self.check_replay(earlier, raw)
        self.check_unchanged()

    def check_replay(self, earlier: Sent, raw: bytes) -> None:
        """A keyed call's repeat answers its first answer's bytes; when a session was
        deleted since (and the task with it), NotFound saying so."""
        if raw == earlier.answer:
            return
        answer = json.loads(raw)["data"][earlier.name]
        first = json.loads(earlier.answer)["data"][earlier.name]
        if _as_then(answer) == _as_then(first):
            return
        assert self.deletions > earlier.deletions, (earlier, raw)
        assert answer["__typename"] == "NotFound", (earlier, raw)
        assert "(deleted since)" in answer["message"], answer


COVERED = frozenset(
    {
        "startSession",
        "updateSession",
        "deleteSession",
        "addSessionItems",
        "popSessionItem",
        "clearSessionItems",
        "setBudget",
        "createTask",
        "addSteps",
        "startStep",
        "completeStep",
        "failStep",
        "recordSpend",
        "checkpointTask",
        "setTaskStatus",
        "resumeTask",
        "decideStep",
        "answerInterrupt",
        "acquireTaskLock",
        "renewTaskLock",
        "releaseTaskLock",
        "recordToolCall",
        "forkTask",
        "claimTask",
        "putGraphCheckpoint",
        "putGraphWrites",
        "recordGraphRun",
        "clearGraph",
        "pruneGraph",
        "deleteGraphRuns",
        "copyGraph",
        "submitInput",
        "cancelSubmission",
        "createSchedule",
        "updateSchedule",
        "deleteSchedule",
    }
)
"""The mutations the machine's rules send (each rule names its own)."""


def test_the_machine_sends_every_mutation() -> None:
    """Guards the machine's reach: a mutation added to the schema fails this test
    until a rule sends it (and joins ``COVERED``); each name in ``COVERED`` is sent
    by a rule of the machine."""
    assert set(MUTATION_TYPE.fields) == COVERED  # type: ignore[union-attr]
    import inspect

    source = inspect.getsource(LogMachine)
    assert {name for name in COVERED if f'"{name}"' not in source} == set()


class Tokens:
    """Tokens of fresh users, one per run of the machine so that runs share nothing,
    stored as ``runstate token create`` stores them (the digest, and the creation
    time of a token that command made): shrinking runs the machine hundreds of
    times, and the command costs a process each."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.made = itertools.count(1)
        create_token(database_url, "prop-0")

    def __call__(self) -> str:
        token = PREFIX + secrets.token_urlsafe(32)
        row = (f"prop-{next(self.made)}", digest(token))
        insert = (
            "INSERT INTO api_tokens (user_id, token_hash, created_at)"
            " SELECT {0}, {1}, created_at FROM api_tokens WHERE user_id = 'prop-0'"
        )
        if self.database_url.startswith("sqlite://"):
            with sqlite3.connect(self.database_url.removeprefix("sqlite://")) as db:
                db.execute(insert.format("?", "?"), row)
        else:
            asyncio.run(self._insert(insert.format("$1", "$2"), row))
        return token

    async def _insert(self, insert: str, row: tuple[str, str]) -> None:
        import asyncpg  # type: ignore[import-untyped]

        url = self.database_url.replace("postgres://", "postgresql://", 1)
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(insert, *row)
        finally:
            await conn.close()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Server]]:
    """One SQLite server, or two PostgreSQL server processes on one database."""
    if request.param == "sqlite":
        with server_on("sqlite", tmp_path_factory, "properties", **ENV) as one:
            yield [one]
    else:
        with two_servers("postgres", tmp_path_factory, "properties", **ENV) as both:
            yield list(both)


def test_every_mutation_keeps_the_log_whole(servers: list[Server]) -> None:
    """Guards the log's promises (the module's docstring) against every mutation in
    random order. Seen failing on the release before the keyed no-op fix: a keyed
    resumeTask that changed nothing left a seq without an event."""

    class Machine(LogMachine):
        doors: ClassVar[list[Door]] = [Door(s, Api(s.url, None)) for s in servers]
        tokens: ClassVar[Tokens] = Tokens(servers[0].database_url)

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
