"""Two guarded agents in a langgraph-swarm: the one that takes over loops and is stopped.

Run: python examples/swarm_handoff.py
"""

from __future__ import annotations

from langchain.agents import create_agent
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_swarm import create_handoff_tool, create_swarm

from langgraph_replay_guard import ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel

lookups: list[str] = []


@tool
def lookup(id: str) -> str:
    """Look a customer up."""
    lookups.append(id)
    return f"{id}: premium plan"


def main() -> None:
    """Hand off from sales to support, which loops on a lookup."""
    guard = ReplayGuard()
    sales = create_agent(
        ScriptedChatModel(script=[[("transfer_to_support", {})]]),
        [create_handoff_tool(agent_name="support")],
        name="sales",
        middleware=[guard.middleware(name="sales")],
    )
    support = create_agent(
        ScriptedChatModel.looping("lookup", {"id": "P1"}, times=50),
        [lookup, create_handoff_tool(agent_name="sales")],
        name="support",
        middleware=[guard.middleware(name="support")],
    )
    app = create_swarm([sales, support], default_active_agent="sales").compile(
        checkpointer=InMemorySaver()
    )
    result = app.invoke(
        {"messages": [("user", "My line is down")]}, {"configurable": {"thread_id": "swarm"}}
    )
    last = result["messages"][-1]
    print(f"lookups run: {len(lookups)}")
    print(f"active agent: {result['active_agent']}")
    print(
        f"{last.name}: {last.text[:50]} (guard stop: {last.response_metadata['replay_guard_stop']})"
    )


if __name__ == "__main__":
    main()
