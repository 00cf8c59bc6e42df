"""Two named guards stacked on one agent, killed with SIGKILL inside the tool body, then resumed.

Usage: python tests/integration/proc_identity.py PHASE ORDER DIR

PHASE is `run` (the send's body appends a line to DIR/sends, then the process kills itself)
or `resume` (a new process continues the thread and prints one JSON line: the error's type,
or "none"; after an error, the operator's `guard.resolve` and the answer the resume then
ends with). ORDER is `library-first` or `app-first`: which guard comes first in the list; or
`deep`: a deep agent whose sub-agent sends inside the parent's `task` (an idempotent `task`,
so a resume runs the sub-agent again, with new ids).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from deepagents import create_deep_agent
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import GuardConfig, ReplayGuard, ReplayGuardMiddleware
from langgraph_replay_guard.testing import ScriptedChatModel


def step(messages: list[BaseMessage]) -> Any:
    """Send to Ann once; answer when the send came back (the same in both processes)."""
    if isinstance(messages[-1], ToolMessage):
        return "Sent."
    return [("send", {"to": "ann"})]


def main() -> None:
    phase, order, root = sys.argv[1], sys.argv[2], Path(sys.argv[3])

    @tool
    def send(to: str) -> str:
        """Send a message."""
        fd = os.open(root / "sends", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{to}\n".encode())
        finally:
            os.close(fd)
        if phase == "run":
            os.kill(os.getpid(), signal.SIGKILL)  # after the effect, before any outcome
        return f"sent to {to}"

    saver = SqliteSaver(sqlite3.connect(root / "checkpoints.db", check_same_thread=False))
    store = SqliteStore(sqlite3.connect(root / "store.db", check_same_thread=False))
    store.setup()
    if order == "deep":
        deep(phase, send, saver, store)
        return
    policy = GuardConfig(tools={"send": "unsafe"})
    library = ReplayGuardMiddleware(policy, name="library")
    app = ReplayGuardMiddleware(policy, name="app")
    agent = create_agent(
        ScriptedChatModel(script=[step] * 3),
        [send],
        middleware=[library, app] if order == "library-first" else [app, library],
        checkpointer=saver,
        store=store,
    )
    config = {"configurable": {"thread_id": "stacked"}}
    if phase == "run":
        agent.invoke({"messages": [HumanMessage("send it")]}, config, durability="sync")
        print(json.dumps({"error": "not killed"}))
        return
    try:
        agent.invoke(None, config, durability="sync")
    except Exception as exc:  # the report names whatever the resume raised
        report = {"error": type(exc).__name__, "text": str(exc)[:300]}
        facts = getattr(exc, "facts", {})
    else:
        print(json.dumps({"error": "none"}))
        return
    # The operator checked upstream: it was sent. One resolve settles both guards' rows.
    out = app.guard.resolve(agent, config, facts["tool_call_id"], "succeeded", "sent to ann")
    report["after_resolve"] = out["messages"][-1].text
    print(json.dumps(report))


def deep(phase: str, send: Any, saver: SqliteSaver, store: SqliteStore) -> None:
    """A deep agent whose sub-agent sends inside the parent's `task` (rerun on resume)."""
    guard = ReplayGuard(
        GuardConfig(toolkits=["deepagents"], tools={"send": "unsafe", "task": "idempotent"})
    )
    helper = {
        "name": "helper",
        "description": "Sends messages.",
        "system_prompt": "Send what you are asked to.",
        "tools": [send],
        "model": ScriptedChatModel(script=[sub_step] * 5),
        "middleware": [guard.middleware(name="helper")],
    }
    agent = create_deep_agent(
        ScriptedChatModel(script=[parent_step] * 5),
        [],
        subagents=[helper],
        middleware=[guard.middleware(name="main")],
        checkpointer=saver,
        store=store,
    )
    config = {"configurable": {"thread_id": "deep"}}
    try:
        if phase == "run":
            agent.invoke({"messages": [HumanMessage("send it")]}, config, durability="sync")
        else:
            agent.invoke(None, config, durability="sync")
    except Exception as exc:  # the report names whatever the resume raised
        print(json.dumps({"error": type(exc).__name__, "text": str(exc)[:300]}))
        return
    print(json.dumps({"error": "none"}))


def parent_step(messages: list[BaseMessage]) -> Any:
    """Delegate the send to the helper once; answer when it came back."""
    if isinstance(messages[-1], ToolMessage):
        return "Sent."
    return [("task", {"description": "Send it to Ann.", "subagent_type": "helper"})]


def sub_step(messages: list[BaseMessage]) -> Any:
    """The helper: send to Ann once, then answer."""
    if isinstance(messages[-1], ToolMessage):
        return "sub-agent done"
    return [("send", {"to": "ann"})]


if __name__ == "__main__":
    main()
