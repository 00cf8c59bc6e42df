"""A real MCP server (stdio subprocess) through langchain-mcp-adapters: its tools are async-only."""

from __future__ import annotations

import asyncio
import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel
from tests import warm_children
from tests.integration.stacks import last_ai, stop_of, tool_texts

if TYPE_CHECKING:
    from langchain_mcp_adapters.client import MultiServerMCPClient

os.environ["LANGSMITH_TRACING"] = "false"

# mcp is imported by the tests that use it, not at collection: every xdist worker collects
# this module, and only the one that runs the MCP tests (one group, with
# test_mcp_annotations.py: tests/conftest.py) imports mcp (about 0.4 s of CPU).
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mcp") is None
    or importlib.util.find_spec("langchain_mcp_adapters") is None,
    reason="the stacks extra: pip install -e '.[stacks]'",
)

SERVER = Path(__file__).parents[2] / "examples" / "mcp_ticket_server.py"


def mcp_client(runs_file: Path) -> MultiServerMCPClient:
    # A real stdio server per session, forked from the warm zygote (tests/warm_children.py).
    from langchain_mcp_adapters.client import MultiServerMCPClient

    command, args, warm = warm_children.stdio_command(SERVER)
    return MultiServerMCPClient(
        {
            "tickets": {
                "command": command,
                "args": args,
                "transport": "stdio",
                "env": {**os.environ, "MCP_RUNS_FILE": str(runs_file), **warm},
            }
        }
    )


def mcp_tools(runs_file: Path):
    # Stateless tools (the adapters' default): every call starts a session, and a server.
    return asyncio.run(mcp_client(runs_file).get_tools())


def server_runs(runs_file: Path) -> list[str]:
    return runs_file.read_text().splitlines() if runs_file.exists() else []


def test_a_looping_mcp_tool_runs_once_on_the_server(tmp_path):
    runs_file = tmp_path / "runs.txt"
    tools = mcp_tools(runs_file)
    assert {t.name for t in tools} == {"fetch_ticket", "close_ticket"}
    guard = ReplayGuard(GuardConfig(tools={"close_ticket": "unsafe"}), store=InMemoryStore())
    model = ScriptedChatModel.looping("fetch_ticket", {"ticket_id": "T-7"}, times=50)
    agent = create_agent(
        model, tools, middleware=[guard.middleware()], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "mcp-loop"}}
    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("what is T-7?")]}, config))

    assert server_runs(runs_file) == ["fetch_ticket T-7"]  # the server ran it once
    answers = tool_texts(out["messages"], "fetch_ticket")
    assert answers[0] == "ticket T-7: the printer is on fire"
    assert all(a.startswith("Not executed") for a in answers[1:3])
    assert model.calls == 4
    assert stop_of(last_ai(out["messages"])) == "repeat_limit"
    assert guard.inspect(agent.get_state(config)).stop_reason == "repeat_limit"


# InMemorySaver makes the guard warn that the unsafe tool's thread is not durable.
@pytest.mark.filterwarnings("ignore::langgraph_replay_guard.ReplayGuardWarning")
def test_a_repeated_unsafe_mcp_call_is_counted_and_stopped(tmp_path):
    runs_file = tmp_path / "runs.txt"
    guard = ReplayGuard(GuardConfig(tools={"close_ticket": "unsafe"}), store=InMemoryStore())
    model = ScriptedChatModel.looping("close_ticket", {"ticket_id": "T-7"}, times=50)

    async def main():
        # One session (one server process) for the whole run.
        async with mcp_client(runs_file).session("tickets") as session:
            from langchain_mcp_adapters.tools import load_mcp_tools

            tools = await load_mcp_tools(session)
            agent = create_agent(
                model, tools, middleware=[guard.middleware()], checkpointer=InMemorySaver()
            )
            config = {"configurable": {"thread_id": "mcp-unsafe"}}
            return await agent.ainvoke({"messages": [HumanMessage("close T-7")]}, config)

    out = asyncio.run(main())

    # An unsafe call is never answered from an earlier result: it runs up to the limit.
    assert server_runs(runs_file) == ["close_ticket T-7"] * 3
    assert stop_of(last_ai(out["messages"])) == "repeat_limit"


def test_mcp_tools_are_async_only_and_the_guard_lets_that_error_through(tmp_path):
    runs_file = tmp_path / "runs.txt"
    tools = mcp_tools(runs_file)
    model = ScriptedChatModel.looping("fetch_ticket", {"ticket_id": "T-7"}, times=5)
    agent = create_agent(model, tools, middleware=[ReplayGuard().middleware()])
    with pytest.raises(NotImplementedError, match="does not support sync invocation"):
        agent.invoke({"messages": [HumanMessage("what is T-7?")]})
    assert server_runs(runs_file) == []
