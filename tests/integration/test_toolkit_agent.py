"""`create_agent` coding agents guarded with one toolkit only: SWE-agent-style, OpenHands-style."""

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


# -- OpenHands: the CodeAct agent's editor and terminal, guarded with toolkits=["openhands"] --

CACHE = "/workspace/cache.py"
OPENHANDS_SCRIPT = [
    [("str_replace_editor", {"command": "view", "path": CACHE})],
    [("str_replace_editor", {"command": "view", "path": CACHE})],  # nothing written: redundant
    [
        (
            "str_replace_editor",
            {"command": "str_replace", "path": CACHE, "old_str": "60", "new_str": "600"},
        )
    ],
    [("str_replace_editor", {"command": "view", "path": CACHE})],  # after the edit: must run
    [("execute_bash", {"command": f"cat {CACHE}"})],
    [("execute_bash", {"command": f"cat {CACHE}"})],  # redundant
    [("finish", {"message": "ttl raised to 600"})],
]


def openhands_tools(ran: Counter[str]) -> list[BaseTool]:
    """OpenHands' str_replace_editor, execute_bash and finish over one in-memory file."""
    files = {CACHE: "ttl = 60"}

    @tool
    def str_replace_editor(
        command: str, path: str, old_str: str | None = None, new_str: str | None = None
    ) -> str:
        """View, create and edit files."""
        ran[f"editor {command}"] += 1
        if command == "view":
            return f"1\t{files[path]}"
        assert command == "str_replace"
        assert old_str is not None
        assert new_str is not None
        files[path] = files[path].replace(old_str, new_str)
        return f"The file {path} has been edited."

    @tool
    def execute_bash(command: str) -> str:
        """Execute a bash command in the terminal."""
        ran["execute_bash"] += 1
        return files[command.removeprefix("cat ")]

    @tool
    def finish(message: str) -> str:
        """Signal the completion of the task."""
        ran["finish"] += 1
        return message

    return [str_replace_editor, execute_bash, finish]


def build_openhands(ran: Counter[str]):
    model = ScriptedChatModel(script=list(OPENHANDS_SCRIPT))
    guard = ReplayGuardMiddleware(toolkits=["openhands"])
    return create_agent(
        model, openhands_tools(ran), middleware=[guard], checkpointer=InMemorySaver()
    )


def check_openhands(out: dict, ran: Counter[str]) -> None:
    assert ran == Counter(
        {"editor view": 2, "editor str_replace": 1, "execute_bash": 1, "finish": 1}
    )
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    views = [m.text for m in answers if m.name == "str_replace_editor"]
    assert views[0] == "1\tttl = 60"
    assert views[1].startswith("Not executed: 'str_replace_editor' already succeeded")
    assert views[1].endswith(views[0])
    assert views[3] == "1\tttl = 600"  # the view after the edit ran and shows the new text
    cats = [m.text for m in answers if m.name == "execute_bash"]
    assert cats[0] == "ttl = 600"
    assert cats[1].startswith("Not executed: 'execute_bash' already succeeded")


def test_openhands_view_is_deduplicated_and_runs_again_after_str_replace():
    ran: Counter[str] = Counter()
    agent = build_openhands(ran)
    cfg = {"configurable": {"thread_id": "openhands"}}
    out = agent.invoke({"messages": [HumanMessage("raise the cache ttl")]}, cfg)
    check_openhands(out, ran)


def test_openhands_the_same_async():
    ran: Counter[str] = Counter()
    agent = build_openhands(ran)
    cfg = {"configurable": {"thread_id": "openhands-async"}}
    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("raise the cache ttl")]}, cfg))
    check_openhands(out, ran)
