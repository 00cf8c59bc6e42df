"""Two guarded workers under a langgraph-supervisor supervisor; one of them loops.

Run: python examples/supervisor_workers.py
"""

from __future__ import annotations

import warnings

from langchain.agents import create_agent
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph_supervisor import create_supervisor

from langgraph_replay_guard import ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel


@tool
def lookup(id: str) -> str:
    """Look a customer up."""
    return f"{id}: premium plan"


@tool
def quote(item: str) -> str:
    """Price an item."""
    return f"{item} costs 3 EUR"


def main() -> None:
    """Run the supervisor and print what it saw of each worker."""
    guard = ReplayGuard(store=InMemoryStore())  # one guard and one ledger store for all agents
    researcher = create_agent(
        ScriptedChatModel.looping("lookup", {"id": "P1"}, times=50),
        [lookup],
        name="researcher",
        middleware=[guard.middleware(name="researcher")],
    )
    pricer = create_agent(
        ScriptedChatModel(script=[[("quote", {"item": "plan"})]], final="The plan costs 3 EUR."),
        [quote],
        name="pricer",
        middleware=[guard.middleware(name="pricer")],
    )
    boss = ScriptedChatModel(
        script=[[("transfer_to_researcher", {})], [("transfer_to_pricer", {})]],
        final="P1 could not be looked up; the plan costs 3 EUR.",
    )
    with warnings.catch_warnings():
        # create_supervisor builds its agent with LangGraph's deprecated create_react_agent.
        warnings.simplefilter("ignore", DeprecationWarning)
        app = create_supervisor([researcher, pricer], model=boss).compile(
            checkpointer=InMemorySaver()
        )
    result = app.invoke(
        {"messages": [("user", "Who is P1, and what does the plan cost?")]},
        {"configurable": {"thread_id": "supervisor-example"}},
    )
    for message in result["messages"]:
        if message.type == "ai" and message.text and "Transferring" not in message.text:
            stop = message.response_metadata.get("replay_guard_stop")
            print(f"{message.name}: {message.text[:50]} (guard stop: {stop})")


if __name__ == "__main__":
    main()
