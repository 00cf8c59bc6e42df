"""LangGraph's deprecated create_react_agent with a guarded ToolNode (exit_behavior="error").

Run: python examples/react_agent.py
"""

from __future__ import annotations

import warnings
from typing import Annotated, Any, NotRequired

from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.chat_agent_executor import AgentState, create_react_agent

from langgraph_replay_guard import LoopAbortedError, ReplayGuard, merge_guard_state
from langgraph_replay_guard.testing import ScriptedChatModel


class State(AgentState):
    """create_react_agent's state plus the guard channel (without it the guard keeps nothing)."""

    replay_guard: NotRequired[Annotated[dict[str, Any] | None, merge_guard_state]]


lookups: list[str] = []


@tool
def lookup(id: str) -> str:
    """Look a customer up."""
    lookups.append(id)
    return f"{id}: premium plan"


def main() -> None:
    """Run the looping agent; the guard raises LoopAbortedError at the stop."""
    # Its tools node always goes back to the model, so the guard cannot end the run
    # gracefully: exit_behavior="error" stops it at once.
    guard = ReplayGuard(exit_behavior="error")
    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # use create_agent in new code
        agent = create_react_agent(model, guard.wrap(ToolNode([lookup])), state_schema=State)
    try:
        agent.invoke({"messages": [("user", "Who is P1?")]})
    except LoopAbortedError as stop:
        print(f"stopped: {stop.tool} {stop.reason} after {stop.count} calls")
    print(f"lookups run: {len(lookups)}, model calls: {model.calls}")


if __name__ == "__main__":
    main()
