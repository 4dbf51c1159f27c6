"""A LangGraph agent process for the crash test: search -> book -> pay.

    python -m tests.agents.graph_runner URL TOKEN THREAD_ID --effects FILE [--stall]

Each node appends its name to --effects when it runs, and prints one JSON line;
with --stall, ``book`` blocks on stdin once it has started (so a test can kill
the process there). Without input in the thread it starts the trip; with a
checkpoint there it goes on from it (``invoke(None)``). Checkpoints are stored
before the next super-step runs (``durability="sync"``).
"""

from __future__ import annotations

import argparse
import json
import operator
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from runstate.integrations.langgraph import RunstateSaver


class Trip(TypedDict):
    done: Annotated[list[str], operator.add]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("thread_id")
    parser.add_argument("--effects", type=Path, required=True)
    parser.add_argument("--stall", action="store_true")
    args = parser.parse_args()

    def node(name: str) -> Any:
        def run(state: Trip) -> dict[str, Any]:
            with args.effects.open("a") as effects:
                effects.write(name + "\n")
            print(json.dumps({"node": name}), flush=True)
            if args.stall and name == "book":
                sys.stdin.readline()
            return {"done": [name]}

        return run

    builder = StateGraph(Trip)
    for name in ("search", "book", "pay"):
        builder.add_node(name, node(name))
    builder.add_edge(START, "search")
    builder.add_edge("search", "book")
    builder.add_edge("book", "pay")
    builder.add_edge("pay", END)
    config: Any = {"configurable": {"thread_id": args.thread_id}}
    with RunstateSaver.from_url_sync(args.url, args.token, holder="runner", lease_ttl=2) as saver:
        graph = builder.compile(checkpointer=saver)
        started = graph.get_state(config).values
        state = graph.invoke(None if started else {"done": []}, config, durability="sync")
    print(json.dumps({"finished": state["done"]}), flush=True)


if __name__ == "__main__":
    main()
