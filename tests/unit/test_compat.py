"""Every private LangGraph/LangChain access in `_compat` still works on the installed versions."""

from __future__ import annotations

import inspect
import re
from importlib.metadata import version
from pathlib import Path
from typing import Annotated

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain.tools import InjectedState, InjectedStore, ToolRuntime
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_config
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolInvocationError
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.types import Send
from typing_extensions import TypedDict

from langgraph_replay_guard import _compat
from langgraph_replay_guard.testing import ScriptedChatModel


@tool
def lookup(id: str) -> str:
    """Read a record."""
    return id


def _major(package: str) -> int:
    return int(version(package).split(".")[0])


def test_supported_version_ranges():
    # The accessors below are checked against these majors; a new major needs a look.
    assert _major("langgraph") == 1
    assert _major("langgraph-prebuilt") == 1
    assert _major("langchain") == 1


def test_tool_node_settings_reads_what_the_node_was_built_with():
    def wrap(request, execute):
        return execute(request)

    def on_error(error: ValueError) -> str:
        return "bad"

    node = ToolNode([lookup], wrap_tool_call=wrap, handle_tool_errors=on_error, messages_key="m")
    settings = _compat.tool_node_settings(node)
    assert settings.wrap_tool_call is wrap
    assert settings.awrap_tool_call is None
    assert settings.messages_key == "m"
    assert settings.handle_tool_errors is on_error
    assert _compat.handled_error_types(on_error) == (ValueError,)
    assert not _compat.is_default_tool_error_handler(on_error)


def test_default_tool_error_handler_is_recognised_and_its_text_reproduced():
    default = _compat.tool_node_settings(ToolNode([lookup])).handle_tool_errors
    assert _compat.is_default_tool_error_handler(default)
    assert issubclass(ToolInvocationError, _compat.handled_error_types(default))
    assert _compat.tool_error_content(ValueError("boom"), True).startswith("Error: ValueError")


def test_run_checkpointer_and_durability_are_read_inside_a_node():
    seen = {}

    def node(state: MessagesState) -> dict:
        configurable = get_config()["configurable"]
        seen["checkpointer"] = _compat.run_checkpointer(configurable)
        seen["durability"] = _compat.run_durability(configurable)
        return {}

    saver = InMemorySaver()
    graph = StateGraph(MessagesState).add_node("n", node).add_edge(START, "n").compile(saver)
    graph.invoke({"messages": []}, {"configurable": {"thread_id": "t"}}, durability="sync")
    assert seen == {"checkpointer": saver, "durability": "sync"}


@pytest.mark.parametrize("flag", [True, "text", (ValueError,)])
def test_non_callable_flags_are_not_the_default_handler(flag):
    assert not _compat.is_default_tool_error_handler(flag)


def test_delegate_store_unwraps_langgraph_devs_batching_store():
    from langgraph.store.memory import InMemoryStore

    class Wrapper:  # the shape of langgraph-api's batching store
        def __init__(self, inner):
            self._store = inner

    inner = InMemoryStore()
    assert _compat.delegate_store(Wrapper(inner)) is inner
    assert _compat.delegate_store(inner) is None


@pytest.mark.parametrize(
    "hook", ["wrap_model_call", "awrap_model_call", "wrap_tool_call", "awrap_tool_call"]
)
def test_middleware_hooks_carry_their_signature_computed_once(hook):
    # create_agent wraps each hook in langsmith's `traceable`, which asks inspect.signature
    # for it on every call; the precomputed one must be what it gets, and it must be right.
    from langgraph_replay_guard import ReplayGuardMiddleware

    function = getattr(ReplayGuardMiddleware, hook)
    assert inspect.signature(function) is function.__signature__
    assert list(inspect.signature(getattr(ReplayGuardMiddleware(), hook)).parameters) == [
        "request",
        "handler",
    ]
    assert inspect.iscoroutinefunction(function) == hook.startswith("a")


def _add(a: list, b: list) -> list:
    return [*a, *b]


class _SideState(TypedDict):
    notes: Annotated[list, _add]
    side: Annotated[list, _add]


def test_channel_writer_writes_beside_the_nodes_output():
    def node(state: _SideState) -> dict:
        send = _compat.channel_writer(get_config())
        assert send is not None
        send([("side", ["written aside"])])
        return {"notes": ["returned"]}

    builder = StateGraph(_SideState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    out = builder.compile().invoke({"notes": [], "side": []})
    assert out == {"notes": ["returned"], "side": ["written aside"]}
    assert _compat.channel_writer(None) is None
    assert _compat.channel_writer({"configurable": {}}) is None


def test_scoped_tool_node_opens_its_scope_around_each_run_sync_and_async():
    import asyncio

    events: list[str] = []

    class Scope:
        def __init__(self, config):
            assert _compat.channel_writer(config) is not None

        def __enter__(self):
            events.append("enter")
            return self

        def __exit__(self, *exc):
            events.append("exit")

        def finish(self, output):
            events.append("finish")
            return {"messages": [*output["messages"], AIMessage("added", id="end")]}

    node = _compat.scoped_tool_node([lookup], task_scope=Scope)
    assert isinstance(node, ToolNode)
    ai = AIMessage("", id="a1", tool_calls=[{"name": "lookup", "args": {"id": "x"}, "id": "c1"}])
    builder = StateGraph(MessagesState)
    builder.add_node("tools", node)
    builder.add_edge(START, "tools")
    graph = builder.compile()
    out = graph.invoke({"messages": [ai]})
    assert [m.text for m in out["messages"]] == ["", "x", "added"]
    out = asyncio.run(graph.ainvoke({"messages": [ai]}))
    assert [m.text for m in out["messages"]] == ["", "x", "added"]
    assert events == ["enter", "finish", "exit"] * 2


def test_graph_has_channel_asks_the_running_graph():
    seen: dict[str, object] = {}

    def node(state: _SideState) -> dict:
        config = get_config()
        seen["side"] = _compat.graph_has_channel(config, "side")
        seen["missing"] = _compat.graph_has_channel(config, "replay_guard")
        return {}

    builder = StateGraph(_SideState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.compile().invoke({"notes": [], "side": []})
    assert seen == {"side": True, "missing": False}
    assert _compat.graph_has_channel(None, "side") is None
    assert _compat.graph_has_channel({"configurable": {}}, "side") is None


def _keep_both(a: list[object], b: list[object]) -> list[object]:
    return [*a, *b]


class _ReducerState(TypedDict):
    merged: Annotated[list[object], _keep_both]
    replaced: list[object]


def test_channel_without_reducer_reads_the_running_graphs_channels():
    seen: dict[str, object] = {}

    def node(state: _ReducerState) -> dict:
        config = get_config()
        seen["merged"] = _compat.channel_without_reducer(config, "merged", _keep_both)
        seen["replaced"] = _compat.channel_without_reducer(config, "replaced", _keep_both)
        seen["other"] = _compat.channel_without_reducer(config, "merged", lambda a, b: b)
        seen["missing"] = _compat.channel_without_reducer(config, "nope", _keep_both)
        return {}

    builder = StateGraph(_ReducerState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.compile().invoke({"merged": [], "replaced": []})
    assert seen == {
        "merged": None,
        "replaced": "LastValue",
        "other": "BinaryOperatorAggregate",
        "missing": None,
    }
    assert _compat.channel_without_reducer(None, "merged", _keep_both) is None


class _FanOutState(TypedDict):
    items: list[str]
    seen: Annotated[list[object], lambda a, b: a + b]


def test_graph_state_reads_the_graph_state_in_a_send_task_only():
    def start(state: _FanOutState) -> dict:
        # A task started by an edge: its input is the state, there is nothing to read.
        return {"seen": [_compat.graph_state(get_config())]}

    def worker(payload: dict) -> dict:
        # A task started by Send: its input is the payload; the graph's state is readable.
        state = _compat.graph_state(get_config())
        return {"seen": [(payload["item"], state["items"])]}

    def fan_out(state: _FanOutState) -> list[Send]:
        return [Send("worker", {"item": item}) for item in state["items"]]

    builder = StateGraph(_FanOutState)
    builder.add_node("start", start)
    builder.add_node("worker", worker)
    builder.add_edge(START, "start")
    builder.add_conditional_edges("start", fan_out, ["worker"])
    builder.add_edge("worker", END)
    out = builder.compile().invoke({"items": ["a", "b"], "seen": []})
    assert out["seen"] == [None, ("a", ["a", "b"]), ("b", ["a", "b"])]
    assert _compat.graph_state(None) is None
    assert _compat.graph_state({"configurable": {}}) is None


def test_runs_the_tool_itself_recognises_tool_nodes_own_execute():
    from langchain.agents.middleware import AgentMiddleware

    seen: list[bool] = []

    class Probe(AgentMiddleware):
        def wrap_tool_call(self, request, handler):
            seen.append(_compat.runs_the_tool_itself(handler))
            return handler(request)

    class Outer(Probe):
        name = "Outer"

    model = ScriptedChatModel(script=[[("lookup", {"id": "1"})]])
    create_agent(model, [lookup], middleware=[Outer(), Probe()]).invoke(
        {"messages": [("user", "x")]}
    )
    assert seen == [
        False,
        True,
    ]  # the outer one's handler is the inner one; the inner's is the node's
    assert not _compat.runs_the_tool_itself(lambda request: None)


@tool
def note(
    text: str,
    messages: Annotated[list, InjectedState("messages")],
    store: Annotated[BaseStore, InjectedStore()],
    runtime: ToolRuntime,
) -> str:
    """Take a note."""
    return text


def test_injected_arg_names_are_the_arguments_tool_node_adds():
    assert _compat.injected_arg_names(note) == {"messages", "store", "runtime"}
    assert _compat.injected_arg_names(lookup) == frozenset()
    # What ToolNode really adds to the input of the tool it invokes.
    seen: list[set[str]] = []
    real = note.invoke

    def spy(input, config=None, **kwargs):
        seen.append(set(input["args"]))
        return real(input, config, **kwargs)

    watched = note.model_copy()
    object.__setattr__(watched, "invoke", spy)
    call = AIMessage(content="", tool_calls=[{"name": "note", "args": {"text": "a"}, "id": "c1"}])
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([watched]))
    builder.add_edge(START, "tools")
    builder.compile(store=InMemoryStore()).invoke({"messages": [call]})
    assert seen == [{"text"} | _compat.injected_arg_names(note)]


def test_tool_nodes_are_found_and_their_tools_replaced_in_place():
    from langgraph_replay_guard import ReplayGuard

    guard = ReplayGuard(tools={"lookup": "pure"})
    model = ScriptedChatModel(script=[[("lookup", {"id": "P1"})], "Done."])
    agent = create_agent(model, [lookup], middleware=[guard.middleware()])
    inner = StateGraph(MessagesState).add_node("tools", ToolNode([lookup]))
    inner = inner.add_edge(START, "tools").compile()
    outer = StateGraph(MessagesState).add_node("sub", inner).add_edge(START, "sub").compile()
    [node] = _compat.tool_nodes(agent)
    assert isinstance(node, ToolNode)
    assert len(_compat.tool_nodes(outer)) == 1  # in a subgraph too
    seen = []

    def wrap(original):
        @tool("lookup")
        def counted(id: str) -> str:
            """Read a record."""
            seen.append(id)
            return original.invoke({"id": id})

        return counted

    _compat.wrap_node_tools(node, wrap)
    agent.invoke({"messages": [("user", "go")]})
    assert seen == ["P1"]


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_agent_build_reads_the_tools_node_and_the_tool_hooks_from_the_model_handler(run):
    """LangChain tells a middleware nothing of the agent it is in (issue 37 item 1).

    `create_agent` reads a middleware's plain `name`, `tools` and `state_schema`; a model
    request holds only the tools the middlewares outside left it. `_compat.agent_build`
    reads the tools node and the composed tool hooks from the closure of `create_agent`'s
    own `_get_bound_model`, reached from the model hook's handler. When LangChain changes
    that, this test fails: the guard would then lose its checks that need the whole agent
    (offered tools nothing runs, `strict_tool_names` errors).
    """
    import asyncio

    seen = []

    class Probe(AgentMiddleware):
        def __init__(self) -> None:
            super().__init__()
            self.tools = [note]

        def wrap_model_call(self, request, handler):
            seen.append(_compat.agent_build(handler))
            return handler(request)

        async def awrap_model_call(self, request, handler):
            seen.append(_compat.agent_build(handler))
            return await handler(request)

    class Runs(AgentMiddleware):
        def wrap_tool_call(self, request, handler):
            return handler(request)

        async def awrap_tool_call(self, request, handler):
            return await handler(request)

    class Outer(AgentMiddleware):
        def wrap_model_call(self, request, handler):
            return handler(request)

        async def awrap_model_call(self, request, handler):
            return await handler(request)

    probe, runs = Probe(), Runs()
    model = ScriptedChatModel(script=[AIMessage("done")] * 3)
    for middleware, owners in (([probe], ()), ([Outer(), probe, runs], (runs,))):
        agent = create_agent(model, [lookup], middleware=middleware)
        inputs = {"messages": [("user", "go")]}
        agent.invoke(inputs) if run == "invoke" else asyncio.run(agent.ainvoke(inputs))
        found = seen.pop()
        assert found is not None, "LangChain changed create_agent: see _compat.agent_build"
        assert {t.name for t in found.tools} == {"lookup", "note"}
        assert found.tool_hook_owners == owners
    probe.tools = []
    tool_free = create_agent(model, [], middleware=[probe])
    tool_free.invoke({"messages": [("user", "go")]})
    assert seen.pop() == _compat.AgentBuild(tools=(), tool_hook_owners=())
    assert _compat.agent_build(lambda request: request) is None  # not create_agent's


def test_agent_being_built_is_read_before_create_agent_looks_at_tool_hooks():
    """The one frame read of the package, and why (issue 37 item 1).

    LangChain gives a middleware no public way to know, while `create_agent` builds an
    agent, whether the agent gets a tools node: it adds one whenever a middleware's class
    has a tool hook, even to an agent without tools. `create_agent` reads each middleware's
    `tools` before it looks at the tool hooks and before its duplicate-name check, so the
    guard's `tools` property reads the `tools` and `middleware` given to the running
    `create_agent` (`_compat.agent_being_built`), leaves its tool hooks out of an agent that
    gets no tools node otherwise, and names two guards with one name in its own words. When
    LangChain renames those variables or moves the read, this fails here, loudly, instead of
    agents without tools silently getting a tools node again.
    """
    seen = []

    class Probe(AgentMiddleware):
        def __init__(self, name: str) -> None:
            super().__init__()
            self._probe_name = name

        @property
        def name(self) -> str:
            return self._probe_name

        @property
        def tools(self):
            found = _compat.agent_being_built()
            seen.append(found)
            if found is None:
                return []
            if sum(getattr(m, "name", None) == self.name for m in found.middleware) > 1:
                raise ValueError(f"two probes named {self.name!r}")
            if not found.tools:
                self.__class__ = HookedProbe  # read before create_agent looks at the class
            return []

    class HookedProbe(Probe):
        def wrap_tool_call(self, request, handler):
            return handler(request)

    model = ScriptedChatModel(script=[AIMessage("done")] * 2)
    probe = Probe("probe")
    agent = create_agent(model, [lookup], middleware=[probe])
    assert seen, "create_agent no longer reads `tools` first: see _compat.agent_being_built"
    assert seen[0] is not None, "LangChain changed create_agent: see _compat.agent_being_built"
    assert seen[0] == _compat.AgentInputs(tools=(lookup,), middleware=(probe,))
    assert type(probe) is Probe
    tool_free = create_agent(model, [], middleware=[Probe("other")])
    assert "tools" in tool_free.get_graph().nodes  # the class read after `tools` was fitted
    with pytest.raises(ValueError, match="two probes named 'p'"):  # not LangChain's own
        create_agent(model, [lookup], middleware=[Probe("p"), Probe("p")])
    assert "tools" in agent.get_graph().nodes
    assert _compat.agent_being_built() is None  # outside a build


# What reading a caller's frame takes: `sys._getframe`, `inspect.currentframe`, a frame's
# `f_back`/`f_locals`, a traceback's `tb_frame`.
_FRAME_READS = {"_getframe", "currentframe", "f_back", "f_locals", "tb_frame"}


def _frame_readers(root: Path) -> list[str]:
    """Every function of the package that reads a frame, as `file:function` (innermost)."""
    import ast

    readers: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        functions = [
            n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                read = node.attr
            elif isinstance(node, ast.Name):
                read = node.id
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                read = node.value  # `getattr(sys, "_getframe")`
            else:
                continue
            if read not in _FRAME_READS:
                continue
            around = [f for f in functions if f.lineno <= node.lineno <= (f.end_lineno or 0)]
            inner = max(around, key=lambda f: f.lineno).name if around else "<module>"
            readers.add(f"{path.relative_to(root).as_posix()}:{inner}")
    return sorted(readers)


def test_only_agent_being_built_reads_a_frame():
    """Issue 37 item 1: `create_agent`'s locals were read through `sys._getframe` from
    `name`, `tools` and four `_compat` functions. One read is left, in
    `_compat.agent_being_built` (why: the test above); any other fails here.
    """
    import langgraph_replay_guard

    root = Path(langgraph_replay_guard.__file__).parent
    assert _frame_readers(root) == ["_compat.py:agent_being_built"]


def test_dynamic_tool_error_is_create_agents_own_message():
    text = _compat.dynamic_tool_error(["dynamic"], ["lookup"])
    assert re.search(r"(?s)Middleware added tools.*Unknown tools:.*dynamic", text)
    assert "Registered tools: ['lookup']" in text


def test_a_scoped_tool_node_raises_what_its_scope_kept_sync_and_async():
    import asyncio

    from langgraph.errors import GraphBubbleUp

    class Carried(GraphBubbleUp):
        pass

    @tool
    def broken(id: str) -> str:
        """Raise a control-flow signal carrying an error."""
        raise Carried(id)

    class Scope:
        def __init__(self, config):
            self.kept = None

        def __enter__(self):
            return self

        def __exit__(self, kind, error, trace):
            if isinstance(error, Carried):
                self.kept = KeyError(error.args[0])
                return True
            return False

        def finish(self, output):
            return output

        def error(self):
            return self.kept

    node = _compat.scoped_tool_node([broken], task_scope=Scope)
    ai = AIMessage("", id="a1", tool_calls=[{"name": "broken", "args": {"id": "k"}, "id": "c1"}])
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    with pytest.raises(KeyError, match="k"):
        graph.invoke({"messages": [ai]})
    with pytest.raises(KeyError, match="k"):
        asyncio.run(graph.ainvoke({"messages": [ai]}))


def test_own_interrupt_tells_the_tasks_own_interrupt_from_a_subgraphs_and_other_signals():
    from langgraph.errors import GraphBubbleUp, GraphInterrupt, ParentCommand
    from langgraph.types import Command, interrupt

    def ask(state: MessagesState) -> dict:
        interrupt("inner question")
        return {}

    inner = StateGraph(MessagesState)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")
    subgraph = inner.compile()
    seen: dict[str, bool] = {}

    def node(state: MessagesState) -> dict:
        config = get_config()
        interrupt("first")  # answered on resume: the next one is this task's second
        try:
            interrupt("second")
        except GraphInterrupt as exc:
            seen["own (second)"] = _compat.own_interrupt(exc, config)
        try:
            subgraph.invoke({"messages": []})
        except GraphInterrupt as exc:
            seen["subgraph's"] = _compat.own_interrupt(exc, config)
        seen["parent command"] = _compat.own_interrupt(
            ParentCommand(Command(graph=Command.PARENT)), config
        )
        seen["bubble-up"] = _compat.own_interrupt(GraphBubbleUp(), config)
        try:
            interrupt("third")
        except GraphInterrupt as exc:
            seen["own, other config"] = _compat.own_interrupt(
                exc, {"configurable": {"checkpoint_ns": "elsewhere:1"}}
            )
            raise
        return {}

    builder = StateGraph(MessagesState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "own-interrupt"}}
    graph.invoke({"messages": []}, config)
    graph.invoke(Command(resume="yes"), config)
    assert seen == {
        "own (second)": True,
        "subgraph's": False,
        "parent command": False,
        "bubble-up": False,
        "own, other config": False,
    }


def test_task_run_is_one_object_per_run_of_a_task():
    # The guard tells a middleware's retry inside one run of the tools task (same object)
    # from the task run again (a resume, a crash, from history: another object).
    seen: list[object | None] = []

    def node(state: MessagesState) -> dict[str, list[AIMessage]]:
        config = get_config()
        seen.append(_compat.task_run(config))
        seen.append(_compat.task_run(config))
        return {"messages": [AIMessage("done")]}

    builder = StateGraph(MessagesState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "task-run"}}
    graph.invoke({"messages": []}, config)
    before = next(s for s in graph.get_state_history(config) if s.next == ("node",))
    graph.invoke(None, before.config)  # the same task, run again from history

    assert None not in seen
    assert seen[0] is seen[1]  # one run: one object
    assert seen[2] is seen[3]
    assert seen[0] is not seen[2]  # another run: another object
    assert _compat.task_run(None) is None
    assert _compat.task_run({"configurable": {}}) is None


def test_checkpoint_and_store_sizes_are_measured_in_the_database(tmp_path):
    """`checkpoint_sizes`/`store_value_sizes` read SqliteSaver's and SqliteStore's tables."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    db = str(tmp_path / "sizes.sqlite")
    with SqliteSaver.from_conn_string(db) as saver, SqliteStore.from_conn_string(db) as store:
        saver.setup()
        store.setup()
        graph = StateGraph(MessagesState)
        graph.add_node("say", lambda _state: {"messages": [AIMessage("y" * 50_000)]})
        graph.add_edge(START, "say")
        graph.add_edge("say", END)
        graph.compile(checkpointer=saver).invoke(
            {"messages": []}, {"configurable": {"thread_id": "t%_"}}
        )
        sizes = _compat.checkpoint_sizes(saver, "t%_")
        assert sizes is not None
        assert len(sizes) == 3
        assert [i for i, _ in sizes] == sorted((i for i, _ in sizes), reverse=True)
        assert sizes[0][1] > 50_000 > sizes[-1][1]  # newest first, holding the message
        assert _compat.checkpoint_sizes(saver, "other") == []
        store.put(("a", "t%_"), "k", {"text": "z" * 10_000})
        store.put(("a", "t%_", "below"), "k2", {"text": "z"})
        store.put(("a", "t%x"), "k3", {"text": "z"})  # '%' is no wildcard here
        found = _compat.store_value_sizes(store, ("a", "t%_"))
        assert found is not None
        assert set(found) == {(("a", "t%_"), "k"), (("a", "t%_", "below"), "k2")}
        assert found[(("a", "t%_"), "k")] > 10_000
    assert _compat.checkpoint_sizes(InMemorySaver(), "t") is None
    assert _compat.store_value_sizes(InMemoryStore(), ("a",)) is None


def test_strict_msgpack_accessors_read_langgraphs_allow_list():
    # issue 33: the CLI and the ledger decode with LangGraph's strict list and hook.
    import ormsgpack

    from langgraph_replay_guard._compat import (
        msgpack_safe_methods,
        msgpack_safe_types,
        strict_msgpack_ext_hook,
    )

    types = msgpack_safe_types()
    assert ("langchain_core.messages.ai", "AIMessage") in types
    assert ("langgraph.types", "Command") in types
    assert ("os", "system") not in types
    assert ("datetime", "datetime", "fromisoformat") in msgpack_safe_methods()
    hook = strict_msgpack_ext_hook(types)
    refused = ormsgpack.packb(["os", "getcwd_not_called", "payload"])
    assert hook(0, refused) == "payload"  # a name off the list: its payload, never called
    allowed = ormsgpack.packb(["uuid", "UUID", "0" * 32])
    assert str(hook(0, allowed)) == "00000000-0000-0000-0000-000000000000"


def test_watching_model_requests_sees_every_override_below():
    from langchain.agents.middleware import ModelRequest

    model = ScriptedChatModel(script=[])
    request = ModelRequest(model=model, messages=[], tools=[])
    offered = tool("set_order", description="Set an order.")(lambda key: key)
    with _compat.watching_model_requests(request) as (handed, below):
        assert isinstance(handed, ModelRequest)
        assert below == []
        inner = handed.override(tools=[offered])
        innermost = inner.override(tool_choice="auto")
    assert below == [inner, innermost]
    assert innermost.tools == [offered]
    request.override(tools=[])  # outside the block: nothing is collected
    assert len(below) == 2


def test_subgraph_namespace_and_first_step_are_read_in_a_running_graph():
    seen: dict[str, object] = {}

    def record(name: str):
        def node(state: MessagesState) -> dict[str, list[object]]:
            seen[name] = _compat.subgraph_namespace(get_config())
            seen[f"{name} first"] = _compat.at_first_step(get_config())
            return {"messages": []}

        return node

    inner = StateGraph(MessagesState)
    inner.add_node("inner", record("inner"))
    inner.add_node("later", record("later"))
    inner.add_edge(START, "inner")
    inner.add_edge("inner", "later")
    outer = StateGraph(MessagesState)
    outer.add_node("top", record("top"))
    outer.add_node("sub", inner.compile())
    outer.add_edge(START, "top")
    outer.add_edge("top", "sub")
    outer.compile(checkpointer=InMemorySaver()).invoke(
        {"messages": []}, {"configurable": {"thread_id": "t"}}
    )
    assert seen["top"] is None
    assert isinstance(seen["inner"], str)
    assert seen["inner"].startswith("sub:")
    assert "|inner:" in seen["inner"]
    # A sub-graph's steps count from its own run: its first node is at the first step.
    assert (seen["top first"], seen["inner first"], seen["later first"]) == (True, True, False)
    assert _compat.subgraph_namespace(None) is None
    assert _compat.at_first_step(None) is None
