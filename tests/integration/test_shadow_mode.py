"""Shadow mode: every decision made and reported, nothing denied, stopped or reminded."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import (
    GUARD_CHANNEL,
    LoopAbortedError,
    ReplayGuard,
    ReplayGuardCallbackHandler,
    ReplayGuardMiddleware,
    ReplayUnsafeError,
)
from langgraph_replay_guard.testing import ScriptedChatModel, agent_graph

os.environ["LANGSMITH_TRACING"] = "false"
pytestmark = pytest.mark.filterwarnings("ignore::langgraph_replay_guard.ReplayGuardWarning")

LOOP = 12  # a model asking for the same read again and again


def _lookup(runs: Counter[str]) -> Any:
    @tool
    def lookup(id: str) -> str:
        """Look a customer up."""
        runs["lookup"] += 1
        return f"{id}: premium plan"

    return lookup


def _shape(messages: list[Any]) -> list[tuple[Any, ...]]:
    """What a user reads of a run: each message's type, text, tool calls and status."""
    return [
        (
            type(m).__name__,
            m.text,
            tuple((c["name"], tuple(c["args"].items())) for c in getattr(m, "tool_calls", [])),
            getattr(m, "status", None),
        )
        for m in messages
    ]


class Traces(BaseCallbackHandler):
    """The guard's decision in each tool run's metadata, as a tracer records it."""

    def __init__(self) -> None:
        self.guard: list[dict[str, Any] | None] = []

    def on_tool_start(self, serialized: Any, input_str: str, **kwargs: Any) -> None:
        self.guard.append((kwargs.get("metadata") or {}).get("replay_guard"))


def _run(integration: str, mode: str | None) -> dict[str, Any]:
    """A looping model on one integration; `mode` None: no guard at all."""
    runs: Counter[str] = Counter()
    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=LOOP)
    tools = [_lookup(runs)]
    cfg: dict[str, Any] = {"configurable": {"thread_id": "t"}, "recursion_limit": 200}
    traces = Traces()
    cfg["callbacks"] = [traces]
    handler = None
    if integration == "middleware":
        middleware = [ReplayGuardMiddleware(mode=mode)] if mode else []
        graph = create_agent(model, tools, middleware=middleware, checkpointer=InMemorySaver())
        guard = middleware[0].guard if middleware else None
    elif integration == "wrap":
        guard = ReplayGuard(mode=mode) if mode else None
        graph = agent_graph(model, tools, guard=guard, checkpointer=InMemorySaver())
    else:
        graph = create_agent(model, tools, checkpointer=InMemorySaver())
        guard = None
        if mode:
            handler = ReplayGuardCallbackHandler(mode=mode)
            cfg["callbacks"].append(handler)
    inputs = {"messages": [HumanMessage("who is P1?")]}
    custom: list[dict[str, Any]] = []
    try:
        for chunk in graph.stream(inputs, cfg, stream_mode="custom"):
            if GUARD_CHANNEL in chunk:
                custom.append(chunk[GUARD_CHANNEL])
    except LoopAbortedError:
        pass  # enforcing, a callback handler ends a run that goes on by raising
    state = graph.get_state(cfg)
    if guard is not None:
        view = guard.inspect(state)
    elif handler is not None:
        view = handler.inspect("t")
    else:
        view = None
    return {
        "runs": runs,
        "model": model,
        "messages": state.values["messages"],
        "custom": custom,
        "view": view,
        "traces": traces.guard,
    }


INTEGRATIONS = ["middleware", "wrap", "callbacks"]


@pytest.mark.parametrize("integration", INTEGRATIONS)
def test_a_shadowed_loop_runs_as_without_the_guard(integration):
    plain = _run(integration, None)
    shadow = _run(integration, "shadow")
    assert plain["runs"]["lookup"] == LOOP
    assert shadow["runs"] == plain["runs"]
    assert shadow["model"].calls == plain["model"].calls
    assert _shape(shadow["messages"]) == _shape(plain["messages"])
    # No reminder reached the model (a guarded model node may add an empty system prompt).
    assert not any(shadow["model"].system_prompts)
    assert not any(plain["model"].system_prompts)


@pytest.mark.parametrize("integration", INTEGRATIONS)
def test_what_enforcing_would_have_done_is_reported_and_counted(integration):
    shadow = _run(integration, "shadow")
    enforced = _run(integration, "enforce")
    # Enforcing, the loop is stopped: that is what shadow mode reports instead.
    assert enforced["runs"]["lookup"] < LOOP
    reasons = Counter(event["reason"] for event in shadow["custom"])
    assert reasons["duplicate"] >= 1
    assert reasons["repeat_limit"] >= 1
    assert all(event["mode"] == "shadow" for event in shadow["custom"])
    view = shadow["view"]
    counts = {reason: (blocked, stopped) for reason, blocked, stopped in view.shadow}
    assert counts["duplicate"][0] >= 1
    assert counts["repeat_limit"][1] >= 1  # enforcing would have stopped the run
    assert view.stop is None
    assert view.reminder is None
    assert view.totals.blocked == 0
    assert enforced["view"].shadow == ()


def test_the_trace_of_a_shadowed_call_carries_what_enforcing_would_have_done():
    shadow = _run("middleware", "shadow")
    shadowed = [t["shadow"] for t in shadow["traces"] if t is not None and "shadow" in t]
    assert {"verdict": "deny", "reason": "duplicate"} in shadowed
    assert all(t["verdict"] == "allow" for t in shadow["traces"] if t is not None)


def test_shadow_mode_keeps_the_ledger_refusing_an_unknown_outcome():
    # A send that raised after its effect: its outcome is unknown. Shadow mode reports
    # decisions without acting on them, but never weakens replay safety.
    sent: list[str] = []

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        raise ConnectionError("connection dropped after the email went out")

    model = ScriptedChatModel(script=[[("send_email", {"to": "bob"})], "done"])
    guard = ReplayGuardMiddleware(mode="shadow", tools={"send_email": "unsafe"})
    agent = create_agent(
        model,
        [send_email],
        middleware=[guard],
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    cfg = {"configurable": {"thread_id": "send"}}
    with pytest.raises(ConnectionError):
        agent.invoke({"messages": [HumanMessage("email bob")]}, cfg)
    with pytest.raises(ReplayUnsafeError):
        agent.invoke(None, cfg)
    assert sent == ["bob"]


def test_the_control_counts_what_enforcing_would_have_done():
    ctl = ReplayGuard(mode="shadow").control()
    skips = []
    for _ in range(6):
        skip, reason = ctl.should_skip("lookup", {"id": "P1"})
        skips.append((skip, reason))
        ctl.record_success("lookup", {"id": "P1"}, "P1: premium plan")
    assert skips == [(False, None)] * 6
    counts = {reason: (blocked, stopped) for reason, blocked, stopped in ctl.inspect().shadow}
    assert counts["duplicate"][0] >= 1
    assert counts["repeat_limit"][1] >= 1


def test_without_shadow_mode_the_same_messages_are_not_the_unguarded_ones():
    plain = _run("middleware", None)
    enforced = _run("middleware", "enforce")
    assert _shape(enforced["messages"]) != _shape(plain["messages"])
    last = enforced["messages"][-1]
    assert isinstance(last, AIMessage)
    assert any(isinstance(m, ToolMessage) and m.status == "error" for m in enforced["messages"])
