"""The guard's decisions as tracers see them: tool runs with metadata and tags."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import (
    LoopAbortedError,
    ReplayGuard,
    ReplayGuardCallbackHandler,
    ReplayGuardMiddleware,
    ToolCallBlockedError,
)
from langgraph_replay_guard.testing import ScriptedChatModel, agent_graph

from .replay_graphs import asking_model, replay_graph

os.environ["LANGSMITH_TRACING"] = "false"

pytestmark = pytest.mark.filterwarnings(
    "ignore:langgraph-replay-guard.*:langgraph_replay_guard.ReplayGuardWarning"
)


class ToolRunCollector(BaseCallbackHandler):
    """What a tracer records of tool runs: start (name, metadata, tags) and how each ended."""

    run_inline = True  # keep the order of events in async runs

    def __init__(self) -> None:
        self.runs: dict[uuid.UUID, dict[str, Any]] = {}

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: uuid.UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.runs[run_id] = {
            "name": serialized.get("name"),
            "guard": (metadata or {}).get("replay_guard"),
            "tags": [t for t in tags or [] if t.startswith("replay_guard")],
            "tool_call_id": kwargs.get("tool_call_id"),
            "output": None,
            "error": None,
        }

    def on_tool_end(self, output: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self.runs[run_id]["output"] = output

    def on_tool_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self.runs[run_id]["error"] = error

    def decisions(self) -> list[tuple[str | None, str | None, int | None]]:
        """(verdict, reason, count) of every tool run, in order."""
        return [
            (g and g["verdict"], g and g["reason"], g and g["count"])
            for g in (run["guard"] for run in self.runs.values())
        ]

    def ended(self) -> bool:
        return all(r["output"] is not None or r["error"] is not None for r in self.runs.values())


LOOP = [
    ("allow", None, 1),
    ("deny", "duplicate", 2),
    ("deny", "duplicate", 3),
    ("abort", "repeat_limit", 4),
]


@tool
def lookup(id: str) -> str:
    """Read a record."""
    return f"record {id}"


def _invoke(graph: Any, inputs: Any, config: dict[str, Any], mode: str, **kwargs: Any) -> Any:
    if mode == "async":
        return asyncio.run(graph.ainvoke(inputs, config, **kwargs))
    return graph.invoke(inputs, config, **kwargs)


def _traced_config(collector: BaseCallbackHandler, *handlers: Any) -> dict[str, Any]:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    return {"configurable": {"thread_id": thread}, "callbacks": [*handlers, collector]}


def _looping() -> ScriptedChatModel:
    return ScriptedChatModel.looping("lookup", {"id": "P"}, times=8)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_custom_graph_shows_every_call_with_its_decision(mode):
    collector = ToolRunCollector()
    graph = agent_graph(_looping(), [lookup], guard=ReplayGuard(), checkpointer=InMemorySaver())
    _invoke(graph, {"messages": [HumanMessage("x")]}, _traced_config(collector), mode)
    assert collector.decisions() == LOOP
    assert collector.ended()
    runs = list(collector.runs.values())
    assert [r["tags"] for r in runs] == [[f"replay_guard:{v}"] for v, _, _ in LOOP]
    assert {r["name"] for r in runs} == {"lookup"}
    assert {(r["guard"]["replay"], r["guard"]["ledger"]) for r in runs} == {("pure", "none")}
    # A blocked call's run ends with what the model was told.
    assert "Not executed" in str(runs[1]["output"].content)
    assert runs[1]["tool_call_id"] is not None


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_create_agent_middleware_shows_every_call_with_its_decision(mode):
    collector = ToolRunCollector()
    agent = create_agent(
        _looping(), [lookup], middleware=[ReplayGuardMiddleware()], checkpointer=InMemorySaver()
    )
    _invoke(agent, {"messages": [HumanMessage("x")]}, _traced_config(collector), mode)
    assert collector.decisions() == LOOP
    assert collector.ended()
    assert list(collector.runs.values())[-1]["tags"] == ["replay_guard:abort"]


def test_an_abort_with_exit_behavior_error_is_an_errored_tool_run():
    collector = ToolRunCollector()
    agent = create_agent(
        _looping(), [lookup], middleware=[ReplayGuardMiddleware(exit_behavior="error")]
    )
    with pytest.raises(LoopAbortedError):
        agent.invoke({"messages": [HumanMessage("x")]}, _traced_config(collector))
    assert collector.decisions() == LOOP
    assert isinstance(list(collector.runs.values())[-1]["error"], LoopAbortedError)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_ledger_replay_shows_as_a_replayed_tool_run(mode):
    sent: list[str] = []

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"Email sent to {to}"

    guard = ReplayGuard(tools={"send_email": "unsafe"}, store=InMemoryStore())
    model = asking_model([("send_email", {"to": "ann@example.com"})])
    graph = replay_graph(guard, model, [send_email], checkpointer=InMemorySaver())
    collector = ToolRunCollector()
    config = _traced_config(collector)
    _invoke(graph, {"messages": [HumanMessage("email Ann")]}, config, mode, durability="sync")
    asked = next(s for s in graph.get_state_history(config) if s.next == ("tools",))
    # Run the tools node again on the same tool call: the ledger answers it.
    fork = {**asked.config, "callbacks": [collector]}
    _invoke(graph, None, fork, mode, durability="sync")
    assert sent == ["ann@example.com"]
    first, again = (r["guard"] for r in collector.runs.values())
    assert first == {
        "verdict": "allow",
        "reason": None,
        "count": 1,
        "replay": "unsafe",
        "source": "tools",
        "ledger": "claimed",
    }
    assert again == {**first, "verdict": "replay", "reason": "replayed", "ledger": "replayed"}
    assert list(collector.runs.values())[1]["tags"] == ["replay_guard:replay"]
    assert collector.ended()


def test_without_callbacks_the_run_carries_no_decision():
    seen: list[Any] = []

    def spy(request: Any, execute: Any) -> Any:
        seen.append(request.tool)
        return execute(request)

    node = ReplayGuard().wrap(ToolNode([lookup], wrap_tool_call=spy))
    graph = _graph_with_node(node)
    call = AIMessage(
        content="", id="ai-1", tool_calls=[{"name": "lookup", "args": {"id": "P"}, "id": "c1"}]
    )
    inputs = {"messages": [HumanMessage("x", id="h"), call]}
    graph.invoke(inputs, {"configurable": {"thread_id": "a"}})
    assert "replay_guard" not in (seen[0].metadata or {}), "no tracer: no tracing work"
    collector = ToolRunCollector()
    graph.invoke(inputs, _traced_config(collector))
    [run] = collector.runs.values()
    assert run["guard"]["verdict"] == "allow"


def _graph_with_node(node: ToolNode) -> Any:
    from langgraph.graph import START, StateGraph

    from langgraph_replay_guard import ReplayGuardState

    builder = StateGraph(ReplayGuardState)
    builder.add_node("tools", node)
    builder.add_edge(START, "tools")
    return builder.compile()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_callback_handler_refusals_show_as_errored_tool_runs(mode):
    collector = ToolRunCollector()
    agent = create_agent(_looping(), [lookup], checkpointer=InMemorySaver())
    handler = ReplayGuardCallbackHandler()
    config = _traced_config(collector, handler)  # the guard first, as recommended
    with pytest.raises(LoopAbortedError):
        _invoke(agent, {"messages": [HumanMessage("x")]}, config, mode)
    runs = list(collector.runs.values())
    # The allowed call is the tool's own run: a callback cannot add metadata to it.
    assert runs[0]["guard"] is None
    assert runs[0]["error"] is None
    # Each refusal is an errored tool run of its own, carrying the decision.
    assert collector.decisions()[1:] == LOOP[1:]
    refused = [r["error"] for r in runs[1:]]
    assert all(isinstance(e, ToolCallBlockedError) for e in refused)
    assert refused[0].metadata == {"replay_guard": runs[1]["guard"]}
    assert runs[1]["tags"] == ["replay_guard:deny"]


def test_guarded_tool_node_abort_with_exit_behavior_error_is_an_errored_tool_run():
    node = ReplayGuard(exit_behavior="error").wrap(ToolNode([lookup]))
    calls = [{"name": "lookup", "args": {"id": "P"}, "id": f"c{i}"} for i in range(4)]
    inputs = {"messages": [HumanMessage("x", id="h"), AIMessage("", id="ai", tool_calls=calls)]}
    collector = ToolRunCollector()
    with pytest.raises(LoopAbortedError):
        _graph_with_node(node).invoke(inputs, _traced_config(collector))
    # The calls run in parallel and the first stop ends the node: each call that started
    # shows as an errored tool run; the aborting one names its reason, its siblings "stopped".
    runs = list(collector.runs.values())
    assert runs
    for run in runs:
        reason = "repeat_limit" if run["tool_call_id"] == "c3" else "stopped"
        assert (run["guard"]["verdict"], run["guard"]["reason"]) == ("abort", reason)
        assert isinstance(run["error"], LoopAbortedError)
