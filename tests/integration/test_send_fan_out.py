"""A hand-written graph that sends each tool call to the guarded tools node on its own (`Send`).

LangGraph's map-reduce pattern for tools: a conditional edge after the model returns one
`Send("tools", ...)` per tool call, so each call runs as a task of its own. The guard must stop
such a graph exactly as it stops the plain one (one tools task per AIMessage): every call
answered, the final AIMessage last, the stop in the guard state, and no extra model call.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Send

from langgraph_replay_guard import ReplayGuard, ReplayGuardState
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.graphs import (
    POLICY,
    ToolRuns,
    build_custom_graph,
    make_tools,
    model_node,
)
from tests.integration.stacks import stop_of

os.environ["LANGSMITH_TRACING"] = "false"

LOOKUP = ("get_details_by_id", {"id": "P1002"})
THINK = ("think", {"thought": "look it up again"})
TRANSFER = ("transfer_to_human_agents", {"summary": "s"})

# How a conditional edge can hand one tool call to the tools node (all parsed by ToolNode):
PAYLOADS = [
    "state_with_one_call",  # the state, its last AIMessage narrowed to this one call
    "tool_call_with_context",  # create_react_agent's ToolCallWithContext
    "tool_calls",  # create_agent's bare list of tool calls (the node reads the state itself)
]


def send_each_call(payload: str):
    """The conditional edge after the model: one `Send` per tool call, or the end."""

    def fan_out(state: dict[str, Any]) -> Any:
        last = state["messages"][-1]
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return END
        sends = []
        for call in last.tool_calls:
            if payload == "state_with_one_call":
                only = last.model_copy(update={"tool_calls": [call]})
                sends.append(Send("tools", {**state, "messages": [*state["messages"][:-1], only]}))
            elif payload == "tool_call_with_context":
                context = {"__type": "tool_call_with_context", "tool_call": call, "state": state}
                sends.append(Send("tools", context))
            else:
                sends.append(Send("tools", [call]))
        return sends

    return fan_out


def fan_out_graph(guard: ReplayGuard, model: ScriptedChatModel, runs: ToolRuns, payload: str):
    """The usual agent graph, its tools reached through `Send`, guarded as the docs say."""

    builder = StateGraph(ReplayGuardState)
    builder.add_node("agent", model_node(guard, model))
    builder.add_node("tools", guard.wrap(ToolNode(make_tools(runs), handle_tool_errors=True)))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", send_each_call(payload), ["tools", END])
    builder.add_conditional_edges("tools", guard.route_after_tools("agent"))
    return builder.compile(checkpointer=InMemorySaver())


def run(graph: Any, use_async: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    config = {"configurable": {"thread_id": "fan-out"}, "recursion_limit": 100}
    inputs = {"messages": [HumanMessage("help me")]}
    if use_async:
        return asyncio.run(graph.ainvoke(inputs, config)), config
    return graph.invoke(inputs, config), config


def unanswered(messages: list[Any]) -> list[str]:
    """Tool call ids of the history that no ToolMessage answers."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    asked = [c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    return [call_id for call_id in asked if call_id not in answered]


def shape(messages: list[Any]) -> list[tuple[str, str, str | None]]:
    """Message types, texts and stop marks: what must match between the two graphs."""
    return [(type(m).__name__, m.text, stop_of(m)) for m in messages]


# The unsafe transfer warns that this test runs it without a durable ledger: not its subject.
@pytest.mark.filterwarnings("ignore::langgraph_replay_guard.ReplayGuardWarning")
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize(
    "step", [[LOOKUP, THINK], [LOOKUP], [TRANSFER, LOOKUP]], ids=["two_reads", "one", "write"]
)
def test_a_send_fan_out_stops_like_the_plain_graph(step, payload, use_async):
    # Without the guard, the fan-out runs the whole script: every call of the 30 batches.
    free_model = ScriptedChatModel(script=[step] * 30)
    free_runs = ToolRuns()
    free_out, _ = run(unguarded_fan_out_graph(free_model, free_runs, payload), use_async)
    assert free_model.calls == 31
    assert free_runs.counts == Counter(name for name, _ in step * 30)

    plain_model = ScriptedChatModel(script=[step] * 30)
    plain_runs = ToolRuns()
    plain_guard = ReplayGuard(POLICY)
    plain = build_custom_graph(plain_guard, plain_model, make_tools(plain_runs))
    plain_out, _ = run(plain, use_async)

    model = ScriptedChatModel(script=[step] * 30)
    runs = ToolRuns()
    guard = ReplayGuard(POLICY)
    graph = fan_out_graph(guard, model, runs, payload)
    out, config = run(graph, use_async)  # ends, does not raise

    assert model.calls == plain_model.calls, "the same bounded number of model calls"
    assert runs.counts == plain_runs.counts, "the same tools ran, as often"
    messages = graph.get_state(config).values["messages"]
    assert messages == out["messages"]
    assert unanswered(messages) == [], "every pending call is answered"
    final = messages[-1]
    assert isinstance(final, AIMessage)
    assert not final.tool_calls
    assert stop_of(final) == "repeat_limit"
    assert [stop_of(m) for m in messages].count("repeat_limit") == 1, "one final message"
    assert shape(messages) == shape(plain_out["messages"])
    view = guard.inspect(graph.get_state(config))
    assert view.stop_reason == "repeat_limit"
    assert view.totals == plain_guard.inspect(plain_out).totals

    # The documented stop, whatever the plain graph does: the 4th batch stops the run on
    # the 4th attempt of its repeated call, and the model is not called again.
    runs_expected, stopped_on = DOCUMENTED_STOP[tuple(name for name, _ in step)]
    assert model.calls == 4
    assert runs.counts == runs_expected
    assert (stopped_on, "repeat_limit", 4) in view.blocked
    assert view.totals.aborts == 1
    # The guarded run starts as the unguarded one: the first batch's answers are the same.
    first = len(step) + 2  # the user's message, the first AIMessage, its answers
    assert shape(messages[:first]) == shape(free_out["messages"][:first])


# Per step: the tool runs of the guarded fan-out, and the tool whose 4th attempt stops it.
# A read runs once (its repeats are duplicates); the `unsafe` transfer runs up to the repeat
# limit, and changes the world each time, so the read after it runs again once.
DOCUMENTED_STOP = {
    ("get_details_by_id", "think"): (
        Counter({"get_details_by_id": 1, "think": 1}),
        "get_details_by_id",
    ),
    ("get_details_by_id",): (Counter({"get_details_by_id": 1}), "get_details_by_id"),
    ("transfer_to_human_agents", "get_details_by_id"): (
        Counter({"transfer_to_human_agents": 3, "get_details_by_id": 2}),
        "transfer_to_human_agents",
    ),
}


def unguarded_fan_out_graph(model: ScriptedChatModel, runs: ToolRuns, payload: str) -> Any:
    """`fan_out_graph` without the guard: a plain model node, ToolNode and edge back."""
    builder = StateGraph(MessagesState)

    def agent(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    async def aagent(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder.add_node("agent", RunnableLambda(agent, afunc=aagent))
    builder.add_node("tools", ToolNode(make_tools(runs), handle_tool_errors=True))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", send_each_call(payload), ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_send_fan_out_counts_every_call_of_a_batch(payload):
    # Two identical reads in one AIMessage, each sent on its own: the first runs, the second
    # is a duplicate of the same batch, as in the plain graph; nothing stops.
    model = ScriptedChatModel(script=[[LOOKUP, LOOKUP], [THINK]], final="Here it is.")
    runs = ToolRuns()
    guard = ReplayGuard(POLICY)
    graph = fan_out_graph(guard, model, runs, payload)
    out, config = run(graph, use_async=False)
    assert out["messages"][-1].text == "Here it is."
    assert runs["get_details_by_id"] == 1
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in answers] == ["success", "error", "success"]
    assert "same batch" in answers[1].text
    view = guard.inspect(graph.get_state(config))
    assert view.totals.calls == 3
    assert view.stop_reason is None
