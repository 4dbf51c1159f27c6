"""What a LangGraph node's model calls spent, recorded by ``RunstateSaver`` with no
code in the graph: the ``usage_metadata`` of the AI messages a node returns, as
that node's step spend, priced by the saver's ``prices``; on SQLite and
PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph

from runstate.integrations.langgraph import RunstateSaver
from tests.support import Api, Server

SPENT = """query($id: ID!) { task(id: $id) { ... on Task {
  status spend { inputTokens outputTokens costMicros calls }
  steps { action models spend { inputTokens outputTokens costMicros calls } } } } }"""
PRICES = {"gpt-4o-mini": (0.15, 0.60), "claude-haiku": (1.0, 5.0)}
"""Currency per million input and output tokens: micro-currency per token."""


def answer(tokens_in: int, tokens_out: int, model: str, key: str) -> AIMessage:
    return AIMessage(
        content="ok",
        usage_metadata={
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "total_tokens": tokens_in + tokens_out,
        },
        response_metadata={key: model},
    )


def plan(state: MessagesState) -> dict[str, Any]:
    return {"messages": [answer(1000, 200, "gpt-4o-mini", "model_name")]}


def write(state: MessagesState) -> dict[str, Any]:
    return {
        "messages": [
            answer(3000, 400, "claude-haiku", "model"),
            answer(500, 100, "claude-haiku", "model"),
        ]
    }


def tidy(state: MessagesState) -> dict[str, Any]:
    return {"messages": [HumanMessage(content="no model here")]}


def spent_task(server: Server, token: str, config: RunnableConfig) -> dict[str, Any]:
    with Api(server.url, token) as api:
        found: dict[str, Any] = api(SPENT, id=config["configurable"]["thread_id"])["task"]
    return found


def test_a_nodes_model_usage_is_its_step_spend(served: tuple[Server, str]) -> None:
    """Guards ``langgraph_steps.usage`` and the node reports' spend: each node's
    AI messages' tokens are its step's (several in one node summed, counted as
    one report per node run), priced per model, the model named; a node without
    usage spends nothing; the thread's task adds them up."""
    server, token = served
    builder = StateGraph(MessagesState)
    builder.add_node("plan", plan)
    builder.add_node("write", write)
    builder.add_node("tidy", tidy)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "write")
    builder.add_edge("write", "tidy")
    builder.add_edge("tidy", END)
    config: RunnableConfig = {"configurable": {"thread_id": str(uuid.uuid4())}}
    with RunstateSaver.from_url_sync(server.url, token, prices=PRICES) as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage(content="plan a trip")]}, config)
    task = spent_task(server, token, config)
    by_node = {s["action"]: (s["spend"], s["models"]) for s in task["steps"]}
    assert by_node["plan"] == (
        {"inputTokens": 1000, "outputTokens": 200, "costMicros": 270, "calls": 1},
        ["gpt-4o-mini"],
    )
    assert by_node["write"] == (
        {"inputTokens": 3500, "outputTokens": 500, "costMicros": 6000, "calls": 1},
        ["claude-haiku"],
    )
    assert by_node["tidy"] == (
        {"inputTokens": 0, "outputTokens": 0, "costMicros": 0, "calls": 0},
        [],
    )
    assert task["spend"] == {
        "inputTokens": 4500,
        "outputTokens": 700,
        "costMicros": 6270,
        "calls": 2,
    }


def test_without_prices_tokens_are_recorded_at_no_cost(served: tuple[Server, str]) -> None:
    """Guards the default: with no ``prices`` the tokens are recorded, the cost 0
    (runstate does not guess a model's price)."""
    server, token = served
    builder = StateGraph(MessagesState)
    builder.add_node("plan", plan)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", END)
    config: RunnableConfig = {"configurable": {"thread_id": str(uuid.uuid4())}}
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        builder.compile(checkpointer=saver).invoke({"messages": []}, config)
    task = spent_task(server, token, config)
    assert task["spend"] == {"inputTokens": 1000, "outputTokens": 200, "costMicros": 0, "calls": 1}


def echo(state: MessagesState) -> dict[str, Any]:
    """Returns the last message again, as a subgraph used as a node returns its
    inner nodes' messages."""
    return {"messages": [state["messages"][-1]]}


def test_a_message_returned_again_is_counted_once(served: tuple[Server, str]) -> None:
    """Guards the saver's counted ids (``langgraph_steps.Counted``): an AI message
    that a later node returns again (with its id) adds nothing to that node's step."""
    server, token = served
    builder = StateGraph(MessagesState)
    builder.add_node("plan", lambda state: {"messages": [identified()]})
    builder.add_node("echo", echo)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "echo")
    builder.add_edge("echo", END)
    config: RunnableConfig = {"configurable": {"thread_id": str(uuid.uuid4())}}
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        builder.compile(checkpointer=saver).invoke({"messages": []}, config)
    task = spent_task(server, token, config)
    calls = {s["action"]: s["spend"]["inputTokens"] for s in task["steps"]}
    assert calls == {"plan": 1000, "echo": 0}
    assert task["spend"]["inputTokens"] == 1000


def identified() -> AIMessage:
    message = answer(1000, 200, "gpt-4o-mini", "model_name")
    message.id = "run-1"
    return message
