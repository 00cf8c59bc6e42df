"""A deep agent in a fresh process, killed with SIGKILL right after `write_file`, then resumed.

Usage: python tests/integration/proc_deepagents.py PHASE DIR

PHASE is `run` (the first turn; the process kills itself as soon as `write_file` returned
through the guard, before LangGraph could checkpoint the file) or `resume` (a new process
continues the thread). DIR holds the SQLite checkpoint and store files and `executions`, a
file each execution of `write_file`'s body appends a line to (O_APPEND: a SIGKILL right after
cannot lose it). `resume` prints one JSON line: the files in the thread's state and the
messages' texts.
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
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import ReplayGuardMiddleware
from langgraph_replay_guard.testing import ScriptedChatModel

WRITE = {"file_path": "/notes.md", "content": "the printer is on fire\n"}


def step(messages: list[BaseMessage]) -> Any:
    """Write the notes once; answer when the write came back (the same in both processes)."""
    if isinstance(messages[-1], ToolMessage):
        return "Saved your notes."
    return [("write_file", WRITE)]


class CountExecutions(AgentMiddleware):
    """Outside the guard: hands down a tool whose body appends a line each time it runs.

    The guard decides where the tool runs, past every middleware; a call it replays from
    the ledger never starts the body, so only real executions are counted.
    """

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        real, path = request.tool.invoke, self.path

        def invoke(input: Any, config: Any = None, **kwargs: Any) -> Any:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{request.tool_call['name']}\n".encode())
            finally:
                os.close(fd)
            return real(input, config, **kwargs)

        counted = request.tool.model_copy()
        object.__setattr__(counted, "invoke", invoke)
        return handler(request.override(tool=counted))


class CrashAfterWrite(AgentMiddleware):
    """Outside the guard: die once `write_file` returned (the ledger has its outcome)."""

    name = "CrashAfterWrite"

    def __init__(self, crash: bool) -> None:
        super().__init__()
        self.crash = crash

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        result = handler(request)
        if self.crash and request.tool_call["name"] == "write_file":
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return result


def main() -> None:
    phase, root = sys.argv[1], Path(sys.argv[2])
    saver = SqliteSaver(sqlite3.connect(root / "checkpoints.db", check_same_thread=False))
    store = SqliteStore(sqlite3.connect(root / "store.db", check_same_thread=False))
    store.setup()
    guard = ReplayGuardMiddleware(toolkits=["deepagents"])
    agent = create_deep_agent(
        ScriptedChatModel(script=[step] * 5),
        [],
        middleware=[CrashAfterWrite(phase == "run"), CountExecutions(root / "executions"), guard],
        checkpointer=saver,
        store=store,
    )
    config = {"configurable": {"thread_id": "notes"}}
    if phase == "run":
        agent.invoke({"messages": [HumanMessage("save my notes")]}, config, durability="sync")
        print(json.dumps({"status": "not killed"}))
        return
    out = agent.invoke(None, config, durability="sync")
    files = {path: data.get("content") for path, data in (out.get("files") or {}).items()}
    texts = [m.text for m in out["messages"]]
    print(json.dumps({"status": "done", "files": files, "texts": texts}))


if __name__ == "__main__":
    main()
