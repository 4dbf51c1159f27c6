"""What ``RunstateSaver`` reports of a graph's node runs, shown as the steps of
the thread's task (``recordGraphRun``, and ``putGraphWrites``' ``node``).

A node's end is read from the pending writes LangGraph hands the checkpointer
(every node run writes something, ``__no_writes__`` at least): an error, an
interrupt, or its writes, summarised. Its start the checkpointer never sees, so
``Watcher``, a LangChain callback handler, reports it (``RunstateSaver.watch``
adds it to a graph), with the run's end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langgraph.errors import GraphBubbleUp

from runstate.client.exceptions import RunstateError, TaskInterrupted
from runstate.client.records import SpendReport
from runstate.integrations.pricing import Prices, priced

log = logging.getLogger(__name__)

# LangGraph's names for the special writes, as stored in checkpoints.
ERROR = "__error__"
INTERRUPT = "__interrupt__"
RESUME = "__resume__"
NO_WRITES = "__no_writes__"
SENDS = "__pregel_tasks"
NEXT = "branch:to:"
JOIN = "join:"
PULL_PATH = "~__pregel_pull, "
START_NODE = "__start__"
NULL_TASK = "00000000-0000-0000-0000-000000000000"

SHOWN_CHARS = 1000
"""The longest a value is shown in a step's output, as JSON text."""
OUTPUT_CHARS = 16_000
"""The longest a step's output may be (the server takes 64 KB of JSON): past it,
only the channels written are named."""
ERROR_CHARS = 2000
HOLD_MOST = 10.0
"""Seconds a node's end waits for its start held behind earlier nodes' ends."""


@dataclasses.dataclass(frozen=True)
class Node:
    """A node run as the watcher saw it start."""

    name: str
    super_step: int | None


def shown(value: Any) -> Any:
    """A value as a step shows it: itself when it is JSON of at most
    ``SHOWN_CHARS`` characters (objects as their fields or their text), else the
    start of its text."""
    text = json.dumps(value, default=_plain, ensure_ascii=False)
    if len(text) <= SHOWN_CHARS:
        return json.loads(text)
    return text[: SHOWN_CHARS - 1] + "…"


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # pydantic models, LangChain messages
        return dump()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def routed_to(channel: str) -> str | None:
    """Where a routing write leads, as a person reads it: ``branch:to:b`` is ``b``;
    ``join:a+b:c`` (an edge from several nodes) is ``c`` with the nodes it waits
    for. None for a channel of the graph's state."""
    if channel.startswith(NEXT):
        return channel.removeprefix(NEXT)
    if channel.startswith(JOIN) and channel.count(":") >= 2:
        starts, end = channel.removeprefix(JOIN).rsplit(":", 1)
        return f"{end} (once {' and '.join(starts.split('+'))} end)"
    return None


def summary(writes: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """A node's writes as its step's output: each channel's value, the nodes it
    routed to (``next``) and those it sent work to (``sends``). LangGraph's own
    channels (``__...``, routing) never show as the graph's state."""
    output: dict[str, Any] = {}
    routed = [r for c, _ in writes if (r := routed_to(c)) is not None]
    sends = [getattr(v, "node", "?") for c, v in writes if c == SENDS]
    state = [(c, v) for c, v in writes if not c.startswith("__") and routed_to(c) is None]
    for channel, value in state:
        output[channel] = shown(value)
    if routed:
        output["next"] = routed
    if sends:
        output["sends"] = sends
    if len(json.dumps(output, ensure_ascii=False)) > OUTPUT_CHARS:
        return {"channels": sorted({c for c, _ in state})}
    return output


def error_text(error: Any) -> str:
    """An exception as a step's error: its type and message."""
    text = f"{type(error).__name__}: {error}".strip()
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


COUNTED_IDS = 10_000
"""How many AI messages' ids a saver remembers having counted."""


class Counted:
    """The ids of the AI messages whose usage a saver reported, the newest
    ``COUNTED_IDS``: a message a node returns again (a subgraph used as a node
    returns its inner nodes' messages, a node may return earlier turns') is
    counted once."""

    def __init__(self) -> None:
        self._ids: dict[str, None] = {}

    def first(self, message_id: str | None) -> bool:
        """Whether a message is counted for the first time (one without an id always is)."""
        if message_id is None:
            return True
        if message_id in self._ids:
            return False
        self._ids[message_id] = None
        if len(self._ids) > COUNTED_IDS:
            del self._ids[next(iter(self._ids))]
        return True


def usage(
    writes: Sequence[tuple[str, Any]], prices: Prices, counted: Counted | None = None
) -> dict[str, Any] | None:
    """What a node's model calls spent, as ``SpendInput``: the ``usage_metadata`` of
    the AI messages it returned (LangChain's standard usage: ``input_tokens``,
    ``output_tokens``) and not counted before (``counted``), summed, the first
    model named (``response_metadata``'s ``model_name`` or ``model``), priced by
    ``prices`` per model (``pricing.priced``). None when no message carried usage."""
    reports: list[SpendReport] = []
    for channel, value in writes:
        if channel.startswith(("__", NEXT)):
            continue
        for message in _listed(value):
            tokens = getattr(message, "usage_metadata", None)
            if not isinstance(tokens, Mapping):
                continue
            if counted is not None and not counted.first(getattr(message, "id", None)):
                continue
            meta = getattr(message, "response_metadata", None) or {}
            name = meta.get("model_name") or meta.get("model")
            tokens_in = int(tokens.get("input_tokens") or 0)
            tokens_out = int(tokens.get("output_tokens") or 0)
            reports.append(
                priced(tokens_in, tokens_out, name if isinstance(name, str) else None, prices)
            )
    if not reports:
        return None
    model = next((r.model for r in reports if r.model is not None), None)
    return SpendReport(
        sum(r.input_tokens for r in reports),
        sum(r.output_tokens for r in reports),
        sum(r.cost_micros for r in reports),
        model,
    ).wire()


def node_report(
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
    namespace: str,
    seen: Node | None,
    prices: Prices | None = None,
    counted: Counted | None = None,
) -> dict[str, Any] | None:
    """What a LangGraph task's writes say of its node's run, as ``GraphNodeInput``,
    with what its model calls spent (``usage``); None for writes that are no node's
    (the input, a resume's answer) and for a node whose name is not known (a
    ``Send``'s, without the watcher)."""
    if task_id == NULL_TASK:
        return None
    name = seen.name if seen is not None else None
    if name is None and task_path.startswith(PULL_PATH):
        name = task_path.removeprefix(PULL_PATH)
    if name is None or name == START_NODE:
        return None
    channels = {c for c, _ in writes}
    report: dict[str, Any] = {"graphTaskId": task_id, "name": name, "namespace": namespace}
    if seen is not None and seen.super_step is not None:
        report["superStep"] = seen.super_step
    spent = usage(writes, prices or {}, counted)
    if spent is not None:
        report["spend"] = spent
    if ERROR in channels:
        error = next(v for c, v in writes if c == ERROR)
        return report | {"status": "FAILED", "error": error_text(error)}
    if INTERRUPT in channels:
        raised = [i for c, v in writes if c == INTERRUPT for i in _listed(v)]
        return report | {"status": "INTERRUPTED", "output": [shown(i.value) for i in raised]}
    if channels <= {RESUME}:
        return None
    return report | {"status": "SUCCESS", "output": summary(writes)}


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


Report = Callable[[str, "dict[str, Any] | None", "str | None"], None]
"""Queue a report for a thread: a node's start, or the run's end (COMPLETED,
FAILED)."""


class Watcher(BaseCallbackHandler):
    """A LangChain callback handler that reports each node run's start and each
    run's end of the graphs it is given to (``RunstateSaver.watch``).

    A node run is the run LangGraph tags ``graph:step:N``, its metadata naming
    the node, the thread and the task (``langgraph_checkpoint_ns`` ends in
    ``node:task_id``); a graph's run is one with a ``thread_id`` and no node.
    Called inline: it only queues the report, which the saver sends in order.
    """

    run_inline = True
    raise_error = False

    def __init__(
        self, report: Report, seen: dict[str, Node], begun: Callable[[str], None] | None = None
    ) -> None:
        self._report = report
        self._seen = seen
        self._begun = begun
        """Told of each graph run's start, by its thread (its end is reported)."""
        self._runs: dict[UUID, str] = {}
        """The graph runs under way, each with its thread."""

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        meta = metadata or {}
        thread = meta.get("thread_id")
        if thread is None:
            return
        node = meta.get("langgraph_node")
        if node is None:
            self._runs[run_id] = str(thread)
            if self._begun is not None:
                self._begun(str(thread))
            return
        step = next((t for t in tags or () if t.startswith("graph:step:")), None)
        path = str(meta.get("langgraph_checkpoint_ns", ""))
        namespace, _, last = path.rpartition("|")
        if step is None or ":" not in last:
            return  # a run inside a node's, not the node's own
        task_id = last.partition(":")[2]
        super_step = int(step.removeprefix("graph:step:"))
        self._seen[task_id] = Node(str(node), super_step)
        report = {
            "graphTaskId": task_id,
            "name": str(node),
            "namespace": namespace,
            "superStep": super_step,
            "status": "RUNNING",
        }
        self._report(str(thread), report, None)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        thread = self._runs.pop(run_id, None)
        if thread is not None:
            self._report(thread, None, "COMPLETED")

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        thread = self._runs.pop(run_id, None)
        if thread is not None:
            # An interrupt ends a run as planned; the thread goes on waiting.
            planned = isinstance(error, GraphBubbleUp)
            self._report(thread, None, "COMPLETED" if planned else "FAILED")


Send = Callable[[list[dict[str, Any]], "str | None"], Awaitable[None]]
"""Send node reports and a run's end (None: none) for one thread."""


@dataclasses.dataclass
class _Queued:
    report: dict[str, Any] | str
    """A node's start (``GraphNodeInput``) or a run's end (``GraphRunEnd``)."""
    sent: asyncio.Future[None]
    released: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set once it is no longer held."""


class Reports:
    """One thread's node starts and run ends, sent in the order a viewer should
    see them, on the saver's loop.

    LangGraph starts a super-step's nodes while the previous one's pending
    writes (which report those nodes' ends) may still be on their way, so a start
    is held until every node of an earlier super-step in its namespace has
    ended (``ended``, once its writes are stored); a run's end releases what is
    held. Starts queued meanwhile go in one call; a refused call is logged (the
    graph's next write meets the refusal too).
    """

    def __init__(self, thread_id: str, send: Send) -> None:
        self._thread_id = thread_id
        self._send = send
        self._ready: list[_Queued] = []
        self._held: list[_Queued] = []
        self._running: dict[str, tuple[str, int]] = {}
        """Nodes whose start went to ``_ready``, by task id: namespace, super-step."""
        self._starts: dict[str, _Queued] = {}
        """Each started node's report, sent or to be."""
        self._sender: asyncio.Task[None] | None = None

    def start(self, report: dict[str, Any]) -> None:
        """Queue a node's start (held behind an earlier super-step's nodes)."""
        queued = _Queued(report, asyncio.get_running_loop().create_future())
        self._starts[report["graphTaskId"]] = queued
        if self._held or self._behind(report):
            self._held.append(queued)
        else:
            self._go(queued)

    def shown(self, report: dict[str, Any]) -> None:
        """A node's start its checkpoint already showed (``nextNodes``): nothing to
        send, but the node runs until its end is stored, and a later super-step's
        starts wait behind it as behind any other."""
        queued = _Queued(report, asyncio.get_running_loop().create_future())
        queued.sent.set_result(None)
        queued.released.set()
        self._starts[report["graphTaskId"]] = queued
        self._run(report)

    def end_run(self, ended: str) -> None:
        """Queue a run's end, after everything held."""
        self._release()
        self._running.clear()
        self._starts.clear()  # those not ended never will: the run is over
        self._go(_Queued(ended, asyncio.get_running_loop().create_future()))

    async def started(self, task_id: str) -> None:
        """Wait until the node's start, if one was queued, is sent. A start held
        for ``HOLD_MOST`` seconds goes then, with those held before it: an earlier
        node whose end never comes (one that wrote nothing, in a LangGraph without
        ``__no_writes__``) must not stop the graph."""
        queued = self._starts.get(task_id)
        if queued is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(queued.released.wait()), HOLD_MOST)
        except TimeoutError:
            if queued in self._held:
                cut = self._held.index(queued) + 1
                going, self._held = self._held[:cut], self._held[cut:]
                for late in going:
                    self._go(late)
        await asyncio.shield(queued.sent)

    def ended(self, task_id: str) -> None:
        """The node's end is stored: starts held behind it may go."""
        self._starts.pop(task_id, None)
        if self._running.pop(task_id, None) is None:
            return
        while self._held and not self._behind(self._held[0].report):
            self._go(self._held.pop(0))

    async def drained(self) -> None:
        """Wait until everything queued, held starts included, is sent (closing:
        no end will release them)."""
        self._release()
        await self.sent()

    async def sent(self) -> None:
        """Wait until what is ready now is sent (held starts stay held)."""
        while self._sender is not None and not self._sender.done():
            await asyncio.wait({self._sender})

    def _release(self) -> None:
        """Queue the held starts as they are."""
        held, self._held = self._held, []
        for queued in held:
            self._go(queued)

    @property
    def idle(self) -> bool:
        """Nothing queued, held, sent or running."""
        done = self._sender is None or self._sender.done()
        return done and not (self._ready or self._held or self._running or self._starts)

    def _behind(self, report: dict[str, Any] | str) -> bool:
        """Whether a start must wait for an earlier super-step's node to end."""
        if isinstance(report, str):
            return False
        step, namespace = report.get("superStep"), report.get("namespace", "")
        return step is not None and any(
            ns == namespace and earlier < step for ns, earlier in self._running.values()
        )

    def _run(self, report: dict[str, Any]) -> None:
        """The node of a start counts as running until it ends (``ended``), when
        its super-step is known: later super-steps' starts wait behind it."""
        if report.get("superStep") is not None:
            self._running[report["graphTaskId"]] = (report["namespace"], report["superStep"])

    def _go(self, queued: _Queued) -> None:
        queued.released.set()
        if isinstance(queued.report, dict):
            self._run(queued.report)
        self._ready.append(queued)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._sending())

    async def _sending(self) -> None:
        while self._ready:
            ends = [i for i, q in enumerate(self._ready) if isinstance(q.report, str)]
            cut = ends[0] + 1 if ends else len(self._ready)
            batch, self._ready = self._ready[:cut], self._ready[cut:]
            nodes = [q.report for q in batch if isinstance(q.report, dict)]
            last = batch[-1].report
            try:
                await self._send(nodes, last if isinstance(last, str) else None)
            except TaskInterrupted as stopped:  # asked to stop: its graph's writes say so
                log.info("node runs of thread %s not shown: %s", self._thread_id, stopped)
            except RunstateError as refused:
                log.warning("could not show node runs of thread %s: %s", self._thread_id, refused)
            for queued in batch:
                if not queued.sent.done():
                    queued.sent.set_result(None)
