"""A corrupt guard channel resets the guard's turn state; it never bricks the thread.

The corrupt values are what a hand edit of the channel in LangGraph Studio can leave. Studio
edits state at a breakpoint with `update_state`, which goes through the channel's reducer: that
is the first way in. The second, `Overwrite`, bypasses the reducer and stores the raw value, as
a checkpoint written by an older release or a direct database edit holds it: then every read
path (the model node's reminder, the tools node's decision, the router, `guard.inspect`) meets
the corrupt value before any write replaces it.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Overwrite

from langgraph_replay_guard import GUARD_CHANNEL, ReplayGuard, ReplayGuardState
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.graphs import POLICY, SYSTEM, ToolRuns, make_tools

os.environ["LANGSMITH_TRACING"] = "false"

TOOL = "get_details_by_id"
CORRUPTIONS: dict[str, Any] = {
    "reminder": "boo",
    "log": [{}],
    "recent_calls": [["k"]],
    "stop": {"foo": 1},
    "cycle": {"keys": []},
}
FIELDS = list(CORRUPTIONS)
WAYS = ["update_state", "overwrite"]


def custom_graph(guard: ReplayGuard, model: ScriptedChatModel, runs: ToolRuns, **compile: Any):
    """The hand-written agent graph with `guard.wrap(ToolNode)`."""

    def agent(state: ReplayGuardState) -> dict[str, Any]:
        prompt = [guard.system_prompt(state, SYSTEM), *state["messages"]]
        return {"messages": [model.invoke(prompt)]}

    builder = StateGraph(ReplayGuardState)
    builder.add_node("agent", agent)
    builder.add_node("tools", guard.wrap(ToolNode(make_tools(runs), handle_tool_errors=True)))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_conditional_edges("tools", guard.route_after_tools("agent"))
    return builder.compile(checkpointer=InMemorySaver(), **compile)


def agent_graph(guard: ReplayGuard, model: ScriptedChatModel, runs: ToolRuns, **compile: Any):
    """`create_agent` with `ReplayGuardMiddleware`."""
    return create_agent(
        model,
        make_tools(runs),
        system_prompt=SYSTEM,
        middleware=[guard.middleware()],
        checkpointer=InMemorySaver(),
        **compile,
    )


BUILDERS = {"custom": custom_graph, "create_agent": agent_graph}


def corrupt(graph: Any, config: dict[str, Any], field: str, way: str) -> None:
    """Replace one field of the stored channel value with garbage."""
    value = copy.deepcopy(graph.get_state(config).values[GUARD_CHANNEL])
    value[field] = copy.deepcopy(CORRUPTIONS[field])
    write = value if way == "update_state" else Overwrite(value)
    graph.update_state(config, {GUARD_CHANNEL: write})


def resume_to_end(graph: Any, config: dict[str, Any]) -> dict[str, Any]:
    while graph.get_state(config).next:
        graph.invoke(None, config)
    values: dict[str, Any] = graph.get_state(config).values
    return values


def tool_messages(values: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in values["messages"] if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("kind", list(BUILDERS))
def test_corrupt_channel_at_a_breakpoint_resets_and_the_run_completes(kind, field, way, caplog):
    # The model repeats one read three times; the graph stops before each tools step, like
    # a Studio user who edits the guard state at a breakpoint and continues.
    runs = ToolRuns()
    guard = ReplayGuard(POLICY)
    model = ScriptedChatModel.looping(TOOL, {"id": "P1"}, times=3, final="All done.")
    graph = BUILDERS[kind](guard, model, runs, interrupt_before=["tools"])
    config = {"configurable": {"thread_id": f"{kind}-{field}-{way}"}}
    graph.invoke({"messages": [HumanMessage("look up P1")]}, config)
    graph.invoke(None, config)  # the first call runs; paused before the second one
    assert runs[TOOL] == 1

    with caplog.at_level(logging.WARNING, logger="langgraph_replay_guard"):
        corrupt(graph, config, field, way)
        view = guard.inspect(graph.get_state(config))
        values = resume_to_end(graph, config)

    # inspect shows the corrupt snapshot as the state it is reset to, and says why.
    assert view.reset is not None
    assert field in view.reset["reason"]
    assert view.calls == 0, "the turn's counters start again"
    assert view.totals.calls == 1, "the thread totals survive the reset"
    assert any(field in r.getMessage() and "reset" in r.getMessage() for r in caplog.records)

    # The run completed, and the guard works again: the reset forgot the first call, so the
    # second one ran; the third, identical, is answered with the earlier result.
    assert isinstance(values["messages"][-1], AIMessage)
    assert values["messages"][-1].text == "All done."
    assert runs[TOOL] == 2
    answers = tool_messages(values)
    assert [m.status for m in answers] == ["success", "success", "error"]
    assert "already succeeded" in answers[-1].text

    # The stored channel says it was reset, as plain JSON (what Studio shows).
    stored = values[GUARD_CHANNEL]
    assert field in stored["reset"]["reason"]
    assert stored["reset"]["at"]
    assert json.loads(json.dumps(stored)) == stored
    assert guard.inspect(graph.get_state(config)).reset == stored["reset"]


@pytest.mark.parametrize("field", FIELDS)
def test_corrupt_channel_after_a_finished_run_resets_on_the_next_message(field):
    # The other Studio flow: the thread is idle, the user edits the guard state and writes again.
    runs = ToolRuns()
    guard = ReplayGuard(POLICY)
    script = [[(TOOL, {"id": "P1"})], [(TOOL, {"id": "P1"})], "First answer."]
    model = ScriptedChatModel(script=[*script, [(TOOL, {"id": "P1"})], [(TOOL, {"id": "P1"})]])
    graph = custom_graph(guard, model, runs)
    config = {"configurable": {"thread_id": f"idle-{field}"}}
    graph.invoke({"messages": [HumanMessage("look up P1")]}, config)
    assert runs[TOOL] == 1

    corrupt(graph, config, field, "overwrite")
    before = guard.inspect(graph.get_state(config))
    assert before.reset is not None
    assert field in before.reset["reason"]

    values = graph.invoke({"messages": [HumanMessage("again please")]}, config)
    assert values["messages"][-1].text == "Done."
    assert runs[TOOL] == 2, "one run in the new turn; its repeat is a duplicate"
    assert [m.status for m in tool_messages(values)][-2:] == ["success", "error"]
    assert field in values[GUARD_CHANNEL]["reset"]["reason"]


def test_a_valid_channel_is_not_reset():
    runs = ToolRuns()
    guard = ReplayGuard(POLICY)
    model = ScriptedChatModel.looping(TOOL, {"id": "P1"}, times=2, final="ok")
    graph = custom_graph(guard, model, runs)
    config = {"configurable": {"thread_id": "valid"}}
    graph.invoke({"messages": [HumanMessage("look up P1")]}, config)
    value = graph.get_state(config).values[GUARD_CHANNEL]
    # Writing the same value back (what saving an unchanged Studio form does) changes nothing.
    graph.update_state(config, {GUARD_CHANNEL: copy.deepcopy(value)})
    assert graph.get_state(config).values[GUARD_CHANNEL] == value
    assert value["reset"] is None
    assert guard.inspect(graph.get_state(config)).reset is None
