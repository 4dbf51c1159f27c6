"""The 20-node chain bench/peers.py runs on every system: each node adds one to
``count`` and stamps ``ended`` (``time.time()``) at its end; ``n0`` also stamps
``first`` at its start. Self-contained (LangGraph alone): the peers' servers load
this file by path from their own virtual environments."""

from __future__ import annotations

import itertools
import time
from typing import TypedDict

from langgraph.graph import END, START, StateGraph

NODES = 20


class Chain(TypedDict, total=False):
    count: int
    first: float
    ended: float


def step(state: Chain) -> Chain:
    """One link: count one more, and say when it ended."""
    return {"count": state.get("count", 0) + 1, "ended": time.time()}


def start(state: Chain) -> Chain:
    """The first link: also say when the chain began."""
    return {"first": time.time(), **step(state)}


def chain() -> StateGraph[Chain]:
    """``NODES`` nodes in a line, ``n0`` first."""
    builder = StateGraph(Chain)
    names = [f"n{i}" for i in range(NODES)]
    builder.add_node(names[0], start)
    for name in names[1:]:
        builder.add_node(name, step)
    builder.add_edge(START, names[0])
    for first, then in itertools.pairwise(names):
        builder.add_edge(first, then)
    builder.add_edge(names[-1], END)
    return builder


graph = chain().compile()
