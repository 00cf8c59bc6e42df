"""A call's identity at the seams: sub-agents, stacked guards, a middleware's retries (issue 32)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("deepagents", reason="the stacks extra: pip install -e '.[stacks]'")

from deepagents import create_deep_agent
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode, ToolRuntime, tools_condition
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import (
    GuardConfig,
    ReplayGuard,
    ReplayGuardMiddleware,
    ReplayGuardState,
    ReplayUnsafeError,
)
from langgraph_replay_guard.testing import ScriptedChatModel
from tests import async_run, warm_children

os.environ["LANGSMITH_TRACING"] = "false"

pytestmark = pytest.mark.filterwarnings("ignore::langgraph_replay_guard.ReplayGuardWarning")

CHILD = Path(__file__).with_name("proc_identity.py")
KEY = "replay_guard_idempotency_key"


def run(agent: Any, payload: Any, config: dict[str, Any], mode: str) -> Any:
    if mode == "sync":
        return agent.invoke(payload, config, durability="sync")
    return async_run.run(agent.ainvoke(payload, config, durability="sync"))


def sending_tool(sent: list[tuple[str, str | None]]) -> Any:
    """A `send` whose body records each run with the idempotency key it was given."""

    @tool
    def send(to: str, runtime: ToolRuntime) -> str:
        """Send a message."""
        sent.append((to, runtime.config.get("configurable", {}).get(KEY)))
        return f"sent to {to}"

    return send


def sub_step(messages: list[BaseMessage]) -> Any:
    """The sub-agent: send to Ann once, then answer."""
    if isinstance(messages[-1], ToolMessage):
        return "sub-agent done"
    return [("send", {"to": "ann"})]


def parent_steps(order: str) -> list[Any]:
    task = ("task", {"description": "Send it to Ann.", "subagent_type": "helper"})
    send = ("send", {"to": "ann"})
    return [[send], [task]] if order == "parent-first" else [[task], [send]]


def deep_agent(guard: ReplayGuard, send: Any, parent_script: list[Any], *, named: bool) -> Any:
    """A deep agent and a `helper` sub-agent, one guard and one store for both."""
    helper = {
        "name": "helper",
        "description": "Sends messages.",
        "system_prompt": "Send what you are asked to.",
        "tools": [send],
        "model": ScriptedChatModel(script=[sub_step] * 10),
        "middleware": [guard.middleware(name="helper") if named else guard.middleware()],
    }
    return create_deep_agent(
        ScriptedChatModel(script=parent_script, final="All sent."),
        [send],
        subagents=[helper],
        middleware=[guard.middleware(name="main") if named else guard.middleware()],
        checkpointer=InMemorySaver(),
    )


# -- seam 1: a sub-agent's call is not its parent's ------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("named", [False, True], ids=["unnamed", "named"])
@pytest.mark.parametrize("order", ["parent-first", "sub-first"])
def test_the_same_unsafe_send_by_parent_and_sub_agent_runs_twice(order, named, mode):
    sent: list[tuple[str, str | None]] = []
    guard = ReplayGuard(
        GuardConfig(toolkits=["deepagents"], tools={"send": "unsafe"}), store=InMemoryStore()
    )
    agent = deep_agent(guard, sending_tool(sent), parent_steps(order), named=named)
    config = {"configurable": {"thread_id": f"deep-{order}-{named}-{mode}"}}

    out = run(agent, {"messages": [HumanMessage("send it to Ann, twice")]}, config, mode)

    assert [to for to, _ in sent] == ["ann", "ann"]  # unguarded, the same: two sends
    assert out["messages"][-1].text == "All sent."


@pytest.mark.parametrize("order", ["parent-first", "sub-first"])
def test_an_idempotent_send_of_the_sub_agent_gets_its_own_key(order):
    sent: list[tuple[str, str | None]] = []
    guard = ReplayGuard(
        GuardConfig(toolkits=["deepagents"], tools={"send": "idempotent"}), store=InMemoryStore()
    )
    agent = deep_agent(guard, sending_tool(sent), parent_steps(order), named=False)
    config = {"configurable": {"thread_id": f"deep-key-{order}"}}

    agent.invoke({"messages": [HumanMessage("send it to Ann, twice")]}, config)

    assert len(sent) == 2
    keys = [key for _, key in sent]
    assert all(key and key.startswith("rg-") for key in keys)
    assert keys[0] != keys[1]  # the parent's key is never the sub-agent's


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_sibling_runs_of_one_sub_agent_each_send(mode):
    sent: list[tuple[str, str | None]] = []
    guard = ReplayGuard(
        GuardConfig(toolkits=["deepagents"], tools={"send": "unsafe", "task": "idempotent"}),
        store=InMemoryStore(),
    )
    task = ("task", {"description": "Send it to Ann.", "subagent_type": "helper"})
    # Two `task` calls in one message: two runs of the helper, with the same node path.
    agent = deep_agent(guard, sending_tool(sent), [[task, task]], named=True)
    config = {"configurable": {"thread_id": f"siblings-{mode}"}}

    out = run(agent, {"messages": [HumanMessage("send it to Ann, twice")]}, config, mode)

    assert [to for to, _ in sent] == ["ann", "ann"]
    assert out["messages"][-1].text == "All sent."


# -- seam 2: two guards stacked on one tool ---------------------------------------------------


def stacked_agent(
    store: InMemoryStore, sent: list[tuple[str, str | None]], order: str, **policy: Any
) -> Any:
    """An agent with two named guard middlewares, sharing the agent's store."""
    tools = {"send": "unsafe", **policy}
    library = ReplayGuardMiddleware(GuardConfig(tools=tools), name="library")
    app = ReplayGuardMiddleware(GuardConfig(tools=tools), name="app")
    guards = [library, app] if order == "library-first" else [app, library]
    model = ScriptedChatModel(script=[[("send", {"to": "ann"})]], final="Sent.")
    return create_agent(
        model, [sending_tool(sent)], middleware=guards, checkpointer=InMemorySaver(), store=store
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("order", ["library-first", "app-first"])
def test_two_named_guards_stacked_send_once_without_waiting(order, mode):
    sent: list[tuple[str, str | None]] = []
    store = InMemoryStore()
    agent = stacked_agent(store, sent, order)
    config = {"configurable": {"thread_id": f"stacked-{order}-{mode}"}}

    began = time.monotonic()
    out = run(agent, {"messages": [HumanMessage("send it to Ann")]}, config, mode)

    assert time.monotonic() - began < 5  # no wait for the other guard's claim (10 s)
    assert sent == [("ann", None)]
    assert out["messages"][-1].text == "Sent."
    rows = store.search(("replay_guard", "ledger", f"stacked-{order}-{mode}"))
    assert sorted(r.value["status"] for r in rows) == ["completed", "completed"]  # one each
    # Resuming again replays: still one send.
    run(agent, None, config, mode)
    assert len(sent) == 1


def test_two_named_idempotent_guards_hand_the_tool_one_stable_key():
    sent: list[tuple[str, str | None]] = []
    agent = stacked_agent(InMemoryStore(), sent, "library-first", send="idempotent")
    agent.invoke({"messages": [HumanMessage("send it")]}, {"configurable": {"thread_id": "k"}})
    [(_, key)] = sent
    assert key is not None
    assert key.startswith("rg-")


def _guarded_node_graph(tools_node: Any, model: ScriptedChatModel, store: InMemoryStore) -> Any:
    def agent(state: ReplayGuardState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(ReplayGuardState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools_node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=InMemorySaver(), store=store)


def test_one_label_stacked_twice_is_one_claim():
    sent: list[tuple[str, str | None]] = []
    store = InMemoryStore()
    config = GuardConfig(tools={"send": "unsafe"})
    inner, outer = ReplayGuard(config, store=store), ReplayGuard(config, store=store)
    # `guard.wrap` of a ToolNode whose wrapper is already another guard's: the same label.
    node = outer.wrap(inner.wrap(ToolNode([sending_tool(sent)])))
    model = ScriptedChatModel(script=[[("send", {"to": "ann"})]], final="Sent.")
    graph = _guarded_node_graph(node, model, store)

    began = time.monotonic()
    out = graph.invoke(
        {"messages": [HumanMessage("send it")]},
        {"configurable": {"thread_id": "same-label"}},
        durability="sync",
    )

    assert time.monotonic() - began < 5
    assert sent == [("ann", None)]
    assert out["messages"][-1].text == "Sent."
    [row] = store.search(("replay_guard", "ledger", "same-label"))  # the outer claim stands
    assert row.value["status"] == "completed"


def _child(phase: str, order: str, root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LANGSMITH_TRACING": "false"}
    return warm_children.run(
        [sys.executable, str(CHILD), phase, order, str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.parametrize("order", ["library-first", "app-first"])
def test_two_stacked_guards_killed_inside_the_body_refuse_to_send_again(order, tmp_path):
    first = _child("run", order, tmp_path)
    assert first.returncode == -9, first.stderr[-2000:]  # SIGKILL inside the tool body
    resumed = _child("resume", order, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    report = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert report["error"] == "ReplayUnsafeError", report
    assert report["after_resolve"] == "Sent."  # both guards' rows settled by one resolve
    assert (tmp_path / "sends").read_text().splitlines() == ["ann"]  # one send, no rerun


def test_a_sub_agent_killed_inside_its_send_is_not_rerun_by_a_rerun_of_task(tmp_path):
    # The parent's `task` is idempotent, so the resume runs it again, and the sub-agent
    # continues from its own checkpoint. The enclosing `task` call's identity is the same in
    # the new process, so the sub-agent's send finds its own row: it stops, not sends.
    first = _child("run", "deep", tmp_path)
    assert first.returncode == -9, first.stderr[-2000:]
    resumed = _child("resume", "deep", tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    report = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert report["error"] == "ReplayUnsafeError", report
    assert "its outcome is unknown" in report["text"]
    assert (tmp_path / "sends").read_text().splitlines() == ["ann"]


# -- seam 8: a middleware's corrected retry under one tool_call_id ----------------------------


class RetryWithAddress(AgentMiddleware):
    """Retries a call the tool refused with corrected arguments, under the same tool_call_id."""

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        result = handler(request)
        if isinstance(result, ToolMessage) and result.text.startswith("unknown recipient"):
            call = request.tool_call
            fixed = {**call, "args": {**call["args"], "to": call["args"]["to"] + "@example.com"}}
            return handler(request.override(tool_call=fixed))
        return result

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        result = await handler(request)
        if isinstance(result, ToolMessage) and result.text.startswith("unknown recipient"):
            call = request.tool_call
            fixed = {**call, "args": {**call["args"], "to": call["args"]["to"] + "@example.com"}}
            return await handler(request.override(tool_call=fixed))
        return result


def retry_agent(replay: str, order: str, runs: list[str], store: InMemoryStore) -> Any:
    @tool
    def send(to: str) -> str:
        """Send a message to an address."""
        runs.append(to)
        if "@" not in to:
            return f"unknown recipient {to}"  # a known outcome: nothing was sent
        return f"sent to {to}"

    guard = ReplayGuardMiddleware(GuardConfig(tools={"send": replay}))
    retry = RetryWithAddress()
    middleware = [guard, retry] if order == "guard-first" else [retry, guard]
    model = ScriptedChatModel(script=[[("send", {"to": "ann"})]], final="Sent.")
    return create_agent(
        model, [send], middleware=middleware, checkpointer=InMemorySaver(), store=store
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("order", ["guard-first", "guard-last"])
@pytest.mark.parametrize("replay", ["pure", "unsafe", "idempotent"])
def test_a_corrected_retry_under_one_tool_call_id_runs_and_replays(replay, order, mode):
    runs: list[str] = []
    store = InMemoryStore()
    agent = retry_agent(replay, order, runs, store)
    config = {"configurable": {"thread_id": f"retry-{replay}-{order}-{mode}"}}

    out = run(agent, {"messages": [HumanMessage("send it to Ann")]}, config, mode)

    assert runs == ["ann", "ann@example.com"]  # no ReplayConflictError
    assert out["messages"][-1].text == "Sent."
    [answer] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert answer.text == "sent to ann@example.com"
    # Run the tools step again from history (same ids, same arguments): each variant
    # replays its own outcome; neither body runs again (a pure one's too: it is recorded).
    asked = next(s for s in agent.get_state_history(config) if s.next == ("tools",))
    again = run(agent, None, asked.config, mode)
    assert runs == ["ann", "ann@example.com"]
    [answer] = [m for m in again["messages"] if isinstance(m, ToolMessage)]
    assert answer.text == "sent to ann@example.com"


@pytest.mark.parametrize("order", ["guard-first", "guard-last"])
def test_a_retry_after_an_unknown_outcome_stays_an_error(order):
    runs: list[str] = []

    @tool
    def send(to: str) -> str:
        """Send a message to an address."""
        runs.append(to)
        if "@" not in to:
            msg = "connection reset after the request was sent"
            raise ConnectionError(msg)
        return f"sent to {to}"

    class RetryOnError(AgentMiddleware):
        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            try:
                return handler(request)
            except ConnectionError:
                call = request.tool_call
                fixed = {**call, "args": {"to": "ann@example.com"}}
                return handler(request.override(tool_call=fixed))

    guard = ReplayGuardMiddleware(GuardConfig(tools={"send": "unsafe"}))
    middleware = [guard, RetryOnError()] if order == "guard-first" else [RetryOnError(), guard]
    model = ScriptedChatModel(script=[[("send", {"to": "ann"})]], final="Sent.")
    agent = create_agent(
        model, [send], middleware=middleware, checkpointer=InMemorySaver(), store=InMemoryStore()
    )
    with pytest.raises(ReplayUnsafeError, match="unknown outcome"):
        agent.invoke(
            {"messages": [HumanMessage("send it")]},
            {"configurable": {"thread_id": f"unknown-{order}"}},
            durability="sync",
        )
    assert runs == ["ann"]  # the corrected call did not run while the first one's is unknown


class FanOut(AgentMiddleware):
    """Sends one call to several recipients as one sub-call each, under its tool_call_id."""

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        call = request.tool_call
        answers = []
        for to in call["args"]["to"].split(","):
            one = {**call, "args": {**call["args"], "to": to}}
            answers.append(handler(request.override(tool_call=one)).text)
        return ToolMessage("; ".join(answers), tool_call_id=call["id"], name=call["name"])


@pytest.mark.parametrize("order", ["guard-first", "guard-last"])
def test_a_fan_out_under_one_tool_call_id_sends_once_per_recipient(order):
    runs: list[str] = []

    @tool
    def send(to: str) -> str:
        """Send a message."""
        runs.append(to)
        return f"sent to {to}"

    guard = ReplayGuardMiddleware(GuardConfig(tools={"send": "unsafe"}))
    middleware = [guard, FanOut()] if order == "guard-first" else [FanOut(), guard]
    model = ScriptedChatModel(script=[[("send", {"to": "ann,bob"})]], final="Sent.")
    agent = create_agent(
        model, [send], middleware=middleware, checkpointer=InMemorySaver(), store=InMemoryStore()
    )
    config = {"configurable": {"thread_id": f"fan-out-{order}"}}
    agent.invoke({"messages": [HumanMessage("tell both")]}, config, durability="sync")
    assert runs == ["ann", "bob"]

    asked = next(s for s in agent.get_state_history(config) if s.next == ("tools",))
    again = agent.invoke(None, asked.config, durability="sync")
    assert runs == ["ann", "bob"]  # each recipient's send replayed from its own row
    [answer] = [m for m in again["messages"] if isinstance(m, ToolMessage)]
    assert answer.text == "sent to ann; sent to bob"
