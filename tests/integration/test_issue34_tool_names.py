"""Issue 34 item 4: `strict_tool_names` stops only when the guard knows every tool of the graph.

One guard over two `ToolNode`s, and `create_agent` with a middleware that serves a tool itself,
are correct setups: the configured name is a tool the guard did not see yet (or never sees). They
run, with one `ReplayGuardWarning` naming both names; a typo in an agent whose tools the guard
knows all of is still an error before any tool runs.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import GuardConfig, ReplayGuard, ReplayGuardState, ReplayGuardWarning
from langgraph_replay_guard.testing import ScriptedChatModel

# (the read the guard wraps first, the write the configuration names)
PAIRS = [("get_order", "set_order"), ("send_email", "send_emails"), ("read_file", "write_file")]


def _tool(name: str, effects: list[str]) -> BaseTool:
    def body(key: str) -> str:
        effects.append(f"{name}:{key}")
        return f"{name} done for {key}"

    return tool(name, description=f"The {name} tool.")(body)


def _near_miss_warnings(caught: list[warnings.WarningMessage], name: str) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, ReplayGuardWarning)
        and f"has a policy for {name!r}" in str(w.message)
    ]


def _two_node_graph(guard: ReplayGuard, model: Any, read: BaseTool, write: BaseTool) -> Any:
    """A model node, then the read node or the write node by the call's name: one guard."""
    reads = guard.wrap(_node(read, "reads"))  # the node without the configured name first
    writes = guard.wrap(_node(write, "writes"))

    def agent(state: ReplayGuardState) -> dict[str, Any]:
        return {"messages": [model.invoke([guard.system_prompt(state), *state["messages"]])]}

    def route(state: ReplayGuardState) -> str:
        last = state["messages"][-1]
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return END
        return "writes" if last.tool_calls[0]["name"] == write.name else "reads"

    builder = StateGraph(ReplayGuardState)
    builder.add_node("agent", agent)
    builder.add_node("reads", reads)
    builder.add_node("writes", writes)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["reads", "writes", END])
    builder.add_conditional_edges("reads", guard.route_after_tools("agent"))
    builder.add_conditional_edges("writes", guard.route_after_tools("agent"))
    return builder.compile(checkpointer=InMemorySaver())


def _node(each: BaseTool, name: str) -> Any:
    from langgraph.prebuilt import ToolNode

    return ToolNode([each], name=name)


@pytest.mark.parametrize(("read", "write"), PAIRS)
def test_one_guard_over_two_tool_nodes_runs_with_one_warning(read: str, write: str) -> None:
    effects: list[str] = []
    guard = ReplayGuard(GuardConfig(tools={write: "unsafe"}), store=InMemoryStore())
    script = [[(read, {"key": "a"})], [(write, {"key": "a"})]]
    model = ScriptedChatModel(script=script)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph = _two_node_graph(guard, model, _tool(read, effects), _tool(write, effects))
        graph.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t"}})
    assert effects == [f"{read}:a", f"{write}:a"]
    (text,) = _near_miss_warnings(caught, write)  # once, naming both names
    assert f"did you mean {read!r}?" in text
    # The policy applies: the write is ledgered as unsafe.
    rows = guard.store.search(("replay_guard", "ledger", "t")) if guard.store else []
    assert {r.value["tool"]: r.value["replay"] for r in rows} == {read: "pure", write: "unsafe"}


class _OrderDesk(AgentMiddleware[Any, Any]):
    """Offers `set_order` to the model and answers its calls itself (no tools node has it)."""

    def __init__(self, effects: list[str]) -> None:
        super().__init__()
        self.effects = effects
        self.offered = _tool("set_order", effects)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request.override(tools=[*request.tools, self.offered]))

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        call = request.tool_call
        if call["name"] != "set_order":
            return handler(request)
        self.effects.append(f"set_order:{call['args']['key']}")
        return ToolMessage("order set", tool_call_id=call["id"], name="set_order")


@pytest.mark.parametrize("mode", ["enforce", "shadow"])
@pytest.mark.parametrize("guard_at", ["first", "last"])
def test_a_middleware_that_serves_the_named_tool_is_a_correct_setup(
    guard_at: str, mode: str
) -> None:
    effects: list[str] = []
    guard = ReplayGuard(GuardConfig(tools={"set_order": "unsafe"}, mode=mode))
    desk = _OrderDesk(effects)
    middleware = [guard.middleware(), desk] if guard_at == "first" else [desk, guard.middleware()]
    model = ScriptedChatModel(script=[[("get_order", {"key": "1"})], [("set_order", {"key": "1"})]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent = create_agent(model, [_tool("get_order", effects)], middleware=middleware)
        out = agent.invoke({"messages": [HumanMessage("go")]})
    assert effects == ["get_order:1", "set_order:1"]
    assert out["messages"][-1].content == "Done."
    near = _near_miss_warnings(caught, "set_order")
    # Guard last: the model request it sees offers `set_order`, so nothing is missing.
    assert len(near) == (1 if guard_at == "first" else 0), near
    if near:
        assert "did you mean 'get_order'?" in near[0]


def test_a_typo_in_an_agent_whose_tools_the_guard_knows_all_of_still_stops() -> None:
    effects: list[str] = []
    guard = ReplayGuard(GuardConfig(tools={"set_ordr": "unsafe"}))
    model = ScriptedChatModel(script=[[("set_order", {"key": "1"})]])
    agent = create_agent(model, [_tool("set_order", effects)], middleware=[guard.middleware()])
    # At the first model call, not at the build: the guard may guard another agent, built
    # next, that has the configured name (test_issue34_attack2.py).
    with pytest.raises(ValueError, match="did you mean 'set_order'") as raised:
        agent.invoke({"messages": [HumanMessage("go")]})
    assert "strict_tool_names=False" in str(raised.value)
    assert effects == []


def test_shadow_mode_never_stops_on_a_typo() -> None:
    effects: list[str] = []
    guard = ReplayGuard(GuardConfig(tools={"set_ordr": "unsafe"}, mode="shadow"))
    model = ScriptedChatModel(script=[[("set_order", {"key": "1"})]])
    agent = create_agent(model, [_tool("set_order", effects)], middleware=[guard.middleware()])
    with pytest.warns(ReplayGuardWarning, match="did you mean 'set_order'"):
        agent.invoke({"messages": [HumanMessage("go")]})
    assert effects == ["set_order:1"]


def test_the_callback_handler_check_warns_when_a_middleware_may_serve_the_tool() -> None:
    from langgraph_replay_guard import ReplayGuardCallbackHandler

    effects: list[str] = []
    handler = ReplayGuardCallbackHandler(GuardConfig(tools={"set_order": "unsafe"}))
    model = ScriptedChatModel(script=[[("set_order", {"key": "1"})]])
    agent = create_agent(model, [_tool("get_order", effects)], middleware=[_OrderDesk(effects)])
    with pytest.warns(ReplayGuardWarning, match="did you mean 'get_order'"):
        handler.check(agent)  # the tools node has a tool hook: it may serve `set_order`
    agent.invoke({"messages": [HumanMessage("go")]}, {"callbacks": [handler]})
    assert effects == ["set_order:1"]
