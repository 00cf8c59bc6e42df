"""The guard is transparent: what the pieces around it see is what they see without it."""

from __future__ import annotations

import asyncio
import os
from typing import Annotated, Any, NotRequired, Optional

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.message import add_messages
from langgraph.prebuilt import InjectedStore, ToolNode
from langgraph.store.base import BaseStore
from langgraph.types import Command
from pydantic import BaseModel

from langgraph_replay_guard import (
    GUARD_CHANNEL,
    ReplayGuard,
    ReplayGuardMiddleware,
    ReplayGuardState,
    merge_guard_state,
)
from langgraph_replay_guard.testing import ScriptedChatModel

os.environ["LANGSMITH_TRACING"] = "false"


@tool
def lookup(id: str) -> str:
    """Look a customer up."""
    return f"{id}: premium plan"


@tool
def quote(item: str) -> str:
    """Price an item."""
    return f"{item} costs 3 EUR"


class Seen(AgentMiddleware):
    """An outer middleware in LangChain's documented monitoring pattern: it reads the result."""

    def __init__(self) -> None:
        super().__init__()
        self.results: list[Any] = []

    def wrap_tool_call(self, request, handler):
        result = handler(request)
        self.results.append(result)
        return result

    async def awrap_tool_call(self, request, handler):
        result = await handler(request)
        self.results.append(result)
        return result


class Shout(AgentMiddleware):
    """An outer middleware in LangChain's documented result-modifying pattern."""

    def wrap_tool_call(self, request, handler):
        result = handler(request)
        return ToolMessage(
            content=result.content.upper(), tool_call_id=result.tool_call_id, name=result.name
        )


def _healthy_script() -> list[Any]:
    return [
        [("lookup", {"id": "P1"}), ("quote", {"item": "tea"})],
        [("lookup", {"id": "P2"})],
        "All done.",
    ]


def _shape(messages: list[BaseMessage]) -> list[tuple[Any, ...]]:
    """What a user compares between two runs: types, texts, tool names and statuses."""
    shape = []
    for m in messages:
        calls = (
            tuple((c["name"], tuple(sorted(c["args"].items()))) for c in m.tool_calls)
            if (isinstance(m, AIMessage))
            else ()
        )
        status = m.status if isinstance(m, ToolMessage) else None
        shape.append((type(m).__name__, m.text, calls, status))
    return shape


def _chunk_shape(chunk: Any) -> Any:
    """A stream chunk with messages reduced to their shape, without the guard's own channel.

    `stream()` shows every channel of the graph, private ones included (LangChain's own
    `ToolCallLimitMiddleware` counts show there too); `invoke()` shows only the agent's
    output schema, which the guard's channel is not part of.
    """
    if isinstance(chunk, dict):
        return {
            k: (_shape(v) if k == "messages" else _chunk_shape(v))
            for k, v in chunk.items()
            if k != GUARD_CHANNEL
        }
    if isinstance(chunk, list):
        return [_chunk_shape(c) for c in chunk]
    return chunk


def _steps(chunks: list[Any]) -> list[list[str]]:
    """`updates` chunks grouped by consecutive node name, each group sorted."""
    steps: list[tuple[Any, list[str]]] = []
    for chunk in chunks:
        nodes = tuple(chunk) if isinstance(chunk, dict) else None
        if steps and steps[-1][0] == nodes:
            steps[-1][1].append(repr(chunk))
        else:
            steps.append((nodes, [repr(chunk)]))
    return [sorted(group) for _, group in steps]


def _agent(middleware: list[Any], script: list[Any]):
    model = ScriptedChatModel(script=script)
    agent = create_agent(model, [lookup, quote], middleware=middleware)
    return agent


@pytest.mark.parametrize("first", [True, False], ids=["guard-first", "guard-last"])
def test_outer_middleware_receives_the_tools_own_tool_message(first):
    seen = Seen()
    guard = ReplayGuardMiddleware()
    stack = [guard, seen] if first else [seen, guard]
    agent = _agent(stack, _healthy_script())
    agent.invoke({"messages": [HumanMessage("hi")]})
    assert len(seen.results) == 3
    assert all(isinstance(r, ToolMessage) for r in seen.results)
    assert sorted(r.content for r in seen.results) == [
        "P1: premium plan",
        "P2: premium plan",
        "tea costs 3 EUR",
    ]


def test_result_modifying_middleware_outside_the_guard_works():
    agent = _agent([Shout(), ReplayGuardMiddleware()], _healthy_script())
    out = agent.invoke({"messages": [HumanMessage("hi")]})
    tool_texts = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
    assert tool_texts == ["P1: PREMIUM PLAN", "TEA COSTS 3 EUR", "P2: PREMIUM PLAN"]


@pytest.mark.parametrize("mode", ["updates", "values"])
def test_create_agent_stream_and_output_equal_the_unguarded_agents(mode):
    plain = _agent([], _healthy_script())
    guarded = _agent([ReplayGuardMiddleware()], _healthy_script())
    inputs = {"messages": [HumanMessage("hi")]}
    plain_chunks = [_chunk_shape(c) for c in plain.stream(inputs, stream_mode=mode)]
    guarded_chunks = [_chunk_shape(c) for c in guarded.stream(inputs, stream_mode=mode)]
    # Parallel tool tasks finish in any order: compare each step's chunks as a set.
    assert _steps(guarded_chunks) == _steps(plain_chunks)
    plain_out, guarded_out = plain.invoke(inputs), guarded.invoke(inputs)
    assert set(guarded_out) == set(plain_out)
    assert _shape(guarded_out["messages"]) == _shape(plain_out["messages"])


def test_create_agent_async_stream_equals_the_unguarded_agents():
    async def chunks(agent):
        inputs = {"messages": [HumanMessage("hi")]}
        return [_chunk_shape(c) async for c in agent.astream(inputs, stream_mode="updates")]

    plain = asyncio.run(chunks(_agent([], _healthy_script())))
    guarded = asyncio.run(chunks(_agent([ReplayGuardMiddleware()], _healthy_script())))
    assert _steps(guarded) == _steps(plain)


def test_a_stop_is_one_model_update_with_the_usual_shape():
    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=20)
    agent = create_agent(
        model, [lookup], middleware=[ReplayGuardMiddleware()], checkpointer=InMemorySaver()
    )
    cfg = {"configurable": {"thread_id": "stop"}}
    chunks = list(agent.stream({"messages": [HumanMessage("hi")]}, cfg, stream_mode="updates"))
    assert all(isinstance(c, dict) for c in chunks)
    for chunk in chunks:
        for node, update in chunk.items():
            assert isinstance(update, dict), (node, update)
    last = chunks[-1]["model"]["messages"]
    assert [type(m).__name__ for m in last] == ["AIMessage", "ToolMessage", "AIMessage"]
    assert last[-1].response_metadata["replay_guard_stop"] == "repeat_limit"
    # The guard still kept its count, in its private channel.
    state = agent.get_state(cfg)
    assert ReplayGuard().inspect(state).stop_reason == "repeat_limit"


def test_guarded_tool_node_invoked_by_hand_returns_what_a_tool_node_returns():
    from langgraph.graph import START, StateGraph

    from langgraph_replay_guard import ReplayGuardState

    ai = AIMessage(
        content="",
        id="ai-1",
        tool_calls=[
            {"name": "lookup", "args": {"id": "P1"}, "id": "c1", "type": "tool_call"},
            {"name": "quote", "args": {"item": "tea"}, "id": "c2", "type": "tool_call"},
        ],
    )
    outputs = {}

    def run_by_hand(node: ToolNode, key: str):
        def step(state: ReplayGuardState) -> dict[str, Any]:
            outputs[key] = node.invoke(state)
            return {}

        return step

    builder = StateGraph(ReplayGuardState)
    builder.add_node("plain", run_by_hand(ToolNode([lookup, quote]), "plain"))
    builder.add_node("guarded", run_by_hand(ReplayGuard().tool_node([lookup, quote]), "guarded"))
    builder.add_edge(START, "plain")
    builder.add_edge("plain", "guarded")
    builder.compile().invoke({"messages": [HumanMessage("hi"), ai]})
    assert set(outputs["guarded"]) == {"messages"}
    assert _shape(outputs["guarded"]["messages"]) == _shape(outputs["plain"]["messages"])


def test_a_tools_own_command_reaches_an_outer_middleware_unchanged():
    @tool
    def set_mode(mode: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
        """Switch the mode."""
        return Command(
            update={"messages": [ToolMessage(f"mode {mode}", tool_call_id=tool_call_id)]}
        )

    seen = Seen()
    model = ScriptedChatModel(script=[[("set_mode", {"mode": "a"})], "ok"])
    agent = create_agent(model, [set_mode], middleware=[seen, ReplayGuardMiddleware()])
    agent.invoke({"messages": [HumanMessage("hi")]})
    (result,) = seen.results
    assert isinstance(result, Command)
    assert set(result.update) == {"messages"}


@pytest.mark.parametrize("path", ["create_agent", "tool_node"])
def test_a_tool_returning_command_is_not_a_pure_read_by_default(path):
    from langgraph_replay_guard.testing import agent_graph

    @tool
    def set_mode(mode: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
        """Switch the mode."""
        return Command(
            update={"messages": [ToolMessage(f"mode is {mode}", tool_call_id=tool_call_id)]}
        )

    runs: list[str] = []

    @tool
    def note(text: str) -> str:
        """Write a note."""
        runs.append(text)
        return "noted"

    script = [
        [("set_mode", {"mode": "a"})],
        [("set_mode", {"mode": "b"})],
        [("set_mode", {"mode": "a"})],
        "done",
    ]
    model = ScriptedChatModel(script=script)
    if path == "create_agent":
        agent = create_agent(model, [set_mode, note], middleware=[ReplayGuardMiddleware()])
    else:
        agent = agent_graph(model, [set_mode, note], guard=ReplayGuard())
    out = agent.invoke({"messages": [HumanMessage("switch modes")]})
    answers = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
    assert answers == ["mode is a", "mode is b", "mode is a"]


def test_a_name_an_inner_wrapper_serves_gets_no_unknown_tool_decision():
    def serve_handoff(request, execute):
        if request.tool_call["name"] == "transfer_to_billing":
            return ToolMessage(
                "Transferred to billing.",
                tool_call_id=request.tool_call["id"],
                name="transfer_to_billing",
            )
        return execute(request)

    guard = ReplayGuard()
    model = ScriptedChatModel(script=[[("transfer_to_billing", {})], "ok"])
    # The usual agent graph, its tools node built around a wrapper that serves the hand-off.
    from langgraph.graph import START, StateGraph
    from langgraph.prebuilt import tools_condition

    from langgraph_replay_guard import ReplayGuardState

    builder = StateGraph(ReplayGuardState)
    builder.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
    builder.add_node("tools", guard.wrap(ToolNode([lookup], wrap_tool_call=serve_handoff)))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_conditional_edges("tools", guard.route_after_tools("agent"))
    graph = builder.compile()
    chunks = list(
        graph.stream({"messages": [HumanMessage("bill me")]}, stream_mode=["custom", "values"])
    )
    decisions = [c for mode, c in chunks if mode == "custom"]
    assert decisions == []
    final = [c for mode, c in chunks if mode == "values"][-1]
    assert [m.content for m in final["messages"] if isinstance(m, ToolMessage)] == [
        "Transferred to billing."
    ]


def test_the_guard_channel_stays_out_of_outputs_until_the_guard_records_something():
    from langgraph_replay_guard.testing import agent_graph

    chat = agent_graph(ScriptedChatModel(script=["hello"]), [lookup], guard=ReplayGuard())
    assert set(chat.invoke({"messages": [HumanMessage("hi")]})) == {"messages"}
    agent = _agent([ReplayGuardMiddleware()], ["hello"])
    chunks = list(agent.stream({"messages": [HumanMessage("hi")]}, stream_mode="values"))
    assert all(set(c) == {"messages"} for c in chunks)


class _PydanticState(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages]
    replay_guard: Annotated[Optional[dict[str, Any]], merge_guard_state] = None  # noqa: UP045


@pytest.mark.parametrize("pause", [False, True], ids=["one-run", "resumed-at-each-step"])
def test_a_pydantic_state_with_the_channel_declared_the_natural_way_keeps_count(caplog, pause):
    from langgraph.graph import START, StateGraph
    from langgraph.prebuilt import tools_condition

    runs: list[str] = []

    @tool
    def read(id: str) -> str:
        """Read a record."""
        runs.append(id)
        return f"record {id}"

    guard = ReplayGuard()
    model = ScriptedChatModel.looping("read", {"id": "P1"}, times=20)
    builder = StateGraph(_PydanticState)
    builder.add_node("agent", lambda s: {"messages": [model.invoke(s.messages)]})
    builder.add_node("tools", guard.tool_node([read]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_conditional_edges("tools", guard.route_after_tools("agent"))
    compile_kwargs: dict[str, Any] = {}
    if pause:  # a breakpoint before every tools step: each step is a resume from a checkpoint
        compile_kwargs = {"checkpointer": InMemorySaver(), "interrupt_before": ["tools"]}
    graph = builder.compile(**compile_kwargs)
    cfg = {"configurable": {"thread_id": "pydantic"}}
    with caplog.at_level("WARNING"):
        out = graph.invoke({"messages": [HumanMessage("read P1")]}, cfg)
        while pause and graph.get_state(cfg).next:
            out = graph.invoke(None, cfg)
    assert runs == ["P1"]
    assert model.calls == 4  # the documented stop: the 4th identical call
    assert guard.inspect(out["replay_guard"]).stop_reason == "repeat_limit"
    assert not [r for r in caplog.records if "reset" in r.getMessage()]


def test_a_graph_without_the_channel_is_refused_but_a_node_run_by_hand_is_not():
    from langgraph.graph import START, MessagesState, StateGraph

    node = ReplayGuard().tool_node([lookup])
    ai = AIMessage("", id="a1", tool_calls=[{"name": "lookup", "args": {"id": "P1"}, "id": "c1"}])
    builder = StateGraph(MessagesState)
    builder.add_node("tools", node)
    builder.add_edge(START, "tools")
    with pytest.raises(ValueError, match="has no 'replay_guard' channel"):
        builder.compile().invoke({"messages": [ai]})


def _merge_files(old: dict | None, new: dict | None) -> dict:
    return {**(old or {}), **(new or {})}


class _FilesState(ReplayGuardState):
    files: NotRequired[Annotated[dict, _merge_files]]


def test_a_replayed_command_brings_back_its_whole_state_update():
    # A guarded ToolNode runs both calls of a batch in one task: `write_file` (unsafe, returns
    # a Command that writes `files`) finishes, then its sibling interrupts. The task's writes
    # are dropped, so on resume `write_file` is answered from the ledger; its file must come
    # back with it (deepagents keeps its files in state this way).

    from langgraph.graph import START, StateGraph
    from langgraph.prebuilt import tools_condition
    from langgraph.store.memory import InMemoryStore
    from langgraph.types import interrupt

    writes: list[str] = []

    @tool
    def write_file(
        path: str, text: str, tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> Command:
        """Write a file."""
        writes.append(path)
        return Command(
            update={
                "files": {path: text},
                "messages": [ToolMessage(f"wrote {path}", tool_call_id=tool_call_id)],
            }
        )

    @tool
    def ask_human(question: str) -> str:
        """Ask the user."""
        return str(interrupt(question))

    guard = ReplayGuard(tools={"write_file": "unsafe", "ask_human": "idempotent"})
    model = ScriptedChatModel(
        script=[
            [("write_file", {"path": "a.md", "text": "hi"}), ("ask_human", {"question": "ok?"})]
        ]
    )
    builder = StateGraph(_FilesState)
    builder.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
    builder.add_node("tools", guard.tool_node([write_file, ask_human]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_conditional_edges("tools", guard.route_after_tools("agent"))
    graph = builder.compile(checkpointer=InMemorySaver(), store=InMemoryStore())
    cfg = {"configurable": {"thread_id": "files"}}
    graph.invoke({"messages": [HumanMessage("write a.md")]}, cfg)
    assert graph.get_state(cfg).interrupts
    out = graph.invoke(Command(resume="yes"), cfg)
    assert writes == ["a.md"]  # not written twice
    assert out["files"] == {"a.md": "hi"}  # and not lost
    answers = [m.text for m in out["messages"] if isinstance(m, ToolMessage)]
    assert answers == ["wrote a.md", "yes"]


def test_a_guarded_tool_node_keeps_its_own_handle_tool_errors():
    from langchain_core.tools import ToolException
    from langgraph.graph import START, StateGraph

    @tool
    def flaky(x: str) -> str:
        """Fail in two ways."""
        if x == "value":
            raise ValueError("bad value")
        raise ToolException("tool broke")

    def graph(node: ToolNode) -> Any:
        builder = StateGraph(ReplayGuardState)
        builder.add_node("tools", node)
        builder.add_edge(START, "tools")
        return builder.compile()

    def calls(*xs: str) -> dict[str, Any]:
        tool_calls = [
            {"name": "flaky", "args": {"x": x}, "id": f"c{i}", "type": "tool_call"}
            for i, x in enumerate(xs)
        ]
        return {"messages": [AIMessage("", id="a1", tool_calls=tool_calls)]}

    for node in (
        ToolNode([flaky], handle_tool_errors=(ValueError,)),
        ReplayGuard().tool_node([flaky], handle_tool_errors=(ValueError,)),
    ):
        out = graph(node).invoke(calls("value"))
        assert out["messages"][-1].status == "error"  # handled: a ValueError
        with pytest.raises(ToolException):  # not handled, with or without the guard
            graph(node).invoke(calls("other"))


def test_a_stop_with_exit_behavior_error_passes_a_catch_all_error_middleware():
    from langchain.agents.middleware import ToolErrorMiddleware

    from langgraph_replay_guard import LoopAbortedError

    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=20)
    catch_all = ToolErrorMiddleware(lambda error: f"failed: {error}")
    agent = create_agent(
        model, [lookup], middleware=[catch_all, ReplayGuardMiddleware(exit_behavior="error")]
    )
    with pytest.raises(LoopAbortedError):
        agent.invoke({"messages": [HumanMessage("who is P1?")]})
    assert model.calls == 4  # raised at the 4th identical call


# -- What create_agent builds around the guard ---------------------------------------------------


class Noop(AgentMiddleware):
    """A middleware with a model hook only (as in LangChain's own graph snapshots)."""

    def before_model(self, state, runtime):
        return None


def _nodes(agent) -> list[str]:
    return sorted(agent.get_graph().nodes)


@pytest.mark.parametrize("first", [True, False])
def test_an_agent_without_tools_gets_the_graph_it_gets_without_the_guard(first):
    """No tools node for the guard's tool hooks alone (issue 37 item 1 kept this).

    `create_agent` adds a tools node whenever a middleware's class has a tool hook, which
    changes the graph and the routing. The guard's `tools`, read first while the agent is
    built, leaves its tool hooks out of an agent that would get no tools node without it
    (`_compat.agent_being_built`); the same instance guards an agent with tools again.
    """
    guard = ReplayGuardMiddleware()
    stack = [guard, Noop()] if first else [Noop(), guard]
    unguarded = create_agent(ScriptedChatModel(final="hi"), tools=[], middleware=[Noop()])
    guarded = create_agent(ScriptedChatModel(final="hi"), tools=[], middleware=stack)
    assert "tools" not in _nodes(unguarded)
    assert _nodes(guarded) == _nodes(unguarded)
    chunks = {}
    for label, agent in (("unguarded", unguarded), ("guarded", guarded)):
        updates = agent.stream({"messages": [HumanMessage("hello")]}, stream_mode="updates")
        chunks[label] = [{node: _texts(update) for node, update in c.items()} for c in updates]
    assert chunks["guarded"] == chunks["unguarded"]
    assert chunks["guarded"][-1]["model"] == ["hi"]

    # A made-up tool call ends the run on the call, as without the guard (no tools node).
    ends = {}
    for label, middleware in (("unguarded", [Noop()]), ("guarded", stack)):
        model = ScriptedChatModel(script=[[("ghost", {"a": 1})]], final="done")
        agent = create_agent(model, tools=[], middleware=middleware)
        out = agent.invoke({"messages": [HumanMessage("x")]})
        ends[label] = [(type(m).__name__, m.content) for m in out["messages"]]
        assert not any(isinstance(m, ToolMessage) for m in out["messages"])
    assert ends["guarded"] == ends["unguarded"]

    # The same instance in an agent with tools guards them again.
    script = ScriptedChatModel(script=[[("lookup", {"id": "P1"})]] * 3, final="done")
    agent = create_agent(script, tools=[lookup], middleware=[guard], checkpointer=InMemorySaver())
    assert "tools" in _nodes(agent)
    result = agent.invoke({"messages": [HumanMessage("who")]}, {"configurable": {"thread_id": "t"}})
    runs = [m for m in result["messages"] if isinstance(m, ToolMessage) and m.status != "error"]
    assert len(runs) == 1  # the two identical repeats were answered by the guard
    # And the agent without tools built first still runs as it did.
    assert guarded.invoke({"messages": [HumanMessage("again")]})["messages"][-1].content == "hi"


def _texts(update: Any) -> list[str]:
    messages = update.get("messages", []) if isinstance(update, dict) else []
    return [str(m.content) for m in messages]


@tool
def dynamic(value: str) -> str:
    """A tool added at model-call time."""
    return f"dynamic {value}"


class AddsDynamic(AgentMiddleware):
    """Offers a tool that create_agent was not given (LangChain's dynamic-tools pattern)."""

    def wrap_model_call(self, request, handler):
        return handler(request.override(tools=[*request.tools, dynamic]))

    async def awrap_model_call(self, request, handler):
        return await handler(request.override(tools=[*request.tools, dynamic]))


class RunsDynamic(AddsDynamic):
    def wrap_tool_call(self, request, handler):
        if request.tool_call["name"] == "dynamic":
            return handler(request.override(tool=dynamic))
        return handler(request)

    async def awrap_tool_call(self, request, handler):
        if request.tool_call["name"] == "dynamic":
            return await handler(request.override(tool=dynamic))
        return await handler(request)


def test_a_dynamic_tool_nothing_runs_raises_langchains_error_with_the_guard_last():
    for middleware in ([AddsDynamic()], [AddsDynamic(), ReplayGuardMiddleware()]):
        script = ScriptedChatModel(script=[[("dynamic", {"value": "x"})]], final="done")
        agent = create_agent(script, tools=[lookup], middleware=middleware)
        with pytest.raises(
            ValueError, match=r"(?s)Middleware added tools.*Unknown tools:.*dynamic"
        ):
            agent.invoke({"messages": [HumanMessage("go")]})


@pytest.mark.parametrize("first", [True, False])
def test_a_dynamic_tool_another_middleware_runs_is_run_and_guarded(first):
    guard = ReplayGuardMiddleware()
    stack = [guard, RunsDynamic()] if first else [RunsDynamic(), guard]
    script = ScriptedChatModel(script=[[("dynamic", {"value": "x"})]] * 8, final="done")
    agent = create_agent(script, tools=[lookup], middleware=stack)
    result = agent.invoke({"messages": [HumanMessage("go")]})
    answers = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert answers[0].content == "dynamic x"  # no "unknown tool", no ValueError
    if first:  # served inside the guard by a middleware it sits outside of: counted, not cached
        assert [m.status for m in answers] == ["success", "success", "success", "error"]
    else:  # the guard sees the tool the middleware gave the call: repeats answered
        assert [m.status for m in answers] == ["success", "error", "error", "error"]
    assert answers[-1].content.startswith("Stopped: 'dynamic' was called 4 times")
    assert script.calls == 4


def test_one_guard_in_two_agents_checks_each_against_the_tools_it_runs():
    guard = ReplayGuardMiddleware()
    create_agent(ScriptedChatModel(final="a"), tools=[lookup], middleware=[guard])
    second = create_agent(ScriptedChatModel(final="b"), tools=[quote], middleware=[guard])
    # The second agent's own tool is not "added by a middleware".
    assert second.invoke({"messages": [HumanMessage("go")]})["messages"][-1].content == "b"


@tool
def needs_store(key: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
    """Read a key from the graph's store."""
    item = store.get(("kv",), key)
    return str(item.value if item else None)


def _run(graph: Any, inputs: Any, cfg: Any, run: str) -> Any:
    if run == "invoke":
        return graph.invoke(inputs, cfg)
    return asyncio.run(graph.ainvoke(inputs, cfg))


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_an_error_the_node_itself_raises_leaves_a_guarded_node_as_it_leaves_a_plain_one(run):
    """LangGraph raises for a tool that needs a store the graph lacks, whatever
    `handle_tool_errors` says; behind any wrapper the node would answer it as a tool error."""
    from langgraph.graph import START, StateGraph

    call = {"name": "needs_store", "args": {"key": "k"}, "id": "c1", "type": "tool_call"}
    calls = {"messages": [AIMessage("", id="a1", tool_calls=[call])]}
    raised = []
    for node in (
        ToolNode([needs_store], handle_tool_errors=True),
        ReplayGuard().tool_node([needs_store], handle_tool_errors=True),
    ):
        builder = StateGraph(ReplayGuardState).add_node("tools", node)
        graph = builder.add_edge(START, "tools").compile(checkpointer=InMemorySaver())
        cfg = {"configurable": {"thread_id": "t"}}
        with pytest.raises(ValueError, match="Cannot inject store") as caught:
            _run(graph, calls, cfg, run)
        raised.append(type(caught.value))
        # LangGraph saved it as the task's error, as for any node error.
        (task,) = graph.get_state(cfg).tasks
        assert "Cannot inject store" in str(task.error)
    assert raised == [ValueError, ValueError]


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_an_unsafe_tool_error_the_node_lets_out_still_leaves_an_unknown_outcome(run):
    """The node lets the error out as it does unguarded; the ledger still saw the send."""
    from langgraph.graph import START, StateGraph
    from langgraph.store.memory import InMemoryStore

    from langgraph_replay_guard import ReplayUnsafeError

    sent: list[str] = []

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        raise ConnectionError("connection reset by peer")  # after the effect

    guard = ReplayGuard(tools={"send_email": "unsafe"}, store=InMemoryStore())
    node = guard.tool_node([send_email], handle_tool_errors=(ValueError,))  # not this error
    builder = StateGraph(ReplayGuardState).add_node("tools", node)
    graph = builder.add_edge(START, "tools").compile(checkpointer=InMemorySaver())
    call = {"name": "send_email", "args": {"to": "ann"}, "id": "c1", "type": "tool_call"}
    cfg = {"configurable": {"thread_id": "t"}}
    with pytest.raises(ConnectionError) as caught:
        _run(graph, {"messages": [AIMessage("", id="a1", tool_calls=[call])]}, cfg, run)
    assert type(caught.value) is ConnectionError  # the tool's own error, as unguarded
    # Resuming must not send again: the outcome is unknown, not an interrupted call.
    with pytest.raises(ReplayUnsafeError, match="outcome is unknown"):
        _run(graph, None, cfg, run)
    assert sent == ["ann"]
