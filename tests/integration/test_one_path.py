"""One path per call (issue 37 item 3): a call handed down to the middlewares inside the guard
is decided once, by the hook; the copy of the tool that gets it runs that decision."""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ToolRetryMiddleware
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import InjectedState, ToolNode, ToolRuntime
from langgraph.runtime import Runtime
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import ReplayGuard, ReplayGuardMiddleware
from langgraph_replay_guard.integrations import tool_node
from langgraph_replay_guard.testing import ScriptedChatModel

os.environ["LANGSMITH_TRACING"] = "false"


def _agent(path: Path, inner: AgentMiddleware[Any, Any]) -> Any:
    @tool
    def send(to: str) -> str:
        """Send a note."""
        with path.open("a") as file:
            file.write(f"{to}\n")
        return f"sent to {to}"

    model = ScriptedChatModel(
        script=[[("send", {"to": "ann"})], lambda m: "done" if m[-1].type == "tool" else "?"]
    )
    guard = ReplayGuardMiddleware({"tools": {"send": "unsafe"}}, store=InMemoryStore())
    return create_agent(model, [send], middleware=[guard, inner], checkpointer=InMemorySaver())


def _counting_decides(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the guard's decisions of a tool call: each one reads its channel's reducer once."""
    decided: list[str] = []
    reads = tool_node.channel_without_reducer

    def counted(*args: Any, **kwargs: Any) -> Any:
        decided.append("decide")
        return reads(*args, **kwargs)

    monkeypatch.setattr(tool_node, "channel_without_reducer", counted)
    return decided


class _Redact(AgentMiddleware[Any, Any]):
    """Changes the call on its way down, as PII redaction does."""

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        call = {**request.tool_call, "args": {"to": "[name]"}}
        return handler(request.override(tool_call=call))


def test_a_call_handed_down_unchanged_is_decided_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effects = tmp_path / "effects.txt"
    agent = _agent(effects, ToolRetryMiddleware(max_retries=0))
    decided = _counting_decides(monkeypatch)
    out = agent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t"}})
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.text for m in answers] == ["sent to ann"]
    assert effects.read_text() == "ann\n"
    # The hook decides; the copy of the tool that runs below ToolRetryMiddleware runs the
    # hook's decision instead of deciding the call a second time.
    assert decided == ["decide"]


def test_a_call_changed_on_its_way_down_is_decided_where_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effects = tmp_path / "effects.txt"
    agent = _agent(effects, _Redact())
    decided = _counting_decides(monkeypatch)
    out = agent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t"}})
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.text for m in answers] == ["sent to [name]"]
    assert effects.read_text() == "[name]\n"
    # Another call than the model's: decided again where it runs, as it arrives.
    assert decided == ["decide", "decide"]


_PACKAGE = "langgraph_replay_guard."


def _layer(module: str) -> str:
    """The layer of a package module, as ARCHITECTURE.md draws them."""
    if module == "integrations.middleware":
        return "facade"
    if module.split(".")[0] in {"decisions", "policy", "replay", "errors"}:
        return "core"
    return "I/O" if module.startswith("storage.") else "adapter"


def _tool_call_walks(turn: Any) -> list[list[str]]:
    """The package modules each `wrap_tool_call` of a turn entered, in order (one per stay)."""
    walks: list[list[str]] = []
    local = threading.local()

    def profile(frame: Any, event: str, arg: Any) -> None:
        name = frame.f_globals.get("__name__", "")
        if event not in ("call", "return") or not name.startswith(_PACKAGE):
            return
        module = name.removeprefix(_PACKAGE)
        entry = getattr(local, "entry", None)
        if entry is None:
            if event == "call" and frame.f_code.co_name == "wrap_tool_call":
                local.entry, local.walk = frame, [module]
                walks.append(local.walk)
        elif event == "return" and frame is entry:
            local.entry = None
        elif event == "call" and module != "testing" and local.walk[-1] != module:
            local.walk.append(module)

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        turn()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return walks


def test_a_call_with_no_ledger_is_one_decide_one_run_one_record() -> None:
    """The middleware's walk of an allowed call with no ledger enters each layer once.

    Down from the hook to the adapter, which decides (the batch was planned at the model
    call) and runs the tool; into the core once, to build the call's event and write; back
    to the adapter, which sends it. No plan driver, no ledger gate (issue 37 item 3).
    """

    @tool
    def lookup(id: str) -> str:
        """Look a customer up."""
        return f"{id}: premium"

    model = ScriptedChatModel(
        script=[lambda m: "done" if m[-1].type == "tool" else [("lookup", {"id": "P1"})]] * 4
    )
    agent = create_agent(model, [lookup], middleware=[ReplayGuardMiddleware()])

    def turn() -> Any:
        return agent.invoke({"messages": [HumanMessage("who is P1?")]})

    turn()  # the first turn learns the agent's tools
    (walk,) = _tool_call_walks(turn)
    layers = [layer for layer, _ in itertools.groupby(_layer(module) for module in walk)]
    assert layers == ["facade", "adapter", "core", "adapter"], walk
    assert "integrations.ledger_gate" not in walk
    assert len(set(walk)) <= 10, walk  # issue 37: no more than 10 files


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_node_wrapper_inside_the_guard_still_runs_on_the_short_path(driver: str) -> None:
    """A `ToolNode` given only `awrap_tool_call` (or only `wrap_tool_call`) keeps it under the
    guard: the call with no ledger goes through the node's own wrapper, which here hands the
    tool a changed state (langgraph-prebuilt's `test_wrapper_state_override_reaches_tool`)."""

    @tool
    def read_note(note: Annotated[str, InjectedState("note")], runtime: ToolRuntime) -> str:
        """Return the note from the injected state and from the tool runtime."""
        return f"InjectedState={note} ToolRuntime={runtime.state['note']}"

    def new_note(request: Any) -> Any:
        return request.override(state={**request.state, "note": "new"})

    def wrap(request: Any, execute: Any) -> Any:
        return execute(new_note(request))

    async def awrap(request: Any, execute: Any) -> Any:
        return await execute(new_note(request))

    call = {"name": "read_note", "args": {}, "id": "call_1"}
    state = {"messages": [AIMessage("", tool_calls=[call])], "note": "old"}
    config: Any = {"configurable": {"__pregel_runtime": Runtime()}}
    if driver == "sync":
        node = ReplayGuard().wrap(ToolNode([read_note], wrap_tool_call=wrap))
        out = node.invoke(state, config)
    else:
        node = ReplayGuard().wrap(ToolNode([read_note], awrap_tool_call=awrap))
        out = asyncio.run(node.ainvoke(state, config))
    assert out["messages"][0].content == "InjectedState=new ToolRuntime=new"
