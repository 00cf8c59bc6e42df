"""Graphs for the replay tests: a model that asks once per turn, side-effect tools, a tools node."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import RetryPolicy

from langgraph_replay_guard import ReplayGuard, ReplayGuardState
from langgraph_replay_guard.testing import ScriptedChatModel

REPLAY_POLICY = {
    "send_email": "unsafe",
    "charge_card": {"replay": "idempotent", "idempotency_key_arg": "idempotency_key"},
    "approve_and_send": "unsafe",
}


def ask_once(calls: Sequence[tuple[str, dict[str, Any]]], final: str = "All done.") -> Callable:
    """A model step: ask for `calls` until their answers arrive in this turn, then answer.

    State-dependent, so a fresh process resuming the thread gets the same behaviour.
    """

    def step(messages: list[BaseMessage]) -> Any:
        for message in reversed(messages):
            if isinstance(message, ToolMessage):
                return final
            if isinstance(message, HumanMessage):
                break
        return list(calls)

    return step


def asking_model(
    calls: Sequence[tuple[str, dict[str, Any]]], *, turns: int = 20
) -> ScriptedChatModel:
    """A ScriptedChatModel that plays `ask_once(calls)` on every call."""
    return ScriptedChatModel(script=[ask_once(calls)] * turns)


def replay_graph(
    guard: ReplayGuard,
    model: ScriptedChatModel,
    tools: Sequence[Any],
    *,
    retry: RetryPolicy | None = None,
    handle_tool_errors: Any = False,
    **compile_kwargs: Any,
) -> Any:
    """A custom agent graph with a guarded tools node (optionally with a RetryPolicy)."""

    def agent(state: ReplayGuardState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    async def aagent(state: ReplayGuardState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    from langchain_core.runnables import RunnableLambda

    builder = StateGraph(ReplayGuardState)
    builder.add_node("agent", RunnableLambda(agent, afunc=aagent))
    builder.add_node(
        "tools",
        guard.tool_node(tools, handle_tool_errors=handle_tool_errors),
        retry_policy=retry,
    )
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_conditional_edges("tools", guard.route_after_tools("agent"))
    return builder.compile(**compile_kwargs)
