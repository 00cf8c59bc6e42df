"""Guarded agents that `langgraph dev` serves in tests/integration/test_served_guard.py.

The model is scripted from the conversation (`send <to>` asks for one unsafe `send`), and the
tool's effect is a line in `$REPLAY_GUARD_SERVED_DIR/sent.txt` (recipient and tool call id).
While `hold` exists in that directory the tool waits inside its body (after the effect) until
`release` appears, so a test can cancel the run or kill the server mid-tool; `to` starting
with `fail` raises after the effect (an unknown outcome). The graphs use the server's
checkpointer and store.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any

from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel


def _dir() -> Path:
    return Path(os.environ["REPLAY_GUARD_SERVED_DIR"])


@tool
def send(to: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Send an email."""
    folder = _dir()
    with (folder / "sent.txt").open("a", encoding="utf-8") as file:
        file.write(f"{to} {tool_call_id}\n")
    if (folder / "hold").exists():
        (folder / "in_tool").write_text(str(os.getpid()), encoding="utf-8")
        deadline = time.monotonic() + 60
        while not (folder / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    if to.startswith("fail"):
        msg = f"connection dropped after sending to {to}"
        raise ConnectionError(msg)
    return f"sent to {to}"


def _decide(messages: list[BaseMessage]) -> Any:
    last = messages[-1]
    if isinstance(last, HumanMessage) and last.text.startswith("send "):
        return [("send", {"to": last.text.removeprefix("send ").strip()})]
    if isinstance(last, ToolMessage):
        return f"Done: {last.text}"
    return "Nothing to do."


def _agent(config: GuardConfig) -> Any:
    guard = ReplayGuard(config)
    # Each model call plays `_decide` (a script step per call; the threads share the model).
    model = ScriptedChatModel(script=[_decide] * 100_000)
    return create_agent(model, [send], middleware=[guard.middleware()])


guarded = _agent(GuardConfig(tools={"send": "unsafe"}))
guarded_interrupt = _agent(GuardConfig(tools={"send": "unsafe"}, on_unsafe="interrupt"))
