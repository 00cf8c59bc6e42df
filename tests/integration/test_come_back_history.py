"""Graphs that go back to the model after the stop leave a valid history when the guard ends them.

A static `tools -> agent` edge (or `create_react_agent`, whose edges are fixed) calls the model
again after the guard stopped the run. When the model asks for tools once more (a come-back),
the run must end, and the thread must still be usable: OpenAI and Anthropic reject a history
with an AIMessage whose tool calls have no ToolMessage, and so does `create_react_agent`
itself on the next user turn. A node that raises loses its writes, so the guarded tools node
answers the come-back and the model node ends the run, through `guard.system_prompt`.
"""

from __future__ import annotations

import asyncio
import os
import warnings
from collections import Counter
from typing import Annotated, Any, NotRequired

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.prebuilt.chat_agent_executor import AgentState, create_react_agent

from langgraph_replay_guard import LoopAbortedError, ReplayGuard, ReplayGuardState
from langgraph_replay_guard.decisions.state import merge_guard_state
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.graphs import POLICY, SYSTEM, ToolRuns, make_tools, model_node
from tests.integration.stacks import counted_tools, stop_of

os.environ["LANGSMITH_TRACING"] = "false"

LOOKUP = ("get_details_by_id", {"id": "P1002"})
OTHER = ("get_details_by_id", {"id": "P2001"})
# The four attempts of the loop (the 4th stops the run) and the model call that comes back.
CALLS_TO_THE_COME_BACK = POLICY.max_repeats + 2


def check_history(messages: list[BaseMessage]) -> None:
    """What OpenAI and Anthropic require of a history: each AIMessage's tool calls are
    answered by ToolMessages right after it, before any other message."""
    pending: set[str] = set()
    for message in messages:
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in pending, f"an answer to no pending call: {message}"
            pending.discard(message.tool_call_id)
            continue
        assert not pending, f"tool calls {sorted(pending)} unanswered before {message!r}"
        if isinstance(message, AIMessage):
            pending = {call["id"] for call in message.tool_calls}
    assert not pending, f"tool calls {sorted(pending)} unanswered at the end"


def invoke(graph: Any, config: dict[str, Any], text: str, use_async: bool) -> Any:
    inputs = {"messages": [HumanMessage(text)]}
    if use_async:
        return asyncio.run(graph.ainvoke(inputs, config))
    return graph.invoke(inputs, config)


def static_edge_graph(guard: ReplayGuard, model: ScriptedChatModel, runs: ToolRuns):
    """The usual hand-written agent graph with the static edge `tools -> agent`; its model
    node builds the prompt with `guard.system_prompt`, as the docs show."""

    builder = StateGraph(ReplayGuardState)
    builder.add_node("agent", model_node(guard, model))
    builder.add_node("tools", guard.wrap(ToolNode(make_tools(runs))))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_static_edge_come_back_leaves_every_call_answered(use_async):
    # A model that loops, then (in the next user turn) asks for something else.
    script = [[LOOKUP]] * CALLS_TO_THE_COME_BACK + [[OTHER], "Here it is."]
    model = ScriptedChatModel(script=script)
    guard = ReplayGuard(POLICY)
    runs = ToolRuns()
    graph = static_edge_graph(guard, model, runs)
    config = {"configurable": {"thread_id": "static"}, "recursion_limit": 100}

    with pytest.raises(LoopAbortedError) as raised:
        invoke(graph, config, "help me", use_async)
    assert raised.value.reason == "stop_ignored"
    assert 'guard.route_after_tools("agent")' in str(raised.value), "it names the fix"
    assert model.calls == CALLS_TO_THE_COME_BACK, "the model is not called after the come-back"
    assert runs["get_details_by_id"] == 1

    state = graph.get_state(config)
    messages = state.values["messages"]
    check_history(messages)
    come_back = messages[-3]
    assert isinstance(come_back, AIMessage)
    assert come_back.tool_calls, "the model's come-back is kept, and answered"
    assert "had stopped this run" in messages[-2].text
    assert stop_of(messages[-1]) == "stop_ignored"
    assert not messages[-1].tool_calls
    assert guard.inspect(state).stop_reason == "repeat_limit", "why the run was stopped"

    # The next user turn on the thread runs normally: the stop ended with the turn.
    out = invoke(graph, config, "now the other one", use_async)
    assert out["messages"][-1].text == "Here it is."
    assert isinstance(out["messages"][-2], ToolMessage)
    assert out["messages"][-2].status == "success"
    assert runs["get_details_by_id"] == 2
    check_history(out["messages"])
    assert guard.inspect(graph.get_state(config)).stop_reason is None


def test_a_model_that_answers_after_the_come_back_ends_the_run_gracefully():
    # A model node without guard.system_prompt cannot be stopped before the model call; the
    # answered come-back tells the model the run was stopped, and a model that listens ends
    # the run itself, with a valid history.
    model = ScriptedChatModel(
        script=[[LOOKUP]] * CALLS_TO_THE_COME_BACK, final="Sorry, I could not finish."
    )
    guard = ReplayGuard(POLICY)
    runs = ToolRuns()
    builder = StateGraph(ReplayGuardState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", guard.wrap(ToolNode(make_tools(runs))))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "listens"}}

    out = graph.invoke({"messages": [HumanMessage("help me")]}, config)
    assert out["messages"][-1].text == "Sorry, I could not finish."
    assert model.calls == CALLS_TO_THE_COME_BACK + 1
    check_history(out["messages"])
    assert runs["get_details_by_id"] == 1


def test_a_model_that_comes_back_twice_is_stopped_at_the_second_come_back():
    # Without guard.system_prompt, the second come-back raises: model calls stay bounded.
    model = ScriptedChatModel.looping(*LOOKUP, times=50)
    guard = ReplayGuard(POLICY)
    builder = StateGraph(ReplayGuardState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", guard.wrap(ToolNode(make_tools(ToolRuns()))))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    with pytest.raises(LoopAbortedError) as raised:
        builder.compile().invoke({"messages": [HumanMessage("help me")]})
    assert raised.value.reason == "stop_ignored"
    assert "guard.system_prompt(state)" in str(raised.value), "it names the fix"
    assert model.calls == CALLS_TO_THE_COME_BACK + 1


# -- create_react_agent: its tools node always goes back to the model ---------------------------


class GuardedState(AgentState):
    replay_guard: NotRequired[Annotated[dict[str, Any], merge_guard_state]]


def react_agent(guard: ReplayGuard, model: ScriptedChatModel, runs: Counter[str]) -> Any:
    tools = counted_tools(runs)
    node = guard.wrap(ToolNode([tools["lookup"], tools["quote"]]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return create_react_agent(
            model,
            node,
            state_schema=GuardedState,
            # The prompt is where the guard ends the run after the come-back.
            prompt=lambda state: [guard.system_prompt(state, SYSTEM), *state["messages"]],
            checkpointer=InMemorySaver(),
            name="researcher",
        )


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(
    "step",
    [[("lookup", {"id": "P1"})], [("lookup", {"id": "P1"}), ("quote", {"item": "plan"})]],
    ids=["one_call", "two_calls_sent_apart"],  # create_react_agent sends each call on its own
)
def test_create_react_agent_with_the_guards_prompt_ends_with_a_valid_history(step, use_async):
    model = ScriptedChatModel(script=[step] * CALLS_TO_THE_COME_BACK + [[("quote", {"item": "x"})]])
    guard = ReplayGuard()
    runs: Counter[str] = Counter()
    agent = react_agent(guard, model, runs)
    config = {"configurable": {"thread_id": "react"}}

    with pytest.raises(LoopAbortedError) as raised:
        invoke(agent, config, "who is P1?", use_async)
    assert raised.value.reason == "stop_ignored"
    assert model.calls == CALLS_TO_THE_COME_BACK
    assert runs["lookup"] == 1
    state = agent.get_state(config)
    check_history(state.values["messages"])
    stops = [m for m in state.values["messages"] if isinstance(m, AIMessage) and stop_of(m)]
    assert [(stop_of(m), m.name) for m in stops] == [
        ("repeat_limit", "researcher"),
        ("stop_ignored", "researcher"),
    ]

    # create_react_agent checks the history itself before each model call: the next user
    # turn would fail with INVALID_CHAT_HISTORY if a tool call were left unanswered.
    out = invoke(agent, config, "and the price?", use_async)
    assert out["messages"][-1].text == "Done."
    assert out["messages"][-2].text == "x costs 3 EUR"
    check_history(out["messages"])
