"""A `create_agent` agent whose unsafe `send` runs below the guard, killed inside its body.

Usage: python tests/integration/proc_exec_seams.py CASE ORDER PHASE DIR [MODE]

CASE says how the body is reached from the guard's tool hook (issue 32, seam 3):

- `swap`: a middleware swaps the agent's `send` (a dry run) for the live one
  (`handler(request.override(tool=live))`);
- `serve`: a middleware serves `send` itself, running its own body, never calling its handler;
- `redirect`: a human edits the model's `draft` call into a `send` (`HumanInTheLoopMiddleware`,
  batched review); the tools node runs the redirected call.

ORDER is `guard-first` or `guard-last` in the middleware list. PHASE is `run` (the first turn;
the body appends its effect to DIR/effects with O_APPEND, then the process kills itself with
SIGKILL, still inside the body), `run-after` (the same, killed once the call came back out of
every middleware, before LangGraph saved its answer) or `resume` (a new process continues the
thread). MODE is `sync` (the default) or `async` (`ainvoke`). The child prints one JSON line:
`{"status": "done" | <error class>, "texts": [...]}`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.sqlite import SqliteStore
from langgraph.types import Command

from langgraph_replay_guard import ReplayGuardMiddleware
from langgraph_replay_guard.testing import ScriptedChatModel

POLICY = {"send": "unsafe", "draft": "pure"}


class Body:
    """The one real side effect: a line in `effects`, then a SIGKILL in the first phase."""

    def __init__(self, root: Path, kill: bool) -> None:
        self.effects = root / "effects"
        self.kill = kill

    def send(self, to: str) -> str:
        fd = os.open(self.effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"send\t{to}\n".encode())
        finally:
            os.close(fd)
        if self.kill:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return f"Sent to {to}"


def tools(body: Body) -> tuple[list[Any], Any]:
    """The agent's tools (`send` is a dry run, `draft` writes nothing) and the live `send`."""

    @tool("send")
    def dry_run_send(to: str) -> str:
        """Send the message to a recipient."""
        return f"(dry run) would send to {to}"

    @tool("send")
    def live_send(to: str) -> str:
        """Send the message to a recipient."""
        return body.send(to)

    @tool
    def draft(to: str) -> str:
        """Draft a message to a recipient (sends nothing)."""
        return f"Draft for {to}"

    return [dry_run_send, draft], live_send


class KillAfter(AgentMiddleware):
    """Outermost: dies once a `send` came back out of every middleware (its answer unsaved)."""

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        result = handler(request)
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        return result

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        result = await handler(request)
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        return result


class SwapToLive(AgentMiddleware):
    """Runs the live `send` in place of the agent's dry run."""

    def __init__(self, live: Any) -> None:
        super().__init__()
        self.live = live

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        if request.tool_call["name"] == "send":
            return handler(request.override(tool=self.live))
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        if request.tool_call["name"] == "send":
            return await handler(request.override(tool=self.live))
        return await handler(request)


class ServeSend(AgentMiddleware):
    """Answers `send` calls itself with its own body; the handler never runs for them."""

    def __init__(self, body: Body) -> None:
        super().__init__()
        self.body = body

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        call = request.tool_call
        if call["name"] != "send":
            return handler(request)
        text = self.body.send(**call["args"])
        return ToolMessage(text, tool_call_id=call["id"], name="send")

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        if request.tool_call["name"] != "send":
            return await handler(request)
        return self.wrap_tool_call(request, handler)


def step(first: str) -> Any:
    def play(messages: list[BaseMessage]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return "Done."
        return [(first, {"to": "ann"})]

    return play


def build(case: str, order: str, body: Body, saver: Any, store: Any, *, kill_after: bool) -> Any:
    agent_tools, live = tools(body)
    first = "draft" if case == "redirect" else "send"
    other: Any
    if case == "swap":
        other = SwapToLive(live)
    elif case == "serve":
        other = ServeSend(body)
    else:
        other = HumanInTheLoopMiddleware(interrupt_on={"draft": True})
        agent_tools = [live, agent_tools[1]]  # the live send is the agent's own here
    guard = ReplayGuardMiddleware(tools=POLICY)
    middleware = [guard, other] if order == "guard-first" else [other, guard]
    if kill_after:
        middleware.insert(0, KillAfter())
    return create_agent(
        ScriptedChatModel(script=[step(first)] * 5),
        agent_tools,
        middleware=middleware,
        checkpointer=saver,
        store=store,
    )


REDIRECT = {"type": "edit", "edited_action": {"name": "send", "args": {"to": "ann"}}}


def main() -> None:
    case, order, phase, root = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    mode = sys.argv[5] if len(sys.argv) > 5 else "sync"
    body = Body(root, kill=phase == "run")
    config = {"configurable": {"thread_id": f"{case}-{order}"}}
    first = {"messages": [HumanMessage("message ann")]}
    status, out = "done", None
    try:
        if mode == "sync":
            saver = SqliteSaver(sqlite3.connect(root / "checkpoints.db", check_same_thread=False))
            store = SqliteStore(sqlite3.connect(root / "store.db", check_same_thread=False))
            store.setup()
            agent = build(case, order, body, saver, store, kill_after=phase == "run-after")
            if not phase.startswith("run"):
                out = agent.invoke(None, config, durability="sync")
            else:
                out = agent.invoke(first, config, durability="sync")
                if agent.get_state(config).interrupts:  # the review of the redirect
                    resume = Command(resume={"decisions": [REDIRECT]})
                    out = agent.invoke(resume, config, durability="sync")
        else:
            out = asyncio.run(_arun(case, order, phase, root, body, config, first))
    except Exception as exc:
        status = type(exc).__name__
    texts = [m.text for m in (out or {}).get("messages", [])]
    print(json.dumps({"status": status, "texts": texts}))


async def _arun(
    case: str, order: str, phase: str, root: Path, body: Body, config: Any, first: Any
) -> Any:
    """`main`'s turn through `ainvoke`, on the async SQLite checkpointer and store."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    async with (
        AsyncSqliteSaver.from_conn_string(str(root / "checkpoints.db")) as saver,
        AsyncSqliteStore.from_conn_string(str(root / "store.db")) as store,
    ):
        await store.setup()
        agent = build(case, order, body, saver, store, kill_after=phase == "run-after")
        if not phase.startswith("run"):
            return await agent.ainvoke(None, config, durability="sync")
        out = await agent.ainvoke(first, config, durability="sync")
        if (await agent.aget_state(config)).interrupts:  # the review of the redirect
            resume = Command(resume={"decisions": [REDIRECT]})
            out = await agent.ainvoke(resume, config, durability="sync")
        return out


if __name__ == "__main__":
    main()
