"""Guarded example graphs for LangGraph Studio (`langgraph dev`), with a scripted looping model."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.tools import tool

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel, agent_graph

SYSTEM = "You are a customer-service agent. Look the customer up, then answer."


@tool
def get_details_by_id(id: str) -> str:
    """Look up a customer, line or plan by id."""
    return f'{{"id": "{id}", "name": "Premium Plan", "data_limit_gb": 15.0}}'


@tool
def transfer_to_human_agents(summary: str) -> str:
    """Transfer the customer to a human agent (a side effect: never repeated blindly)."""
    return "Transfer successful"


def _stuck(messages: list[BaseMessage]) -> Any:
    # Like the recorded run that called get_details_by_id 96 times: the same lookup, always.
    return [("get_details_by_id", {"id": "P1002"})]


def looping_model() -> ScriptedChatModel:
    """A model that repeats the same lookup on every call (a server serves many runs)."""
    return ScriptedChatModel(script=[_stuck] * 100_000)


GUARD = ReplayGuard(GuardConfig(tools={"transfer_to_human_agents": "unsafe"}))
TOOLS = [get_details_by_id, transfer_to_human_agents]

# No checkpointer or store here: the server supplies both (and refuses graphs that bring one).
custom_graph = agent_graph(looping_model(), TOOLS, guard=GUARD, system_prompt=SYSTEM)


def _agent() -> Any:
    from langchain.agents import create_agent

    return create_agent(
        looping_model(), TOOLS, system_prompt=SYSTEM, middleware=[GUARD.middleware()]
    )


agent = _agent()
