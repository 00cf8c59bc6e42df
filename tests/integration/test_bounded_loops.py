"""Model calls after an abort are bounded on every integration, whatever the graph's edges."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from langgraph_replay_guard import LoopAbortedError, ReplayGuard, ReplayGuardState
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.graphs import POLICY, ToolRuns, make_tools

os.environ["LANGSMITH_TRACING"] = "false"

LOOKUP = ("get_details_by_id", {"id": "P1002"})
TRANSFER = ("transfer_to_human_agents", {"summary": "s"})
MAX_REPEATS = POLICY.max_repeats
# "end"/"error": the aborting attempt, one model call that ignores the stop, and the answer.
BOUND = MAX_REPEATS + 2
# "continue": max_repeats blocked attempts more before the stop escalates.
CONTINUE_BOUND = 2 * MAX_REPEATS + 2
# A static edge back to a model node that does not build its prompt with
# guard.system_prompt: the guard answers the first come-back (a node that raises loses its
# writes, which would leave that AIMessage unanswered in the saved history) and raises at
# the second, one model call later. test_come_back_history.py has the model node that ends
# the run before that call.
COME_BACK_ANSWERED = 1
FIX = 'add_conditional_edges("tools", guard.route_after_tools("agent"))'
INTEGRATIONS = ["static_edge", "route_after_tools", "middleware", "callback_handler"]
# Within the bounds, each integration's exact count (a bound alone lets a later stop pass):
# the call that stops the run, then what each one does after it. A static edge answers the
# first come-back and raises at the second; the callback handler tells the model to answer
# and raises at its come-back; the others end the run at the stop ("error": it raises there).
AFTER_THE_STOP = {
    ("static_edge", "end"): 2,
    ("static_edge", "error"): 0,
    ("callback_handler", "end"): 1,
    ("callback_handler", "continue"): 1,
    ("static_edge", "continue"): 2,
}


def custom_graph(guard, model, tools, *, route, handle_tool_errors=None):
    """The usual hand-written agent graph, its ToolNode replaced by `guard.wrap(tool_node)`."""
    builder = StateGraph(ReplayGuardState)

    def agent(state):
        return {"messages": [model.invoke(state["messages"])]}

    async def aagent(state):
        return {"messages": [await model.ainvoke(state["messages"])]}

    from langchain_core.runnables import RunnableLambda

    builder.add_node("agent", RunnableLambda(agent, afunc=aagent))
    kwargs = {} if handle_tool_errors is None else {"handle_tool_errors": handle_tool_errors}
    builder.add_node("tools", guard.wrap(ToolNode(tools, **kwargs)))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    if route:
        builder.add_conditional_edges("tools", guard.route_after_tools("agent"))
    else:
        builder.add_edge("tools", "agent")  # the usual static edge back to the model
    return builder.compile(checkpointer=InMemorySaver())


def build(integration, guard, model, runs, **kwargs):
    """The graph and the run config of one integration."""
    tools = make_tools(runs)
    config: dict[str, Any] = {"configurable": {"thread_id": "t"}, "recursion_limit": 200}
    if integration == "static_edge":
        return custom_graph(guard, model, tools, route=False, **kwargs), config
    if integration == "route_after_tools":
        return custom_graph(guard, model, tools, route=True, **kwargs), config
    if integration == "middleware":
        agent = create_agent(
            model, tools, middleware=[guard.middleware()], checkpointer=InMemorySaver()
        )
        return agent, config
    agent = create_agent(model, tools, checkpointer=InMemorySaver())
    config["callbacks"] = [guard.callback_handler()]
    return agent, config


def loop(integration, exit_behavior, call=LOOKUP, *, use_async=False, **kwargs):
    """Run a model that makes the same call 30 times; return the model, the runs and any error."""
    model = ScriptedChatModel.looping(*call, times=30)
    guard = ReplayGuard(POLICY.model_copy(update={"exit_behavior": exit_behavior}))
    runs = ToolRuns()
    graph, config = build(integration, guard, model, runs, **kwargs)
    inputs = {"messages": [HumanMessage("help me")]}
    try:
        if use_async:
            asyncio.run(graph.ainvoke(inputs, config))
        else:
            graph.invoke(inputs, config)
    except LoopAbortedError as exc:
        return model, runs, exc
    return model, runs, None


# -- the static edge: the tools node cannot end the run, so a come-back raises ---------------


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("call", [LOOKUP, TRANSFER], ids=["read", "side_effect"])
def test_static_edge_raises_when_the_model_comes_back_after_the_stop(call, use_async):
    model, runs, error = loop("static_edge", "end", call, use_async=use_async)
    assert model.calls == BOUND + COME_BACK_ANSWERED, f"{model.calls} model calls after the stop"
    assert error is not None, "a graph that ignores the stop must not end quietly"
    assert FIX in str(error), "the error names the one-line fix"
    assert error.tool == call[0]
    assert runs[call[0]] == (1 if call is LOOKUP else MAX_REPEATS)
    last_seen = model.seen[-1][-1]
    assert isinstance(last_seen, AIMessage), "the model saw the guard's final message"
    assert "stopped" in last_seen.text


@pytest.mark.parametrize("handle_tool_errors", [True, "Tool failed.", lambda e: "failed"])
@pytest.mark.parametrize("exit_behavior", ["end", "error"])
def test_static_edge_come_back_gets_through_catch_all_tool_error_handling(
    exit_behavior, handle_tool_errors
):
    model, runs, error = loop("static_edge", exit_behavior, handle_tool_errors=handle_tool_errors)
    # "error" does not answer a come-back: it raises at the first one.
    assert model.calls == BOUND + (COME_BACK_ANSWERED if exit_behavior == "end" else 0)
    assert error is not None
    assert FIX in str(error)
    assert runs["get_details_by_id"] == 1


def test_a_new_user_turn_after_the_static_edge_stop_works_normally():
    other = ("get_details_by_id", {"id": "P2001"})
    model = ScriptedChatModel(
        script=[[LOOKUP]] * (BOUND + COME_BACK_ANSWERED) + [[other], "Here it is."]
    )
    guard = ReplayGuard(POLICY)
    runs = ToolRuns()
    graph, config = build("static_edge", guard, model, runs)
    with pytest.raises(LoopAbortedError):
        graph.invoke({"messages": [HumanMessage("help me")]}, config)
    out = graph.invoke({"messages": [HumanMessage("now the other one")]}, config)
    assert out["messages"][-1].text == "Here it is."
    answer = out["messages"][-2]
    assert isinstance(answer, ToolMessage)
    assert answer.status == "success"
    assert runs["get_details_by_id"] == 2
    assert guard.inspect(graph.get_state(config)).stop_reason is None


# -- every integration, every exit_behavior: bounded ------------------------------------------


@pytest.mark.parametrize("call", [LOOKUP, TRANSFER], ids=["read", "side_effect"])
@pytest.mark.parametrize("exit_behavior", ["end", "error"])
@pytest.mark.parametrize("integration", INTEGRATIONS)
def test_model_calls_after_an_abort_are_bounded(integration, exit_behavior, call):
    model, runs, error = loop(integration, exit_behavior, call)
    bound = BOUND + (COME_BACK_ANSWERED if integration == "static_edge" else 0)
    assert model.calls <= bound, f"{model.calls} model calls"
    # The 4th identical call stops the run.
    after = AFTER_THE_STOP.get((integration, exit_behavior), 0)
    assert model.calls == MAX_REPEATS + 1 + after, f"{model.calls} model calls"
    assert runs[call[0]] == (1 if call is LOOKUP else MAX_REPEATS)
    if exit_behavior == "error":
        assert error is not None
        assert error.reason == "repeat_limit"


@pytest.mark.parametrize("call", [LOOKUP, TRANSFER], ids=["read", "side_effect"])
@pytest.mark.parametrize("integration", INTEGRATIONS)
def test_continue_escalates_to_a_stop_after_max_repeats_more_blocked_attempts(integration, call):
    model, runs, error = loop(integration, "continue", call)
    bound = CONTINUE_BOUND + (COME_BACK_ANSWERED if integration == "static_edge" else 0)
    assert model.calls <= bound, f"{model.calls} model calls"
    # Blocked past the limit, the call insisted on past twice the limit stops the run.
    after = AFTER_THE_STOP.get((integration, "continue"), 0)
    assert model.calls == 2 * MAX_REPEATS + 1 + after, f"{model.calls} model calls"
    assert runs[call[0]] == (1 if call is LOOKUP else MAX_REPEATS)
    if integration in {"static_edge", "callback_handler"}:
        assert error is not None, "these cannot end a run: the come-back raises"
    else:
        assert error is None, "route_after_tools and the middleware end the run gracefully"


def test_continue_still_lets_the_model_go_on_after_a_few_blocked_attempts():
    # Blocked once over the limit, then the model does something else: no stop.
    script = [[TRANSFER]] * (MAX_REPEATS + 1) + [[LOOKUP], "Done here."]
    model = ScriptedChatModel(script=script)
    guard = ReplayGuard(POLICY.model_copy(update={"exit_behavior": "continue"}))
    runs = ToolRuns()
    graph, config = build("static_edge", guard, model, runs)
    out = graph.invoke({"messages": [HumanMessage("help me")]}, config)
    assert out["messages"][-1].text == "Done here."
    assert runs["get_details_by_id"] == 1
    assert guard.inspect(graph.get_state(config)).stop_reason is None


def test_static_edge_async_matches_sync():
    sync_model, _, sync_error = loop("static_edge", "end")
    async_model, _, async_error = loop("static_edge", "end", use_async=True)
    assert sync_model.calls == async_model.calls
    assert str(sync_error) == str(async_error)


@pytest.mark.parametrize("integration", INTEGRATIONS)
def test_a_cycle_under_continue_is_bounded_too(integration):
    # A-B-A-B with identical results: each blocked call counts as an attempt of its own key,
    # so the cycle's calls escalate like repeats (at most 2 * max_repeats each).
    toggle, check = ("toggle_airplane_mode", {}), ("check_network_status", {})
    model = ScriptedChatModel(script=[[toggle], [check]] * 15)
    guard = ReplayGuard(POLICY.model_copy(update={"exit_behavior": "continue"}))
    runs = ToolRuns()
    graph, config = build(integration, guard, model, runs)
    error = None
    try:
        graph.invoke({"messages": [HumanMessage("no signal")]}, config)
    except LoopAbortedError as exc:
        error = exc
    # Only the integrations that cannot end a run raise, at the come-back after the stop.
    assert (error is not None) == (integration in {"static_edge", "callback_handler"})
    assert error is None or error.reason == "stop_ignored"
    assert model.calls <= 2 * CONTINUE_BOUND, f"{model.calls} model calls"
    # Two of each, then each blocked attempt counts for its own key: the 13th call (the
    # toggle's 7th attempt) stops the run.
    after = AFTER_THE_STOP.get((integration, "continue"), 0)
    assert model.calls == 13 + after, f"{model.calls} model calls"
    assert runs["toggle_airplane_mode"] == 2
