"""A `create_agent` SWE-agent-style agent guarded with `toolkits=["swe-agent"]` only."""

from __future__ import annotations

import asyncio
import os
from collections import Counter

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_replay_guard import ReplayGuardMiddleware
from langgraph_replay_guard.testing import ScriptedChatModel

os.environ["LANGSMITH_TRACING"] = "false"

FILE = [f"line {i}" for i in range(1, 301)]
SCRIPT = [
    [("search_dir", {"search_term": "ttl"})],
    [("open", {"path": "src/cache.py"})],
    [("scroll_down", {})],
    [("search_dir", {"search_term": "ttl"})],  # the same search, nothing written: redundant
    [("scroll_down", {})],  # the same call, the next page: must run
]


def swe_tools(ran: Counter[str]) -> list[BaseTool]:
    """SWE-agent's viewer and search, with a real window position."""
    window = {"first": 1}

    def show() -> str:
        first = window["first"]
        return "\n".join(FILE[first - 1 : first + 99])

    @tool
    def search_dir(search_term: str) -> str:
        """List the files that contain search_term."""
        ran["search_dir"] += 1
        return f'Found 1 matches for "{search_term}": src/cache.py'

    @tool
    def open(path: str) -> str:
        """Open a file and show its first 100 lines."""
        ran["open"] += 1
        window["first"] = 1
        return show()

    @tool
    def scroll_down() -> str:
        """Show the next 100 lines of the open file."""
        ran["scroll_down"] += 1
        window["first"] += 100
        return show()

    return [search_dir, open, scroll_down]


def build(ran: Counter[str]):
    model = ScriptedChatModel(script=list(SCRIPT))
    guard = ReplayGuardMiddleware(toolkits=["swe-agent"])
    return create_agent(model, swe_tools(ran), middleware=[guard], checkpointer=InMemorySaver())


def check(out: dict, ran: Counter[str]) -> None:
    assert ran == Counter({"search_dir": 1, "open": 1, "scroll_down": 2})
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    first, second = (m.text for m in answers if m.name == "search_dir")
    assert second.startswith("Not executed: 'search_dir' already succeeded")
    assert second.endswith(first)  # the model is shown the earlier result
    pages = [m.text for m in answers if m.name == "scroll_down"]
    assert pages[0].startswith("line 101")
    assert pages[1].startswith("line 201")


def test_a_repeated_search_is_deduplicated_and_scrolling_is_not():
    ran: Counter[str] = Counter()
    agent = build(ran)
    cfg = {"configurable": {"thread_id": "swe"}}
    out = agent.invoke({"messages": [HumanMessage("fix the cache expiry")]}, cfg)
    check(out, ran)


def test_the_same_async():
    ran: Counter[str] = Counter()
    agent = build(ran)
    cfg = {"configurable": {"thread_id": "swe-async"}}
    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("fix the cache expiry")]}, cfg))
    check(out, ran)
