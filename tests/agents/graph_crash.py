"""A LangGraph agent process for the SIGKILL test of acknowledged writes.

    python -m tests.agents.graph_crash URL TOKEN THREAD_ID --saver KIND
        --effects FILE [--sqlite FILE] [--stall]

The graph: ``search``, then ``fast`` and ``slow`` in one super-step, then
``join`` (``durability="sync"``, ``ainvoke``). Each node appends its name to
--effects when it runs; with --stall, ``slow`` blocks on stdin, so ``fast``
finishes and its writes are acknowledged while its super-step is unfinished.
Every acknowledged ``aput_writes`` and ``aput`` prints one JSON line
(``{"acked": "writes", "writes": ...}``, ``{"acked": "checkpoint", ...}``),
printed once the saver returned. Without --stall it first prints the writes
pending against the thread's latest checkpoint (``{"pending": [...]}``), then
goes on from that checkpoint and prints ``{"finished": [...]}``.

KIND: ``runstate`` (``RunstateSaver`` at URL with TOKEN), ``sqlite``
(LangGraph's ``AsyncSqliteSaver`` on --sqlite), or ``early``: a saver that
acknowledges a write before storing it (a control: what the test must catch).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph

from runstate.integrations.langgraph import RunstateSaver


class Trip(TypedDict):
    done: Annotated[list[str], operator.add]


def say(**line: Any) -> None:
    print(json.dumps(line, default=str), flush=True)


def acknowledging(saver: type[Any]) -> type[Any]:
    """``saver`` printing each write once it returned."""

    class Acknowledging(saver):  # type: ignore[misc]
        async def aput_writes(
            self,
            config: RunnableConfig,
            writes: Sequence[tuple[str, Any]],
            task_id: str,
            task_path: str = "",
        ) -> None:
            await super().aput_writes(config, writes, task_id, task_path)
            say(acked="writes", writes=[list(w) for w in writes])

        async def aput(self, config: RunnableConfig, *args: Any) -> RunnableConfig:
            stored: RunnableConfig = await super().aput(config, *args)
            say(acked="checkpoint", id=stored["configurable"]["checkpoint_id"])
            return stored

    return Acknowledging


class Early(RunstateSaver):
    """Acknowledges a node's writes at once and stores them in the background."""

    storing: ClassVar[set[asyncio.Future[None]]] = set()

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        storing = asyncio.ensure_future(super().aput_writes(config, writes, task_id, task_path))
        self.storing.add(storing)
        storing.add_done_callback(self.storing.discard)


@asynccontextmanager
async def opened(args: argparse.Namespace) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    if args.saver == "sqlite":
        async with acknowledging(AsyncSqliteSaver).from_conn_string(str(args.sqlite)) as saver:
            yield saver
        return
    kind = Early if args.saver == "early" else RunstateSaver
    async with acknowledging(kind).from_url(args.url, args.token) as saver:
        yield saver


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("thread_id")
    parser.add_argument("--saver", choices=("runstate", "sqlite", "early"), required=True)
    parser.add_argument("--effects", type=Path, required=True)
    parser.add_argument("--sqlite", type=Path)
    parser.add_argument("--stall", action="store_true")
    args = parser.parse_args()

    def node(name: str) -> Any:
        async def run(state: Trip) -> dict[str, Any]:
            with args.effects.open("a") as effects:
                effects.write(name + "\n")
            if args.stall and name == "slow":
                await asyncio.to_thread(sys.stdin.readline)
            return {"done": [name]}

        return run

    builder = StateGraph(Trip)
    for name in ("search", "fast", "slow", "join"):
        builder.add_node(name, node(name))
    builder.add_edge(START, "search")
    builder.add_edge("search", "fast")
    builder.add_edge("search", "slow")
    builder.add_edge(["fast", "slow"], "join")
    builder.add_edge("join", END)
    config: RunnableConfig = {"configurable": {"thread_id": args.thread_id}}
    async with opened(args) as saver:
        graph = builder.compile(checkpointer=saver)
        found = await saver.aget_tuple(config)
        if not args.stall:
            pending = [] if found is None else found.pending_writes or []
            say(pending=[[channel, value] for _, channel, value in pending])
        state = await graph.ainvoke(None if found else {"done": []}, config, durability="sync")
    say(finished=state["done"])


if __name__ == "__main__":
    asyncio.run(main())
