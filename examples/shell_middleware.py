"""LangChain's ShellToolMiddleware with the guard's `shell` preset: a repeated read runs once.

Run: python examples/shell_middleware.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from langchain.agents import create_agent
from langchain.agents.middleware import ShellToolMiddleware

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel


def main() -> None:
    """Run a model that repeats `cat notes.txt`, then one that repeats an append."""
    workspace = Path(tempfile.mkdtemp())
    (workspace / "notes.txt").write_text("the printer is on fire\n")
    # (Switch to GuardConfig(toolkits=[...]) for LangChain's shell once toolkits ship.)
    guard = ReplayGuard(GuardConfig(toolkits=["langchain"]))
    for command in ("cat notes.txt", "echo again >> log.txt"):
        model = ScriptedChatModel.looping("shell", {"command": command}, times=20)
        shell = ShellToolMiddleware(workspace_root=workspace)
        agent = create_agent(model, [], middleware=[shell, guard.middleware()])
        result = agent.invoke({"messages": [("user", "Go")]})
        answers = [m for m in result["messages"] if m.type == "tool"]
        ran = sum(not m.text.startswith(("Not executed", "Stopped")) for m in answers)
        print(f"{command!r}: asked {len(answers)} times, ran {ran}")
    print(f"log.txt lines: {len((workspace / 'log.txt').read_text().splitlines())}")


if __name__ == "__main__":
    main()
