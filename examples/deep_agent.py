"""A Deep Agents agent and its sub-agent, guarded by one ReplayGuard (scripted models, offline).

Run: python examples/deep_agent.py
"""

from __future__ import annotations

from deepagents import create_deep_agent
from deepagents.backends.utils import create_file_data
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel

lookups: list[str] = []


@tool
def lookup(id: str) -> str:
    """Look a customer up."""
    lookups.append(id)
    return f"{id}: premium plan"


def main() -> None:
    """Run a parent that reads a file in a loop, then delegates to a looping sub-agent."""
    guard = ReplayGuard(GuardConfig(toolkits=["deepagents"]), store=InMemoryStore())
    researcher = {
        "name": "researcher",
        "description": "Looks customers up.",
        "system_prompt": "Look the customer up.",
        "tools": [lookup],
        "model": ScriptedChatModel.looping("lookup", {"id": "P1"}, times=50),
        # A sub-agent does not inherit the parent's middleware: its own, named.
        "middleware": [guard.middleware(name="researcher")],
    }
    delegate = {"description": "Who is P1?", "subagent_type": "researcher"}
    parent = ScriptedChatModel(
        script=[[("read_file", {"file_path": "/notes.txt"})], [("task", delegate)]],
        final="P1 could not be looked up; the researcher was stuck.",
    )
    agent = create_deep_agent(
        parent,
        [lookup],
        subagents=[researcher],
        middleware=[guard.middleware(name="main")],
        checkpointer=InMemorySaver(),
    )
    files = {"/notes.txt": create_file_data("ask the researcher about P1\n")}
    result = agent.invoke(
        {"messages": [("user", "Check my notes")], "files": files},
        {"configurable": {"thread_id": "deep-example"}},
    )
    task_result = next(m for m in result["messages"] if m.type == "tool" and m.name == "task")
    print(f"lookups run by the sub-agent: {len(lookups)}")
    print(f"the parent's task result: {task_result.text[:60]}...")
    print(f"the parent's answer: {result['messages'][-1].text}")


if __name__ == "__main__":
    main()
