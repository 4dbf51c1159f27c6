"""History: every past state of a task can be read back (taskAt) and rebuilt from the
snapshot plus the deltas, on SQLite and PostgreSQL; forks start from a past state.

These tests drive the services in-process against a real database (opened the way
the server opens it), so hypothesis can run many random sequences of writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from ag_ui.core import (
    BaseEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
)
from ag_ui_validate import PatchErr, apply_patch
from ag_ui_validate.pytest_plugin import assert_valid_agui
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic_core import to_json
from tortoise.exceptions import IntegrityError

from runstate import pubsub
from runstate.basics.enums import StepDecision, StepStatus, TaskEventKind, TaskStatus, ToolOutcome
from runstate.models import Step, StepVersion, Task, TaskEvent
from runstate.services.actions import leases, recovery, sessions, tasks, tools
from runstate.services.domain.errors import DomainError
from runstate.services.domain.validation import StepPatch, StepPlan
from runstate.services.domain.views import EventView, TaskView, Written, current_step
from runstate.services.live.messages import session_channel
from runstate.services.read import history
from runstate.services.read.convert import task_views
from runstate.services.write.house import House
from runstate.storage.clock import utcnow
from runstate.transport.agui.document import document
from runstate.transport.agui.frames import Run, framed, opening, render
from tests.support import database, opened

USER = "historian"
_ids = itertools.count()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with database(request.param, tmp_path_factory.mktemp(f"history-{request.param}")) as url:
        yield url


@pytest.fixture
async def house(database_url: str) -> AsyncIterator[House]:
    """The module's database, opened in this test's event loop, with an in-process
    broker installed so that the live events can be read too."""
    async with opened(database_url, live=True) as house:
        yield house


async def recorded(task_id: str) -> TaskView:
    """The task as its current rows hold it: steps and tool states read directly,
    not through the history."""
    row = await Task.get(user_id=USER, public_id=task_id)
    (view,) = await task_views([row], utcnow())
    return view


def replay(task: TaskView, event: EventView) -> TaskView:
    """A client's reading of the contract: the task as of ``event`` from the task as
    of the event before it."""
    steps = list(task.steps or ())
    for step in event.steps:
        if step.index < len(steps):
            steps[step.index] = step
        else:
            steps.append(step)
    tools_by_name = {t.tool_name: t for t in task.tool_states or ()}
    if event.tool_state is not None:
        tools_by_name[event.tool_state.tool_name] = event.tool_state
    leased = event.kind in (TaskEventKind.LOCK_ACQUIRED, TaskEventKind.LOCK_RELEASED)
    return replace(
        task,
        status=event.status,
        version=event.task_version,
        event_seq=event.seq,
        updated_at=event.at,
        stalled=event.stalled,
        current_step=current_step(s.status for s in steps),
        total_steps=len(steps),
        steps=tuple(steps),
        tool_states=tuple(tools_by_name[name] for name in sorted(tools_by_name)),
        lock=event.lock if leased else task.lock,
    )


def check_history(states: dict[int, TaskView], events: list[EventView]) -> None:
    """``events`` (seq 2 on) replayed onto the state at seq 1 give every recorded state."""
    assert [e.seq for e in events] == list(range(2, len(states) + 1))
    state = states[1]
    for event in events:
        # Events do not carry storedBytes (bookkeeping, not the task's state).
        state = replace(replay(state, event), stored_bytes=states[event.seq].stored_bytes)
        assert state == states[event.seq], f"replayed to seq {event.seq}"


# ---------------------------------------------------------------- random writes

storable = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
"""Text the API lets through: no NUL, no lone surrogate (PostgreSQL stores neither;
the transport and the document rules refuse them before a service is called)."""

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**31), 2**31)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(storable, max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(storable, max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
indexes = st.integers(0, 6)
statuses = st.sampled_from(list(StepStatus))
operations = st.one_of(
    st.tuples(st.just("start"), indexes),
    st.tuples(st.just("complete"), indexes, json_values),
    st.tuples(st.just("fail"), indexes, st.text(storable, min_size=1, max_size=8)),
    st.tuples(
        st.just("checkpoint"),
        st.lists(st.tuples(indexes, statuses, json_values), max_size=3, unique_by=lambda p: p[0]),
        st.none() | st.sampled_from(list(TaskStatus)),
    ),
    st.tuples(st.just("status"), st.sampled_from(list(TaskStatus))),
    st.tuples(st.just("add"), st.lists(st.booleans(), min_size=1, max_size=2)),
    st.tuples(st.just("resume")),
    st.tuples(st.just("decide"), indexes, st.sampled_from(list(StepDecision)), json_values),
    st.tuples(
        st.just("tool"),
        st.sampled_from(["search", "mail"]),
        st.sampled_from(list(ToolOutcome)),
        json_values,
    ),
    st.tuples(st.just("acquire"), st.sampled_from(["w1", "w2"])),
    st.tuples(st.just("release"), st.sampled_from(["w1", "w2"])),
)


async def run(house: House, task_id: str, op: tuple[Any, ...], now: TaskView) -> None:
    """Apply one random write and publish its events, as a mutation does; a refusal
    (a DomainError) is as good as any answer."""
    kind, args = op[0], op[1:]
    token = None if now.lock is None else now.lock.fencing_token
    versioned: dict[str, Any] = {"expected_version": now.version, "fencing_token": token}
    written: Written[Any] | None = None
    if kind == "start":
        written = await tasks.start_step(house, USER, task_id, args[0], **versioned)
    elif kind == "complete":
        written = await tasks.complete_step(
            house, USER, task_id, args[0], output=args[1], **versioned
        )
    elif kind == "fail":
        written = await tasks.fail_step(house, USER, task_id, args[0], error=args[1], **versioned)
    elif kind == "checkpoint":
        patches = [StepPatch(i, s, out, set_output=out is not None) for i, s, out in args[0]]
        written = await tasks.checkpoint_task(
            house, USER, task_id, patches, status=args[1], **versioned
        )
    elif kind == "status":
        written = await tasks.set_task_status(house, USER, task_id, args[0], **versioned)
    elif kind == "add":
        plans = [StepPlan(f"added-{i}", {"i": i}, idempotent=s) for i, s in enumerate(args[0])]
        written = await tasks.add_steps(house, USER, task_id, plans, **versioned)
    elif kind == "resume":
        written = await recovery.resume_task(house, USER, task_id, fencing_token=token)
    elif kind == "decide":
        index, decision, output = args
        written = await recovery.decide_step(
            house, USER, task_id, index, decision, output=output, **versioned
        )
    elif kind == "tool":
        name, outcome, result = args
        written = await tools.record_tool_call(
            house,
            USER,
            task_id,
            name,
            outcome,
            fencing_token=token,
            result=result,
            error="boom" if outcome is ToolOutcome.FAILURE else None,
            retry_after_seconds=60 if outcome is ToolOutcome.RATE_LIMITED else None,
        )
    elif kind == "acquire" and now.lock is None:  # re-acquiring extends: no event, by design
        written = await leases.acquire_task_lock(house, USER, task_id, args[0], 3600)
    elif kind == "release":
        written = await leases.release_task_lock(house, USER, task_id, args[0])
    if written is not None:
        house.publish(written.events)


async def live_events(
    house: House, subscription: pubsub.Subscription, task_pk: int, last: int
) -> list[Any]:
    """The broker messages of one task up to seq ``last``, read with a deadline."""
    found: dict[int, EventView] = {}
    deadline = asyncio.get_running_loop().time() + 10
    while last not in found:
        remaining = deadline - asyncio.get_running_loop().time()
        assert remaining > 0, f"live events stopped at {sorted(found)}; expected up to {last}"
        message = await subscription.next(remaining)
        if isinstance(message, bytes):
            event = house.decoded(message)
            assert event is not None
            if event.task_pk == task_pk:
                found[event.seq] = event
    return [found[seq] for seq in sorted(found)]


EVERY_KIND: dict[str, Any] = {
    "plan": [True, False],
    "ops": [
        ("acquire", "w1"),
        ("tool", "search", ToolOutcome.CALLING, None),
        ("start", 0),
        ("tool", "search", ToolOutcome.FAILURE, None),
        ("tool", "mail", ToolOutcome.RATE_LIMITED, None),
        ("tool", "search", ToolOutcome.SUCCESS, {"n": "42"}),
        ("complete", 0, {"n": "42", "rate": 2.5e-06}),  # a float Python writes 2.5e-06
        ("start", 1),
        ("release", "w1"),
        ("resume",),
        ("decide", 1, StepDecision.RETRY, None),
        ("add", [False]),
        ("checkpoint", [(1, StepStatus.SUCCESS, [1]), (2, StepStatus.RUNNING, None)], None),
        ("fail", 2, "declined"),
        ("resume",),
        ("checkpoint", [(2, StepStatus.SKIPPED, None)], None),
        ("add", [False, False]),
        ("checkpoint", [(3, StepStatus.RUNNING, None), (4, StepStatus.RUNNING, None)], None),
        ("resume",),
        ("decide", 3, StepDecision.COMPLETE, {"paid": 12.5}),
        ("decide", 4, StepDecision.SKIP, None),
    ],
}
"""Every kind of history at least once, whatever the random draw: tools (two, whose
order matters), leases, crashes, decisions, added steps, a checkpoint's jumps."""


def random_histories(examples: int) -> Callable[[Callable[..., Any]], Any]:
    """A test of ``examples`` random histories (a plan of steps, up to 20 writes),
    ``EVERY_KIND`` among them."""

    def decorate(test: Callable[..., Any]) -> Any:
        drawn = given(
            plan=st.lists(st.booleans(), min_size=1, max_size=4),
            ops=st.lists(operations, max_size=20),
        )(example(**EVERY_KIND)(test))
        checks = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
        return settings(max_examples=examples, deadline=None, suppress_health_check=checks)(drawn)

    return decorate


@random_histories(100)
async def test_every_state_is_read_back_and_replayed(
    house: House, plan: list[bool], ops: list[tuple[Any, ...]]
) -> None:
    """Guards taskAt and the deltas: after any sequence of writes, taskAt(seq) equals
    the task as its rows held it right after seq, and so do the state at seq 1 plus
    the stored events, and plus the live (broker) events, replayed in order."""
    session = await sessions.start_session(
        house, USER, default_ttl=3600, session_id=f"s{next(_ids)}"
    )
    async with house.broker.subscription([session_channel(session.pk)]) as inbox:
        task_id = f"t{next(_ids)}"
        plans = [StepPlan(f"step-{i}", {"i": i}, idempotent=safe) for i, safe in enumerate(plan)]
        created = await tasks.create_task(
            house, USER, session.id, goal="history", steps=plans, task_id=task_id
        )
        house.publish(created.events)
        states = {1: await recorded(task_id)}
        for op in ops:
            with contextlib.suppress(DomainError):
                await run(house, task_id, op, states[max(states)])
            now = await recorded(task_id)
            assert now.event_seq in (max(states), max(states) + 1), "one write, one event"
            states[now.event_seq] = now
        head = states[max(states)]
        for seq, state in states.items():
            # storedBytes is not history: taskAt answers the task's figure as it stands.
            past = replace(state, stored_bytes=head.stored_bytes)
            assert await history.task_at(head, seq) == past, f"taskAt seq {seq}"
        check_history(states, await history.events(head, 1, 1000))
        check_history(states, (await live_events(house, inbox, head.pk, head.event_seq))[1:])


# ---------------------------------------------------------------- forks


async def test_a_fork_starts_from_a_past_state_and_goes_its_own_way(house: House) -> None:
    """Guards forkTask: the fork's steps are taskAt(seq)'s with RUNNING made PENDING,
    its first event names its origin, and later writes to either task leave the other
    as it was."""
    session = await sessions.start_session(
        house, USER, default_ttl=3600, session_id=f"s{next(_ids)}"
    )
    plans = [StepPlan("search"), StepPlan("book", {"id": 7}, idempotent=False), StepPlan("mail")]
    source = (await tasks.create_task(house, USER, session.id, goal="trip", steps=plans)).value
    v = (await tasks.start_step(house, USER, source.id, 0, expected_version=1)).value.version
    v = (
        (
            await tasks.complete_step(house, USER, source.id, 0, expected_version=v, output="found")
        ).value
    ).version
    at = (await tasks.start_step(house, USER, source.id, 1, expected_version=v)).value
    past = await history.task_at(at, at.event_seq)
    await tasks.complete_step(
        house, USER, source.id, 1, expected_version=at.version, output="booked"
    )

    fork = (
        await tasks.fork_task(house, USER, source.id, at.event_seq, new_id=f"f{next(_ids)}")
    ).value
    forked = await recorded(fork.id)
    assert past.steps is not None
    expected = [past.steps[0], replace(past.steps[1], status=StepStatus.PENDING), past.steps[2]]
    assert forked.steps == tuple(expected)
    assert (forked.status, forked.version, forked.event_seq, forked.current_step) == (
        TaskStatus.PLANNED,
        1,
        1,
        1,
    )
    assert (forked.session_id, forked.goal, forked.lock) == (session.id, "trip", None)
    (created,) = await history.events(forked, 0, 10)
    assert created.kind is TaskEventKind.TASK_CREATED
    assert created.origin is not None
    assert (created.origin.task_id, created.origin.seq) == (source.id, at.event_seq)
    assert await history.task_at(forked, 1) == forked

    before = await recorded(source.id)
    await tasks.start_step(house, USER, fork.id, 1, expected_version=1)
    assert await recorded(source.id) == before, "a write to the fork leaves the source"
    await tasks.start_step(house, USER, source.id, 2, expected_version=before.version)
    after = await recorded(fork.id)
    assert after.steps is not None
    assert [s.status for s in after.steps] == [
        StepStatus.SUCCESS,
        StepStatus.RUNNING,
        StepStatus.PENDING,
    ], "a write to the source leaves the fork"


async def test_a_fork_of_a_seq_that_never_was_is_refused(house: House) -> None:
    session = await sessions.start_session(
        house, USER, default_ttl=3600, session_id=f"s{next(_ids)}"
    )
    source = (
        await tasks.create_task(house, USER, session.id, goal="g", steps=[StepPlan("a")])
    ).value
    for seq in (0, 2):
        with pytest.raises(DomainError, match="seq: must be between 1 and 1"):
            await tasks.fork_task(house, USER, source.id, seq)


async def test_a_fork_of_a_task_awaiting_a_decision_starts_with_the_step_pending(
    house: House,
) -> None:
    """A step IN_DOUBT in the source is PENDING in the fork: nobody has run it there."""
    session = await sessions.start_session(
        house, USER, default_ttl=3600, session_id=f"s{next(_ids)}"
    )
    source = (
        await tasks.create_task(
            house, USER, session.id, goal="pay", steps=[StepPlan("charge", idempotent=False)]
        )
    ).value
    await tasks.start_step(house, USER, source.id, 0, expected_version=1)
    plan = (await recovery.resume_task(house, USER, source.id)).value
    assert (plan.steps_in_doubt, plan.task.status) == ((0,), TaskStatus.AWAITING_DECISION)
    fork = await recorded(
        (await tasks.fork_task(house, USER, source.id, plan.task.event_seq)).value.id
    )
    assert fork.steps is not None
    assert [(s.status, s.attempts) for s in fork.steps] == [(StepStatus.PENDING, 1)]
    assert fork.status is TaskStatus.PLANNED, "no step has begun in the fork"


async def test_the_database_keeps_seqs_positions_and_versions_unique(house: House) -> None:
    """Guards the unique indexes behind the log and the history (on SQLite, table
    rebuilds by migrations 0003 and 0004 dropped them; 0006 restores them): a
    second event with a task's seq, a second step at a position, a second version
    of a step at a seq are refused by the database itself."""
    session = await sessions.start_session(
        house, USER, default_ttl=3600, session_id=f"s{next(_ids)}"
    )
    task = (await tasks.create_task(house, USER, session.id, goal="g", steps=[StepPlan("a")])).value
    at = utcnow()
    version: dict[str, Any] = {"task_id": task.pk, "position": 0, "seq": 2}
    version["status"] = StepStatus.RUNNING
    await StepVersion.create(**version)
    duplicates = [
        TaskEvent.create(
            task_id=task.pk,
            seq=1,
            task_version=1,
            kind=TaskEventKind.TASK_CREATED,
            at=at,
            status=TaskStatus.PLANNED,
        ),
        Step.create(task_id=task.pk, position=0, action="again", status=StepStatus.PENDING),
        StepVersion.create(**version),
    ]
    for duplicate in duplicates:
        with pytest.raises(IntegrityError):
            await duplicate


# ---------------------------------------------------------------- AG-UI


@random_histories(60)
async def test_agui_deltas_rebuild_every_state_and_each_run_is_valid(
    house: House, plan: list[bool], ops: list[tuple[Any, ...]]
) -> None:
    """Guards the AG-UI state document and its deltas (``transport.agui``): after
    any sequence of writes, the document the frames carry after event n equals
    the document of ``taskAt(n)``, applying each delta (its ``test`` op included)
    to the one before gives it, and a run opened at any seq, cut at its first
    resting point, passes AG-UI's validator."""
    session = await sessions.start_session(
        house, USER, default_ttl=3600, session_id=f"s{next(_ids)}"
    )
    task_id = f"t{next(_ids)}"
    plans = [StepPlan(f"step-{i}", {"i": i}, idempotent=safe) for i, safe in enumerate(plan)]
    await tasks.create_task(house, USER, session.id, goal="agui", steps=plans, task_id=task_id)
    for op in ops:
        now = await recorded(task_id)
        with contextlib.suppress(DomainError):
            await run(house, task_id, op, now)
    head = await recorded(task_id)
    logged = await history.events(head, 0, 1000)
    states = {n: document(await history.task_at(head, n)) for n in range(1, head.event_seq + 1)}
    for base in range(1, head.event_seq + 1):
        agui_run = Run(task_id, session.id, f"run-{base}", "epoch", base)
        doc = states[base]
        frames = opening(doc, agui_run, logged[base - 1].at)
        for event in logged[base:]:
            if frames[-1].last:
                break
            before = doc
            rendered = render(doc, event)
            doc, group = rendered.after, framed(rendered, agui_run)
            assert doc == states[event.seq], f"the document after seq {event.seq}"
            # and its bytes: a run chained from another's rendering sends what one
            # opened from the database would
            assert to_json(doc) == to_json(states[event.seq])
            patched = apply_patch(before, json.loads(group[0].data)["delta"])
            assert not isinstance(patched, PatchErr), patched
            assert patched.result == states[event.seq], f"the delta of seq {event.seq}"
            frames += group
        for frame in frames:  # as AG-UI's own models write it, byte for byte
            kind = AGUI_EVENTS[json.loads(frame.text)["type"]]
            assert kind.model_validate_json(frame.text).model_dump_json(by_alias=True) == frame.text
        events = [json.loads(f.text) for f in frames]
        assert_valid_agui(events if frames[-1].last else [*events, _cut()], max_warnings=0)
        if base > 1:
            break  # every base would be slow; the first two cover opening mid-history


AGUI_EVENTS: dict[str, type[BaseEvent]] = {
    kind.model_fields["type"].default.value: kind
    for kind in (
        RunStartedEvent,
        RunFinishedEvent,
        RunErrorEvent,
        StateSnapshotEvent,
        StateDeltaEvent,
        StepStartedEvent,
        StepFinishedEvent,
    )
}
"""The AG-UI models of the events a run sends, by their ``type``."""


def _cut() -> dict[str, Any]:
    """An end for a run the history left open (its steps may be open too)."""
    return {"type": "RUN_ERROR", "message": "the history ends here"}
