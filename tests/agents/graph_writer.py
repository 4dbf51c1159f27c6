"""A LangGraph worker for the ownership test: load a checkpoint, write, then commit
a child of it when told.

    python -m tests.agents.graph_writer URL TOKEN THREAD_ID [--holder NAME] [--ttl S]

It loads the thread's latest checkpoint, stores a pending write against it (with
a holder, that write leases the thread), prints ``{"ready": true}`` and waits for
a line on stdin; then it stores a child checkpoint of the one it loaded and
prints ``{"committed": CHECKPOINT_ID}``, or ``{"refused": PROBLEM}`` when the
server refused it (one JSON line each, as ``tests.support.AgentProcess`` reads).
"""

from __future__ import annotations

import argparse
import json
import sys

from langgraph.checkpoint.base import create_checkpoint

from runstate.client.exceptions import ProblemError
from runstate.integrations.langgraph import RunstateSaver


def say(**line: object) -> None:
    print(json.dumps(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("thread_id")
    parser.add_argument("--holder")
    parser.add_argument("--ttl", type=float, default=30.0)
    args = parser.parse_args()
    with RunstateSaver.from_url_sync(
        args.url, args.token, holder=args.holder, lease_ttl=args.ttl
    ) as saver:
        loaded = saver.get_tuple({"configurable": {"thread_id": args.thread_id}})
        assert loaded is not None, "the thread has no checkpoint to go on from"
        step = loaded.metadata.get("step", 0) + 1
        try:
            saver.put_writes(loaded.config, [("log", args.holder or "anyone")], f"node-{step}")
            say(ready=True)
            sys.stdin.readline()
            child = create_checkpoint(loaded.checkpoint, None, step)
            stored = saver.put(loaded.config, child, {"source": "loop", "step": step}, {})
        except ProblemError as refused:
            say(refused=type(refused).__name__)
            return
        say(committed=stored["configurable"]["checkpoint_id"])


if __name__ == "__main__":
    main()
