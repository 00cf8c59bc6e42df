"""An agent looping on an MCP tool (a real server over stdio), with and without the guard.

Run: python examples/mcp_tools.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from langchain.agents import create_agent
from langchain_mcp_adapters.client import MultiServerMCPClient

from langgraph_replay_guard import ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel

SERVER = Path(__file__).with_name("mcp_ticket_server.py")


async def run(guarded: bool, runs_file: Path) -> int:
    """Let the model ask for the same ticket 8 times; return how often the server ran it."""
    env = {**os.environ, "MCP_RUNS_FILE": str(runs_file)}
    client = MultiServerMCPClient(
        {
            "tickets": {
                "command": sys.executable,
                "args": [str(SERVER)],
                "transport": "stdio",
                "env": env,
            }
        }
    )
    tools = await client.get_tools()  # MCP tools are async-only: run the agent with ainvoke
    model = ScriptedChatModel.looping("fetch_ticket", {"ticket_id": "T-7"}, times=8)
    middleware = [ReplayGuard().middleware()] if guarded else []
    agent = create_agent(model, tools, middleware=middleware)
    await agent.ainvoke({"messages": [("user", "What is T-7?")]})
    return len(runs_file.read_text().splitlines())


def main() -> None:
    """Compare the server's real runs with and without the guard."""
    with tempfile.TemporaryDirectory() as directory:
        plain = asyncio.run(run(False, Path(directory) / "plain.txt"))
        guarded = asyncio.run(run(True, Path(directory) / "guarded.txt"))
    print(f"server runs without the guard: {plain}")
    print(f"server runs with the guard: {guarded}")


if __name__ == "__main__":
    main()
