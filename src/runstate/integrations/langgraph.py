"""``RunstateSaver``: LangGraph's checkpointer interface on a runstate server.

A LangGraph thread is the runstate task whose id is the ``thread_id``, in the
session ``session_id`` (both created on the first write). The saver talks to the
server over its GraphQL API (``runstate.client.Runstate``), so a graph needs a
URL and a token, never database credentials. Checkpoints are stored as LangGraph's
Postgres saver stores them: the checkpoint without its channel values, and each
channel's value once per version (a checkpoint stores only the channels it
changed), every value as LangGraph's serializer wrote it (``dumps_typed``: a type
and bytes, never re-encoded).

Every call runs on one event loop: the saver's own, in a thread of its own, so
that the sync methods (``graph.invoke``) and the async ones (``graph.ainvoke``)
share one connection from any thread or loop; or, opened with ``from_url``, the
loop that opened it, where its async calls run without a hop between threads.

Each node run is shown as a step of the thread's task (``langgraph_steps``):
finished, failed or interrupted as its pending writes say, and, in a graph given
to ``watch``, RUNNING from its start, the thread following the run to its end.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import logging
import random
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.pregel import Pregel

from runstate.client import Runstate
from runstate.client.exceptions import NotFound, ProblemError, RunstateError
from runstate.client.ids import checked_id, is_id
from runstate.integrations.langgraph_steps import (
    Counted,
    Node,
    Reports,
    Send,
    Watcher,
    node_report,
)
from runstate.integrations.pricing import Prices

log = logging.getLogger(__name__)

T = TypeVar("T")
G = TypeVar("G", bound=Pregel[Any, Any, Any, Any])

HOLD_WRITES = 0.05
"""How long, in seconds, a node's pending writes may wait for the checkpoint that
follows them, to go in its request (``RunstateSaver``'s ``hold_writes``)."""

BRANCH = "branch:to:"
"""The channel LangGraph writes to start a node at the next super-step."""

SESSION_TTL = 366 * 24 * 3600
"""The inactivity a session of threads outlives, the most runstate allows: a thread
may wait at an interrupt for days, and writes to an expired session's tasks are
refused for good."""


def _value(typed: tuple[str, bytes]) -> dict[str, str]:
    """A serializer's ``(type, bytes)`` as the API takes it."""
    return {"type": typed[0], "payload": base64.b64encode(typed[1]).decode("ascii")}


def _typed(value: dict[str, Any]) -> tuple[str, bytes]:
    """The serializer's ``(type, bytes)`` of an answer's ``type`` and ``payload``."""
    return str(value["type"]), base64.b64decode(value["payload"])


class _Listing:
    """Where a ``list`` of checkpoints stands: what it asks, its cursor and how many
    it may still give."""

    def __init__(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> None:
        configurable = config["configurable"] if config else {}
        self.wanted = get_checkpoint_id(config) if config else None
        self.before = get_checkpoint_id(before) if before else None
        self.filter = filter or {}
        self.arguments: dict[str, Any] = {
            "threadId": configurable.get("thread_id"),
            "namespace": configurable.get("checkpoint_ns"),
            "before": self.before,
            "metadata": filter or None,
        }
        self.after: str | None = None
        self.left = limit
        self.direct = self.wanted is not None and self.arguments["threadId"] is not None
        """The config names one checkpoint of one thread: read it by its id."""
        self.done = limit == 0

    def admits(self, found: dict[str, Any]) -> bool:
        """Whether a checkpoint read by id passes the listing's filter and ``before``."""
        metadata = found["metadata"]
        if self.before is not None and not found["checkpointId"] < self.before:
            return False
        return all(metadata.get(k) == v for k, v in self.filter.items())


@dataclass
class _Held:
    """Pending writes against one checkpoint, held for the checkpoint that follows
    it: each LangGraph task's as ``putGraphCheckpoint`` takes them, the sending of
    their nodes' starts (a step shows its start before its end), and the future
    their ``aput_writes`` calls wait on (done once stored)."""

    groups: builtins.list[dict[str, Any]]
    starts: builtins.list[asyncio.Future[None]]
    stored: asyncio.Future[None]
    timer: asyncio.TimerHandle | None
    """Counting ``hold_writes`` down; None while a checkpoint of the thread is on
    its way (LangGraph sends the next one only after it)."""


def _goal(thread_id: str) -> str:
    """The goal of a thread's task, as the dashboard lists it."""
    return f"LangGraph thread {thread_id}"


def _thread_id(configurable: dict[str, Any]) -> str:
    """The config's ``thread_id``, the id of the thread's task: checked before
    anything is sent (``client.ids``)."""
    return checked_id(str(configurable["thread_id"]), "thread_id")


async def _started(reports: Reports | None, task_id: str) -> None:
    """Until the node's start, if the thread's reports queued one, is sent."""
    if reports is not None:
        await reports.started(task_id)


class RunstateSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer whose threads are tasks of a runstate server.

    ``url`` is the server's base URL and ``token`` a caller's token, as
    ``runstate.client.Runstate`` takes them. Close it with ``close()`` or
    ``await aclose()``, or open it with ``from_url`` / ``from_url_sync``.

    The session is made with ``session_ttl`` seconds of inactivity (a year, the
    most runstate allows: a graph may wait at an interrupt for days, and an
    expired session takes no writes again).

    With ``holder`` (a name unique to this worker), the saver owns each thread it
    runs: it leases the thread's task on its first write (``LockHeld`` while
    another worker's lease is live), renews the lease every third of
    ``lease_ttl`` seconds while it runs the thread, and sends its fencing token
    with every write. A thread runs from a write until its run ends, as the
    watcher (``watch``) reports it, or, when the watcher does not follow it, until
    the saver has written nothing to it for ``lease_ttl`` seconds; then the lease is
    released (and on close). A later write takes it again: a new run's afresh, a
    quiet thread's only if no other worker was granted it meanwhile. A saver whose
    lease lapsed (a frozen worker) and was taken over gets
    ``runstate.client.StaleFencingToken`` from every later write, and nothing of it
    is stored: one lineage survives, never a fork.

    A node's pending writes go with the checkpoint that follows them, in one
    request and one transaction: ``aput_writes`` waits up to ``hold_writes``
    seconds for that checkpoint's ``aput``, and returns once its writes are
    stored, so what it acknowledged is durable, as with LangGraph's own savers.
    Writes no checkpoint follows in that time (a sibling node still running, a
    graph with a DeltaChannel, whose checkpoint waits for its writes) go alone
    then; errors and interrupts go at once, with the writes held beside them.
    ``hold_writes=0`` sends every write alone.

    A saver made with ``RunstateSaver(...)`` or ``from_url_sync`` runs its calls on
    an event loop of its own, in a thread of its own, so that sync and async
    methods share one connection from any thread or loop. One opened with
    ``from_url`` (``loop``) runs on the loop that opened it: its async methods,
    called there, cost no hop to another thread; its sync methods may be called
    from other threads, not from that loop.

    Each node run is a step of the thread's task, named after the node, shown
    when it finished (SUCCESS with its writes summarised, FAILED with its error,
    PENDING with the values of its ``interrupt()``). A graph given to ``watch``
    also shows each node RUNNING from its start, and the thread COMPLETED or
    FAILED when a run ends.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        session_id: str = "langgraph",
        holder: str | None = None,
        lease_ttl: float = 30.0,
        session_ttl: int = SESSION_TTL,
        hold_writes: float = HOLD_WRITES,
        serde: SerializerProtocol | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        prices: Prices | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.hold_writes = hold_writes
        self.prices: Prices = dict(prices or {})
        self._counted = Counted()
        """Model prices per million tokens, input and output (``langgraph_steps.usage``):
        the cost of each node's model calls. Tokens are recorded without them."""
        self.url = url
        self.token = token
        self.session_id = session_id
        self.session_ttl = session_ttl
        self.holder = holder
        self.lease_ttl = lease_ttl
        self._threads: set[str] = set()
        """Threads whose task is known to exist."""
        self._creating: dict[str, asyncio.Future[None]] = {}
        self._tokens: dict[str, int] = {}
        """With a holder: the fencing token of each thread this saver leased. Kept
        when the lease is lost, so that every later write is refused."""
        self._renewing: set[str] = set()
        """The threads running now: their leases are renewed."""
        self._resting: set[str] = set()
        """Threads left quiet for ``lease_ttl`` while no watched run was under way:
        their leases released, their tokens kept. A write to one takes the lease
        again only if no other worker was granted it meanwhile (the next token is
        this saver's); else the write carries the old token and is refused."""
        self._written_at: dict[str, float] = {}
        """When the saver last wrote to each leased thread (the loop's clock)."""
        self._runs: dict[str, int] = {}
        """Watched graph runs under way, by thread (``Watcher``'s starts, less the
        ends sent)."""
        self._renewer: asyncio.Task[None] | None = None
        self._seen: dict[str, Node] = {}
        """Node runs the watcher saw start, by LangGraph task id, until they end."""
        self._reports: dict[str, Reports] = {}
        self._forgetting: set[asyncio.Task[None]] = set()
        self._held: dict[tuple[str, str, str], _Held] = {}
        """Pending writes held for the next checkpoint, by thread, namespace and the
        checkpoint they are written against (the next one's parent)."""
        self._putting: dict[str, int] = {}
        """Checkpoints on their way, by thread."""
        self._expected: set[tuple[str, str, str, int]] = set()
        """Node starts sent with a checkpoint (``_next_nodes``), by thread, namespace,
        node and super-step, until the watcher reports them (not sent again)."""
        self._reached: dict[tuple[str, str], int] = {}
        """The latest super-step whose node start the watcher reported, by thread and
        namespace (set from the graph's thread, as it reports)."""
        self._flushing: set[asyncio.Task[None]] = set()
        self.watcher = Watcher(self._report, self._seen, self._begun)
        """The callback handler ``watch`` adds to a graph; give it yourself in a
        run's ``callbacks`` to watch that run alone."""
        self._leasing = asyncio.Lock()
        """One lease taken at a time: LangGraph may write a thread's checkpoint and
        pending writes at once, and two grants racing refuse each other."""
        self._closed = False
        # Marked as an upload, a request may carry a checkpoint past the server's
        # usual body limit (RUNSTATE_MAX_CHECKPOINT_BYTES): the server then runs it
        # only if it stores checkpoints or pending writes.
        self._client = Runstate(self.url, self.token, headers={"X-Runstate-Upload": "graph"})
        self._runner: threading.Thread | None = None
        """The saver's own thread, running ``_loop``; None when the saver runs on the
        loop that opened it (``from_url``)."""
        if loop is not None:  # from_url: its client opened there, by it
            self._loop = loop
            return
        self._loop = asyncio.new_event_loop()
        self._runner = threading.Thread(
            target=self._loop.run_forever, name="runstate-saver", daemon=True
        )
        self._runner.start()
        self._on_loop(self._client.__aenter__()).result()

    def _on_loop(self, work: Coroutine[Any, Any, T]) -> Future[T]:
        if self._closed or self._loop.is_closed():
            work.close()
            raise RuntimeError("the saver is closed")
        return asyncio.run_coroutine_threadsafe(work, self._loop)

    async def _run(self, work: Coroutine[Any, Any, T]) -> T:
        """``work`` on the saver's loop: at once when called there (the loop that
        opened it with ``from_url``), else awaited from the caller's loop."""
        try:
            here = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            here = False
        if here and not self._closed:
            return await work
        return await asyncio.wrap_future(self._on_loop(work))

    def _wait(self, work: Coroutine[Any, Any, T]) -> T:
        """``work`` on the saver's loop, waited for from a thread that does not run
        it (waiting there would stop the very loop that must do the work)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            work.close()
            raise RuntimeError(
                "a sync method of RunstateSaver called on the loop the saver runs on:"
                " use the async ones there (ainvoke), or open it with from_url_sync"
            )
        return self._on_loop(work).result()

    def watch(self, graph: G) -> G:
        """The graph, reporting each node's start and each run's end to the thread's
        task: ``graph = saver.watch(builder.compile(checkpointer=saver))``.
        Callbacks given to a run are added to the watcher, not put in its place."""
        return graph.with_config(callbacks=[self.watcher])

    # -- opening and closing

    @classmethod
    @asynccontextmanager
    async def from_url(cls, url: str, token: str, **options: Any) -> AsyncIterator[RunstateSaver]:
        """``async with RunstateSaver.from_url(url, token) as saver``: the saver runs
        on this loop (its async methods called from it cost no hop to another
        thread); its sync methods may still be called from other threads."""
        saver = cls(url, token, loop=asyncio.get_running_loop(), **options)
        try:
            await saver._client.__aenter__()
            yield saver
        finally:
            await saver.aclose()

    @classmethod
    @contextmanager
    def from_url_sync(cls, url: str, token: str, **options: Any) -> Iterator[RunstateSaver]:
        """``with RunstateSaver.from_url_sync(url, token) as saver``."""
        saver = cls(url, token, **options)
        try:
            yield saver
        finally:
            saver.close()

    def close(self) -> None:
        """Release the leases, close the connection and stop the saver's own loop
        (if it has one); idempotent. From the loop the saver runs on, ``aclose``."""
        if self._closed or self._loop.is_closed():
            return
        self._wait(self._shut())
        self._closed = True
        if self._runner is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._runner.join()
            self._loop.close()

    async def aclose(self) -> None:
        """``close``, from a coroutine."""
        if self._runner is None:
            if not self._closed:
                await self._run(self._shut())
                self._closed = True
            return
        await asyncio.to_thread(self.close)

    async def runs_ended(self) -> None:
        """Wait until the ends of the watched runs reported so far are sent and the
        leases they let go are released: a run's end is sent in the background once
        ``ainvoke`` returned (or raised), and a session's ledger moves on with it
        (``langgraph_ledger``)."""
        await self._run(self._runs_ended())

    async def _runs_ended(self) -> None:
        await asyncio.sleep(0)  # the watcher's reports queued before this call are taken
        while pending := [t for t in self._forgetting if not t.done()]:
            await asyncio.wait(pending)

    # -- a person's answer to an interrupt, given in the dashboard

    async def interrupt_answer(self, config: RunnableConfig) -> Any:
        """The answer a person gave to the thread's interrupt where it is watched
        (the dashboard's answer, ``answerInterrupt``), waiting for it: resume with
        ``graph.ainvoke(Command(resume=await saver.interrupt_answer(config)), config)``.
        Wrap it in ``asyncio.wait_for`` to give up after a while."""
        return await self._run(self._interrupt_answer(_thread_id(config["configurable"])))

    async def _interrupt_answer(self, thread_id: str) -> Any:
        watch = self._client.watch(thread_id)
        async with contextlib.aclosing(watch.__aiter__()) as events:
            async for _ in events:
                for step in (watch.task.steps or []) if watch.task else []:
                    asked = step.output
                    if step.status == "PENDING" and isinstance(asked, dict) and "answer" in asked:
                        return asked["answer"]
        raise RunstateError(f"the watch of thread {thread_id} ended")

    # -- LangGraph's interface: async

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._run(self._get_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        listing = _Listing(config, filter, before, limit)
        while not listing.done:
            for found in await self._run(self._next_page(listing)):
                yield found

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._run(self._put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._run(self._put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._run(self._delete_thread(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._run(self._delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._run(self._copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._run(self._prune(thread_ids, strategy))

    # -- LangGraph's interface: sync

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._wait(self._get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        listing = _Listing(config, filter, before, limit)
        while not listing.done:
            yield from self._wait(self._next_page(listing))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._wait(self._put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._wait(self._put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._wait(self._delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._wait(self._delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._wait(self._copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._wait(self._prune(thread_ids, strategy))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """As LangGraph's Postgres saver: the next integer, zero-padded so versions
        sort as text, and a random fraction so that two writers never collide."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- the calls, on the saver's loop

    async def _shut(self) -> None:
        for key in builtins.list(self._held):
            await self._flush(key)
        for reports in builtins.list(self._reports.values()):
            await reports.drained()
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        if self.holder is not None:
            for thread_id in sorted(self._renewing):
                with contextlib.suppress(ProblemError):  # lapsed meanwhile: nothing to give up
                    await self._client.release_lock(thread_id, self.holder)
        self._renewing.clear()
        self._resting.clear()
        await self._client.__aexit__(None, None, None)

    @property
    def _ttl(self) -> int:
        return max(1, round(self.lease_ttl))

    async def _token(self, thread_id: str) -> int | None:
        """With a holder, the fencing token of this saver's lease on the thread,
        taken on its first write (LockHeld while another's is live), or again on the
        first write after it rested; None without a holder."""
        if self.holder is None:
            return None
        async with self._leasing:
            self._written_at[thread_id] = asyncio.get_running_loop().time()
            token = self._tokens.get(thread_id)
            if token is None:
                lock = await self._client.acquire_lock(thread_id, self.holder, self._ttl)
                token = self._tokens[thread_id] = lock.fencing_token
                self._renewing.add(thread_id)
                if self._renewer is None:
                    self._renewer = asyncio.create_task(self._renew(), name="runstate-saver-leases")
            elif thread_id in self._resting:
                self._resting.discard(thread_id)
                token = self._tokens[thread_id] = await self._resumed(thread_id, token)
        return token

    async def _resumed(self, thread_id: str, token: int) -> int:
        """The token of a rested thread's lease taken again: the next token (none
        was granted since this saver's), else the old one, lost, which the server
        refuses. A grant past the next token means another worker held the thread
        meanwhile: given back at once."""
        assert self.holder is not None
        try:
            lock = await self._client.acquire_lock(thread_id, self.holder, self._ttl)
        except ProblemError as refused:  # LockHeld: another worker's, live
            log.warning("lost the lease on thread %s while it rested: %s", thread_id, refused)
            return token
        if lock.fencing_token in (token, token + 1):
            self._renewing.add(thread_id)
            return lock.fencing_token
        log.warning("lost the lease on thread %s while it rested: token %d", thread_id, token)
        with contextlib.suppress(ProblemError):
            await self._client.release_lock(thread_id, self.holder)
        return token

    def _running(self, thread_id: str, now: float) -> bool:
        """Whether the saver runs the thread now: a watched run on it is under way,
        or the saver wrote to it within ``lease_ttl``."""
        if self._runs.get(thread_id):
            return True
        return now - self._written_at.get(thread_id, now) < self.lease_ttl

    async def _renew(self) -> None:
        """Renew the leases of the threads running now, every third of their time to
        live, and release those of threads gone quiet (they rest). A lease that
        cannot be renewed (it lapsed and another worker took the thread) is lost for
        good: its token stays, and the server refuses every write that carries it."""
        assert self.holder is not None
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            for thread_id in sorted(self._renewing):
                if not self._running(thread_id, asyncio.get_running_loop().time()):
                    await self._rest(thread_id)
                    continue
                try:
                    await self._client.renew_lock(thread_id, self.holder, self._ttl)
                except ProblemError as refused:
                    log.warning("lost the lease on thread %s: %s", thread_id, refused)
                    self._renewing.discard(thread_id)
                except RunstateError as failed:  # the server is away: try again soon
                    log.warning("could not renew the lease on %s: %s", thread_id, failed)

    async def _rest(self, thread_id: str) -> None:
        """Release a quiet thread's lease, keeping its token (``_resting``)."""
        assert self.holder is not None
        async with self._leasing:
            if thread_id not in self._renewing or self._running(
                thread_id, asyncio.get_running_loop().time()
            ):
                return  # written to (or released) meanwhile
            self._renewing.discard(thread_id)
            self._resting.add(thread_id)
            with contextlib.suppress(RunstateError):  # lapsed or lost: nothing to give up
                await self._client.release_lock(thread_id, self.holder)

    def _begun(self, thread_id: str) -> None:
        """A watched graph run on the thread began (the watcher's, from any thread)."""
        if is_id(thread_id) and not self._closed and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._count_run, thread_id)

    def _count_run(self, thread_id: str) -> None:
        self._runs[thread_id] = self._runs.get(thread_id, 0) + 1

    async def _run_ended(self, thread_id: str) -> None:
        """A watched run's end is sent: with no other run of the thread under way, its
        lease is released and its token forgotten (the next run takes one afresh,
        having loaded the thread as it then stands)."""
        left = self._runs.get(thread_id, 0) - 1
        if left > 0:
            self._runs[thread_id] = left
            return
        self._runs.pop(thread_id, None)
        if self.holder is None:
            return
        async with self._leasing:
            if self._runs.get(thread_id):
                return  # the next run began meanwhile
            if thread_id in self._renewing:
                with contextlib.suppress(RunstateError):
                    await self._client.release_lock(thread_id, self.holder)
            self._renewing.discard(thread_id)
            self._resting.discard(thread_id)
            self._tokens.pop(thread_id, None)
            self._written_at.pop(thread_id, None)

    def _report(self, thread_id: str, node: dict[str, Any] | None, ended: str | None) -> None:
        """Queue a node's start or a run's end (the watcher's, from any thread); the
        thread's reports are sent in order, those queued meanwhile in one call. A
        thread id runstate refuses reports nothing: the saver's own call for it says
        why, once."""
        if not is_id(thread_id):
            return
        if node is not None:  # here, before it is queued: ``_next_nodes`` reads it
            key = (thread_id, node["namespace"])
            self._reached[key] = max(self._reached.get(key, -1), node["superStep"])
        if not self._closed and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._queue, thread_id, node or ended)

    def _queue(self, thread_id: str, report: dict[str, Any] | str | None) -> None:
        expected = False
        if isinstance(report, dict):
            sent = (thread_id, report["namespace"], report["name"], report["superStep"])
            expected = sent in self._expected  # its checkpoint showed it starting
            self._expected.discard(sent)
        else:  # a run's end: the nodes expected and never started will not be
            self._expected = {e for e in self._expected if e[0] != thread_id}
        reports = self._reports.get(thread_id)
        if reports is None:
            reports = self._reports[thread_id] = Reports(thread_id, self._sender(thread_id))
        if isinstance(report, dict) and expected:
            reports.shown(report)  # not sent again; later starts still wait for its end
        elif isinstance(report, dict):
            reports.start(report)
        elif report is not None:
            reports.end_run(report)
            forgetting = asyncio.create_task(self._forget(thread_id, reports))
            self._forgetting.add(forgetting)
            forgetting.add_done_callback(self._forgetting.discard)

    async def _forget(self, thread_id: str, reports: Reports) -> None:
        """Drop a thread's reports once its run's end is sent and nothing followed
        (a start of the next run queued meanwhile keeps them, held if it must be)."""
        await reports.sent()
        if reports.idle and self._reports.get(thread_id) is reports:
            del self._reports[thread_id]
        await self._run_ended(thread_id)

    def _sender(self, thread_id: str) -> Send:
        async def send(nodes: builtins.list[dict[str, Any]], ended: str | None) -> None:
            async def write() -> None:
                await self._client.record_graph_run(
                    fencingToken=await self._token(thread_id),
                    taskId=thread_id,
                    nodes=nodes,
                    ended=ended,
                )

            await self._written(thread_id, write)

        return send

    async def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        try:
            found = await self._client.graph_checkpoint(
                _thread_id(configurable),
                configurable.get("checkpoint_ns", ""),
                get_checkpoint_id(config),
            )
        except NotFound:
            return None
        return self._tuple(found)

    async def _next_page(self, listing: _Listing) -> builtins.list[CheckpointTuple]:
        """The listing's next page (a config naming a checkpoint: that one alone, read
        by its id, if it passes the filter and ``before``)."""
        if listing.direct:
            listing.done = True
            try:
                found = await self._client.graph_checkpoint(
                    str(listing.arguments["threadId"]),
                    listing.arguments["namespace"] or "",
                    listing.wanted,
                )
            except NotFound:
                return []
            return [self._tuple(found)] if listing.admits(found) else []
        try:
            page = await self._client.graph_checkpoints(**listing.arguments, after=listing.after)
        except NotFound:
            listing.done = True
            return []
        listing.after = page["after"]
        items = [
            self._tuple(item)
            for item in page["checkpoints"]
            if listing.wanted is None or item["checkpointId"] == listing.wanted
        ]
        if listing.left is not None:
            items = items[: listing.left]
            listing.left -= len(items)
        listing.done = listing.after is None or listing.left == 0
        return items

    def _tuple(self, found: dict[str, Any]) -> CheckpointTuple:
        thread_id, namespace = found["threadId"], found["namespace"]
        checkpoint: Checkpoint = self.serde.loads_typed(_typed(found))
        values = {
            c["channel"]: self.serde.loads_typed(_typed(c))
            for c in found["channels"]
            if c["type"] != "empty"
        }
        parent = found["parentId"]
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": namespace,
                    "checkpoint_id": found["checkpointId"],
                }
            },
            checkpoint={**checkpoint, "channel_values": values},
            metadata=found["metadata"],
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": namespace,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=[
                (w["taskId"], w["channel"], self.serde.loads_typed(_typed(w)))
                for w in found["pendingWrites"]
            ],
        )

    async def _thread(self, thread_id: str) -> None:
        """Create the thread's task (and the session) unless known to exist; the
        writes that found it missing wait for one creation, then go in the order
        LangGraph sent them (a node's step is placed by its first report)."""
        if thread_id in self._threads:
            return
        creating = self._creating.get(thread_id)
        if creating is None:
            creating = self._creating[thread_id] = asyncio.ensure_future(self._create(thread_id))
            creating.add_done_callback(lambda _: self._creating.pop(thread_id, None))
        await asyncio.shield(creating)

    async def _create(self, thread_id: str) -> None:
        await self._client.start_session(self.session_id, ttl_seconds=self.session_ttl)
        await self._client.create_task(self.session_id, _goal(thread_id), [], id=thread_id)
        self._threads.add(thread_id)

    def _new_thread(self, thread_id: str) -> dict[str, Any] | None:
        """What a checkpoint of a thread not known to exist carries so that the
        server makes its task (and the session) first (``newThread``): a new
        thread's first checkpoint is one request, not a refusal, a ``startSession``
        and a ``createTask`` before it is sent again. None for a known thread, and
        with a holder, whose lease is taken on the task before the first write."""
        if thread_id in self._threads or self.holder is not None:
            return None
        return {
            "sessionId": self.session_id,
            "goal": _goal(thread_id),
            "sessionTtlSeconds": self.session_ttl,
        }

    async def _written(self, thread_id: str, write: Any) -> None:
        """``write()``, after creating the thread's task when it is missing."""
        try:
            await write()
        except NotFound:
            self._threads.discard(thread_id)
            await self._thread(thread_id)
            await write()

    async def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id = _thread_id(configurable)
        namespace = configurable.get("checkpoint_ns", "")
        stored: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = stored.pop("channel_values")
        channels = [
            {
                "channel": channel,
                "version": str(version),
                **_value(
                    self.serde.dumps_typed(values[channel]) if channel in values else ("empty", b"")
                ),
            }
            for channel, version in new_versions.items()
        ]

        parent = configurable.get("checkpoint_id")
        held = self._take(thread_id, namespace, parent)
        self._putting[thread_id] = self._putting.get(thread_id, 0) + 1
        next_nodes = self._next_nodes(thread_id, namespace, metadata, new_versions, values)

        async def write() -> None:
            await self._client.put_graph_checkpoint(
                fencingToken=await self._token(thread_id),
                taskId=thread_id,
                namespace=namespace,
                checkpointId=checkpoint["id"],
                parentId=parent,
                **_value(self.serde.dumps_typed(stored)),
                metadata=get_serializable_checkpoint_metadata(config, metadata),
                channelVersions={k: str(v) for k, v in checkpoint["channel_versions"].items()},
                channels=channels,
                writes=held.groups if held else None,
                nextNodes=next_nodes or None,
                newThread=self._new_thread(thread_id),
            )
            self._threads.add(thread_id)

        try:
            await self._settled(held, self._written(thread_id, write))
        finally:
            self._putting[thread_id] -= 1
            if not self._putting[thread_id]:
                del self._putting[thread_id]
                self._count_down(thread_id)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": namespace,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _next_nodes(
        self,
        thread_id: str,
        namespace: str,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        values: dict[str, Any],
    ) -> builtins.list[str]:
        """In a watched run, the nodes the checkpoint's super-step starts next: those
        whose ``branch:to:`` channel it wrote and holds (a node consumed its own, now
        empty). They go with the checkpoint, shown RUNNING with it, and the watcher's
        reports of their starts are not sent (``_queue``): a super-step costs one
        request, watched or not. None once the watcher reported a start of that
        super-step (a checkpoint written in the background, ``durability="async"``,
        while the next super-step runs): those starts went on their own."""
        step = metadata.get("step")
        if not self._runs.get(thread_id) or not isinstance(step, int):
            return []
        if self._reached.get((thread_id, namespace), -1) > step:
            return []
        names = sorted(
            channel.removeprefix(BRANCH)
            for channel in new_versions
            if channel.startswith(BRANCH) and channel in values
        )
        self._expected.update((thread_id, namespace, name, step + 1) for name in names)
        return names

    async def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        configurable = config["configurable"]
        thread_id = _thread_id(configurable)
        namespace = configurable.get("checkpoint_ns", "")
        stored = [
            {
                "idx": WRITES_IDX_MAP.get(channel, idx),
                "channel": channel,
                **_value(self.serde.dumps_typed(value)),
            }
            for idx, (channel, value) in enumerate(writes)
        ]
        seen = self._seen.get(task_id)
        node = node_report(writes, task_id, task_path, namespace, seen, self.prices, self._counted)
        if node is not None and node["status"] != "INTERRUPTED":
            self._seen.pop(task_id, None)  # ended: a resume starts it again
        reports = self._reports.get(thread_id)
        # Held from the first instant: the checkpoint may follow before the start.
        start = asyncio.ensure_future(_started(reports, task_id))
        group = {"graphTaskId": task_id, "graphTaskPath": task_path, "writes": stored, "node": node}
        key = (thread_id, namespace, str(configurable["checkpoint_id"]))
        try:
            if self.hold_writes > 0 and not any(c in WRITES_IDX_MAP for c, _ in writes):
                await asyncio.shield(self._hold(key, group, start))
            else:  # an error or an interrupt: no checkpoint follows, none waits
                await start
                await self._flush(key)
                await self._send_writes(key, group)
        finally:  # reported, or refused: the starts held behind it may go
            if reports is not None:
                reports.ended(task_id)

    def _hold(
        self, key: tuple[str, str, str], group: dict[str, Any], start: asyncio.Future[None]
    ) -> asyncio.Future[None]:
        """Hold a task's writes for the checkpoint that follows ``key``; the future
        is done once they are stored, with it or alone after ``hold_writes``."""
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = _Held([], [], asyncio.get_running_loop().create_future(), None)
            if key[0] not in self._putting:
                self._count_down_from_now(key, held)
        held.groups.append(group)
        held.starts.append(start)
        return held.stored

    def _take(self, thread_id: str, namespace: str, parent: str | None) -> _Held | None:
        """The writes held against ``parent``, taken to go with its child."""
        held = self._held.pop((thread_id, namespace, str(parent)), None) if parent else None
        if held is not None and held.timer is not None:
            held.timer.cancel()
        return held

    def _count_down(self, thread_id: str) -> None:
        """Start the hold of the thread's writes that waited for a checkpoint on its
        way: the next checkpoint comes after it, or not at all."""
        for key, held in self._held.items():
            if key[0] == thread_id and held.timer is None:
                self._count_down_from_now(key, held)

    def _count_down_from_now(self, key: tuple[str, str, str], held: _Held) -> None:
        """Send ``held`` alone ``hold_writes`` seconds from now, unless taken first."""
        held.timer = asyncio.get_running_loop().call_later(self.hold_writes, self._flush_later, key)

    def _flush_later(self, key: tuple[str, str, str]) -> None:
        flushing = asyncio.create_task(self._flush(key))
        self._flushing.add(flushing)
        flushing.add_done_callback(self._flushing.discard)

    async def _flush(self, key: tuple[str, str, str]) -> None:
        """Send the writes held against ``key`` alone, each task's in its request."""
        held = self._take(*key)
        if held is None:
            return

        async def each() -> None:
            for group in held.groups:
                await self._send_writes(key, group)

        with contextlib.suppress(Exception):  # the callers waiting on it raise it
            await self._settled(held, each())

    async def _settled(self, held: _Held | None, sending: Coroutine[Any, Any, None]) -> None:
        """Await ``sending`` once the held nodes' starts are sent, then end the wait
        of the writes it carried (with its error, if it failed)."""
        try:
            if held is not None:
                await asyncio.gather(*held.starts)
            await sending
        except BaseException as failed:
            if held is not None and not held.stored.done():
                held.stored.set_exception(failed)
            raise
        if held is not None and not held.stored.done():
            held.stored.set_result(None)

    async def _send_writes(self, key: tuple[str, str, str], group: dict[str, Any]) -> None:
        """One task's pending writes alone (``putGraphWrites``)."""
        thread_id, namespace, checkpoint_id = key

        async def write() -> None:
            await self._client.put_graph_writes(
                fencingToken=await self._token(thread_id),
                taskId=thread_id,
                namespace=namespace,
                checkpointId=checkpoint_id,
                **group,
            )

        await self._written(thread_id, write)

    async def _flush_thread(self, thread_id: str) -> None:
        """Send the thread's held writes alone: a change to the whole thread (delete,
        copy, prune) comes after what was written before it."""
        for key in [k for k in self._held if k[0] == thread_id]:
            await self._flush(key)

    async def _delete_thread(self, thread_id: str) -> None:
        thread_id = str(thread_id)
        await self._flush_thread(thread_id)
        with contextlib.suppress(NotFound):  # no such thread: nothing to delete
            token = await self._token(thread_id)
            await self._client.clear_graph(thread_id, fencing_token=token)

    async def _delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if run_ids:
            await self._client.delete_graph_runs([str(r) for r in run_ids])

    async def _copy_thread(self, source: str, target: str) -> None:
        """The server forks the source's task into the target's (or fills the
        target's, when it exists) and copies every row; no source, no copy."""
        await self._flush_thread(str(source))
        with contextlib.suppress(NotFound):
            await self._client.copy_graph(str(source), str(target))
            self._threads.add(str(target))

    async def _prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        """LangGraph's strategies: ``keep_latest`` (DeltaChannel-aware on the
        server: the ancestors a delta channel is rebuilt from stay) and ``delete``."""
        chosen = {"keep_latest": "KEEP_LATEST", "delete": "DELETE"}.get(strategy)
        if chosen is None:
            raise ValueError(f"unknown prune strategy {strategy!r}: keep_latest or delete")
        for thread_id in map(str, thread_ids):
            await self._flush_thread(thread_id)
            with contextlib.suppress(NotFound):
                token = await self._token(thread_id)
                await self._client.prune_graph(thread_id, chosen, fencing_token=token)
