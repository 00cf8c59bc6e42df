"""Issue 34 item 6: a guard channel declared without its reducer is an error, not a silent no-op.

`replay_guard: NotRequired[dict | None]` (no `merge_guard_state`), or the reducer not last in
`Annotated[...]`, makes LangGraph build a `LastValue` channel: each call's update replaced the
last, a 10-call loop ran to the end with no stop and no warning. The guard now reads the
running graph's channel at its first call and raises, naming the line to write, before any tool
runs: TypedDict, pydantic and dataclass states, `guard.wrap` and the middleware (first or last).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated, Any, NotRequired, Optional

import pytest
from langchain.agents import AgentState, create_agent
from langchain.agents.middleware import ModelCallLimitMiddleware
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import START, StateGraph, add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import BaseModel
from typing_extensions import TypedDict

from langgraph_replay_guard import ReplayGuard, merge_guard_state
from langgraph_replay_guard.testing import ScriptedChatModel

LOOP = 10
ERROR = r"'replay_guard' channel has no merge_guard_state reducer \(LangGraph built it as LastValue"


class _NoReducer(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    replay_guard: NotRequired[dict[str, Any] | None]


class _ReducerNotLast(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    replay_guard: NotRequired[Annotated[dict[str, Any] | None, merge_guard_state, "the guard"]]


class _PydanticNoReducer(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages]
    replay_guard: Optional[dict[str, Any]] = None  # noqa: UP045 (as users write it)


class _PydanticWithReducer(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages]
    replay_guard: Annotated[Optional[dict[str, Any]], merge_guard_state] = None  # noqa: UP045


@dataclass
class _DataclassNoReducer:
    messages: Annotated[list[AnyMessage], add_messages]
    replay_guard: Optional[dict[str, Any]] = None  # noqa: UP045


class _AgentStateNoReducer(AgentState[Any]):
    replay_guard: NotRequired[dict[str, Any] | None]


def _lookup(runs: list[str]) -> BaseTool:
    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        runs.append(q)
        return "the same answer"

    return lookup


def _messages(state: Any) -> list[Any]:
    return list(state["messages"] if isinstance(state, dict) else state.messages)


def _graph(state: Any, runs: list[str], guard: ReplayGuard) -> Any:
    model = ScriptedChatModel.looping("lookup", {"q": "x"}, times=LOOP)

    def agent(s: Any) -> dict[str, Any]:
        return {"messages": [model.invoke([guard.system_prompt(s), *_messages(s)])]}

    builder = StateGraph(state)
    builder.add_node("agent", agent)
    builder.add_node("tools", guard.wrap(ToolNode([_lookup(runs)])))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_conditional_edges("tools", guard.route_after_tools("agent"))
    return builder.compile()


@pytest.mark.parametrize(
    "state", [_NoReducer, _ReducerNotLast, _PydanticNoReducer, _DataclassNoReducer]
)
def test_wrap_refuses_a_channel_without_the_reducer_before_any_tool_runs(state: Any) -> None:
    runs: list[str] = []
    graph = _graph(state, runs, ReplayGuard())
    with pytest.raises(ValueError, match=ERROR) as raised:
        graph.invoke({"messages": [HumanMessage("go")]}, {"recursion_limit": 100})
    assert runs == []
    text = str(raised.value)  # the line to write, for each kind of state
    assert "replay_guard: NotRequired[Annotated[dict[str, Any] | None, merge_guard_state]]" in text
    assert "replay_guard: Annotated[dict[str, Any] | None, merge_guard_state] = None" in text


def test_wrap_refuses_it_in_async_runs_too() -> None:
    runs: list[str] = []
    graph = _graph(_NoReducer, runs, ReplayGuard())
    with pytest.raises(ValueError, match=ERROR):
        asyncio.run(graph.ainvoke({"messages": [HumanMessage("go")]}, {"recursion_limit": 100}))
    assert runs == []


def test_a_pydantic_state_with_the_reducer_stops_the_loop() -> None:
    runs: list[str] = []
    guard = ReplayGuard()
    out = _graph(_PydanticWithReducer, runs, guard).invoke(
        {"messages": [HumanMessage("go")]}, {"recursion_limit": 100}
    )
    assert runs == ["x"]  # the repeats were answered, and the run stopped
    assert guard.inspect(out["replay_guard"]).stop_reason == "repeat_limit"


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
@pytest.mark.parametrize("guard_at", ["alone", "first", "last"])
def test_create_agent_refuses_a_state_schema_that_redeclares_the_channel(
    guard_at: str, run: str
) -> None:
    # At the first model call, before the model is called: `create_agent` merges the
    # user's schema last, and tells a middleware nothing when it builds the agent.
    runs: list[str] = []
    guard = ReplayGuard().middleware()
    other = ModelCallLimitMiddleware(run_limit=50)
    middleware = {"alone": [guard], "first": [guard, other], "last": [other, guard]}[guard_at]
    model = ScriptedChatModel.looping("lookup", {"q": "x"}, times=LOOP)
    agent = create_agent(
        model, [_lookup(runs)], middleware=middleware, state_schema=_AgentStateNoReducer
    )
    inputs = {"messages": [HumanMessage("go")]}
    with pytest.raises(ValueError, match=ERROR) as raised:
        agent.invoke(inputs) if run == "invoke" else asyncio.run(agent.ainvoke(inputs))
    assert "replay_guard: NotRequired[Annotated[dict[str, Any] | None, merge_guard_state]]" in str(
        raised.value
    )
    assert runs == []
    assert model.calls == 0


class _AgentStateWithReducer(AgentState[Any]):
    replay_guard: NotRequired[Annotated[dict[str, Any] | None, merge_guard_state]]


def test_create_agent_with_a_state_schema_that_declares_the_reducer_stops_the_loop() -> None:
    runs: list[str] = []
    model = ScriptedChatModel.looping("lookup", {"q": "x"}, times=LOOP)
    agent = create_agent(
        model,
        [_lookup(runs)],
        middleware=[ReplayGuard().middleware()],
        state_schema=_AgentStateWithReducer,
    )
    out = agent.invoke({"messages": [HumanMessage("go")]})
    assert runs == ["x"]
    assert out["replay_guard"]["stop"]["reason"] == "repeat_limit"
