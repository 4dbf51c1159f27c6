"""What ``RunstateSaver`` reports of a node's run from its pending writes
(``integrations.langgraph_steps``): which writes are a node's end, and how its
writes, errors and interrupts are shown."""

from __future__ import annotations

from langchain_core.messages import AIMessage
from langgraph.types import Interrupt, Send

from runstate.integrations.langgraph_steps import (
    ERROR_CHARS,
    NULL_TASK,
    OUTPUT_CHARS,
    SHOWN_CHARS,
    Node,
    error_text,
    node_report,
    shown,
    summary,
)

PULL = "~__pregel_pull, "


def test_values_are_shown_as_json_or_the_start_of_their_text() -> None:
    """Guards ``shown``: JSON values as they are, objects as their fields (a
    LangChain message) or their text, and a long value cut to ``SHOWN_CHARS``."""
    assert shown({"seats": [1, 2]}) == {"seats": [1, 2]}
    assert shown(AIMessage(content="hi", id="m1"))["content"] == "hi"
    assert shown({1, 2}) == [1, 2]
    assert shown(object()).startswith("<object object at")
    long = shown("x" * 5000)
    assert isinstance(long, str)
    assert len(long) == SHOWN_CHARS
    assert long.endswith("…")


def test_a_nodes_writes_are_summarised_with_where_they_lead() -> None:
    """Guards ``summary``: each channel's value, LangGraph's routing as ``next``
    and ``sends``, its own channels left out, and past ``OUTPUT_CHARS`` the
    channels' names alone."""
    writes = [
        ("plan", "two stops"),
        ("branch:to:book", None),
        ("__pregel_tasks", Send("search", {"city": "Lisbon"})),
        ("__no_writes__", None),
    ]
    assert summary(writes) == {"plan": "two stops", "next": ["book"], "sends": ["search"]}
    big = [(f"c{i}", "y" * 900) for i in range(30)]
    assert len(str(big)) > OUTPUT_CHARS
    assert summary(big) == {"channels": sorted(f"c{i}" for i in range(30))}


def test_a_join_is_shown_as_where_it_leads() -> None:
    """Guards ``summary`` on a node that feeds a join (``add_edge([a, b], c)``):
    LangGraph's channel ``join:a+b:c`` is its routing, shown as ``next`` with the
    nodes ``c`` waits for, never as a channel of the graph's state (also when the
    output is too long and only channels are named)."""
    writes = [("flights", 2), ("join:search_flights+search_hotels:compare", "search_flights")]
    assert summary(writes) == {
        "flights": 2,
        "next": ["compare (once search_flights and search_hotels end)"],
    }
    big = [(f"c{i}", "y" * 900) for i in range(30)] + [("join:a+b:c", "a"), ("branch:to:d", None)]
    assert summary(big) == {"channels": sorted(f"c{i}" for i in range(30))}


def test_which_writes_end_a_node_and_how() -> None:
    """Guards ``node_report``: a node's writes end it (SUCCESS, FAILED with its
    error, INTERRUPTED with the interrupts' values); the input's, a resume's
    answer and a Send's without the watcher's name are no node's end."""
    done = node_report([("plan", 1)], "t1", PULL + "plan", "", None)
    assert done == {
        "graphTaskId": "t1",
        "name": "plan",
        "namespace": "",
        "status": "SUCCESS",
        "output": {"plan": 1},
    }
    quiet = node_report([("__no_writes__", None)], "t1", PULL + "quiet", "ns:1", None)
    assert quiet is not None
    assert (quiet["status"], quiet["output"]) == ("SUCCESS", {})
    failed = node_report([("__error__", ValueError("no seats"))], "t1", PULL + "book", "", None)
    assert failed is not None
    assert failed["error"] == "ValueError: no seats"
    asked = [("__interrupt__", (Interrupt(value={"pay": 120}, id="i1"),))]
    waiting = node_report(asked, "t1", PULL + "approve", "", Node("approve", 3))
    assert waiting is not None
    assert (waiting["status"], waiting["output"], waiting["superStep"]) == (
        "INTERRUPTED",
        [{"pay": 120}],
        3,
    )
    assert node_report([("__resume__", "yes")], "t1", PULL + "approve", "", None) is None
    assert node_report([("a", 1)], NULL_TASK, "", "", None) is None
    assert node_report([("a", 1)], "t1", PULL + "__start__", "", None) is None
    push = "~__pregel_push, 0000000001, 0000000000"
    assert node_report([("a", 1)], "t1", push, "", None) is None
    sent = node_report([("a", 1)], "t1", push, "", Node("search", 2))
    assert sent is not None
    assert (sent["name"], sent["superStep"]) == ("search", 2)


def test_an_error_is_its_type_and_message_cut_to_size() -> None:
    assert error_text(KeyError("seat")) == "KeyError: 'seat'"
    assert len(error_text(RuntimeError("z" * 10_000))) == ERROR_CHARS
