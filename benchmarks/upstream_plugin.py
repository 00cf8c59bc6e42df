"""Pytest plugin for upstream_suites.py: guard every agent of an upstream suite, log outcomes."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import os
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, NotRequired, Optional

# Import the frameworks before pytest puts the sdist's root on sys.path (conftests, collection):
# the suites must test the INSTALLED packages, with the guard's modules bound to the originals.
import langchain.agents
import langchain.agents.factory
import langgraph.graph
import langgraph.graph.state
import langgraph.prebuilt
import langgraph.prebuilt.chat_agent_executor
import langgraph.prebuilt.tool_node
import pydantic
import pydantic.v1
import pytest
from typing_extensions import is_typeddict

import langgraph_replay_guard
from langgraph_replay_guard import (
    LoopAbortedError,
    ReplayGuard,
    ReplayGuardMiddleware,
    merge_guard_state,
)
from langgraph_replay_guard.testing import ScriptedChatModel

MODE = os.environ.get("REPLAY_GUARD_MODE", "baseline")
RESULTS = os.environ.get("REPLAY_GUARD_RESULTS")
MODES = ("baseline", "agent-last", "agent-first", "react-agent", "tool-node", "tool-node-bare")
CHANNEL = getattr(langgraph_replay_guard, "GUARD_CHANNEL", "replay_guard")
OWN_PACKAGE = "langgraph_replay_guard"
# The guard channel as a user adds it (docs/using-it-with.md, README.md): `dict | None`, so
# that LangGraph starts the channel empty (it cannot call the type) rather than at `{}`.
GUARD_FIELD = NotRequired[Annotated[dict[str, Any] | None, merge_guard_state]]
# The same on a pydantic model or a dataclass: a field that defaults to None.
GUARD_ATTRIBUTE = Annotated[Optional[dict[str, Any]], merge_guard_state]  # noqa: UP045

ORIGINAL_CREATE_AGENT = langchain.agents.factory.create_agent
ORIGINAL_CREATE_REACT_AGENT = langgraph.prebuilt.chat_agent_executor.create_react_agent
ORIGINAL_TOOL_NODE = langgraph.prebuilt.tool_node.ToolNode
STATE_GRAPH = langgraph.graph.state.StateGraph
ORIGINAL_STATE_GRAPH_INIT = STATE_GRAPH.__init__

_inside_guard = threading.local()
_applied = {"count": 0}
_channel_added = {"count": 0}  # tool-node: StateGraphs whose state was given the guard channel
_outcomes: dict[str, dict[str, Any]] = {}
_notes: list[str] = []
SELF_CHECK: list[str] = []
_EXTENDED: dict[type, type] = {}  # each state schema -> the same schema with the guard channel


def _replace_everywhere(original: object, replacement: object, name: str) -> list[str]:
    """Set `name` to `replacement` on every loaded module that holds `original` under it."""
    patched = []
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name.split(".")[0] == OWN_PACKAGE:
            continue
        try:
            if module.__dict__.get(name) is original:
                setattr(module, name, replacement)
                patched.append(module_name)
        except (AttributeError, TypeError):
            continue
    return patched


# -- agent-last / agent-first: ReplayGuardMiddleware in every create_agent ----------------------


def _with_guard_middleware(middleware: Any, first: bool) -> list[Any]:
    guard = ReplayGuardMiddleware()
    items = list(middleware or ())
    return [guard, *items] if first else [*items, guard]


def _guarded_create_agent(first: bool) -> Callable[..., Any]:
    signature = inspect.signature(ORIGINAL_CREATE_AGENT)

    @functools.wraps(ORIGINAL_CREATE_AGENT)
    def create_agent(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        middleware = bound.arguments.get("middleware", ())
        bound.arguments["middleware"] = _with_guard_middleware(middleware, first)
        _applied["count"] += 1
        return ORIGINAL_CREATE_AGENT(*bound.args, **bound.kwargs)

    return create_agent


# -- the guard channel in a state schema, as a user following the docs adds it -----------------


def _has_channel(schema: type) -> bool:
    if issubclass(schema, pydantic.BaseModel):
        return CHANNEL in schema.model_fields
    if issubclass(schema, pydantic.v1.BaseModel):
        return CHANNEL in schema.__fields__
    if dataclasses.is_dataclass(schema):
        return any(f.name == CHANNEL for f in dataclasses.fields(schema))
    return CHANNEL in getattr(schema, "__annotations__", {})


def _importable(cls: type) -> type:
    """Make `cls` importable by its `__module__` and `__name__`, as a user's own class is.

    A checkpoint holding a state instance (a pending Send) is read back into this class by
    module and name, not into a plain dict. Each class gets a module of its own: tests define
    many classes of one name (`State`).
    """
    module = types.ModuleType(f"{__name__}_state_{len(_EXTENDED)}")
    setattr(module, cls.__name__, cls)
    sys.modules[module.__name__] = module
    cls.__module__ = module.__name__
    return cls


def _extend_typed_dict(schema: type) -> type:
    namespace = {
        "__annotations__": {CHANNEL: GUARD_FIELD},
        # The original's module: its string annotations resolve there, as the original's do.
        "__module__": schema.__module__,
        "__qualname__": schema.__qualname__,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # prebuilt's own AgentState classes are deprecated
        return type(schema)(schema.__name__, (schema,), namespace)


def _extend_pydantic(schema: type[pydantic.BaseModel]) -> type:
    field = (GUARD_ATTRIBUTE, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = pydantic.create_model(schema.__name__, __base__=schema, **{CHANNEL: field})
    return _importable(model)


def _extend_pydantic_v1(schema: type[pydantic.v1.BaseModel]) -> type:
    field = (GUARD_ATTRIBUTE, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = pydantic.v1.create_model(schema.__name__, __base__=schema, **{CHANNEL: field})
    return _importable(model)


def _extend_dataclass(schema: type) -> type:
    frozen = schema.__dataclass_params__.frozen  # type: ignore[attr-defined]
    fields = [(CHANNEL, GUARD_ATTRIBUTE, dataclasses.field(default=None))]
    extended = dataclasses.make_dataclass(schema.__name__, fields, bases=(schema,), frozen=frozen)
    return _importable(extended)


def _short(schema: Any) -> str:
    text = repr(schema)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _extended(schema: Any, where: str) -> Any:
    """`schema` with the guard channel added (a subclass, made once per schema)."""
    if not isinstance(schema, type):
        _notes.append(f"{where}: state {_short(schema)} left as it is (not a class)")
        return schema
    if schema in _EXTENDED.values() or _has_channel(schema):
        return schema
    if schema not in _EXTENDED:
        if issubclass(schema, pydantic.BaseModel):
            _EXTENDED[schema] = _extend_pydantic(schema)
        elif issubclass(schema, pydantic.v1.BaseModel):
            _EXTENDED[schema] = _extend_pydantic_v1(schema)
        elif is_typeddict(schema):
            _EXTENDED[schema] = _extend_typed_dict(schema)
        elif dataclasses.is_dataclass(schema):
            _EXTENDED[schema] = _extend_dataclass(schema)
        else:
            _notes.append(
                f"{where}: state {schema.__qualname__} left as it is (not TypedDict,"
                " pydantic or dataclass)"
            )
            return schema
    return _EXTENDED[schema]


def _with_guard_channel(schema: Any, response_format: Any) -> Any:
    """`schema` (or create_react_agent's default, which the docs say to replace) + the channel."""
    executor = langgraph.prebuilt.chat_agent_executor
    if schema is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            structured = response_format is not None
            schema = (
                executor.AgentStateWithStructuredResponse if structured else executor.AgentState
            )
    return _extended(schema, "create_react_agent")


# -- react-agent: guard.wrap(ToolNode(tools)) and the guard channel in the state schema ---------


def _guarded_tools(tools: Any) -> Any:
    """The tools argument as docs/using-it-with.md says: `ReplayGuard().wrap(ToolNode(tools))`."""
    if isinstance(tools, ORIGINAL_TOOL_NODE):
        return ReplayGuard().wrap(tools)
    tools = list(tools)
    if any(isinstance(tool, dict) for tool in tools):
        # Provider built-in tools (dicts) cannot go into a ToolNode: leave the list as it is.
        _notes.append("create_react_agent tools with built-in (dict) tools left unguarded")
        return tools
    return ReplayGuard().wrap(ORIGINAL_TOOL_NODE(tools))


def _guarded_create_react_agent(wrap_tools: bool = True) -> Callable[..., Any]:
    """create_react_agent as the docs say: guarded tools and a state_schema with the channel.

    `wrap_tools=False` (tool-node): the tools are left as they are (the patched `ToolNode`
    guards the node create_react_agent builds); only the state_schema is given the channel,
    as the docs say. Extending it inside `StateGraph` alone is not enough: create_react_agent
    also gives its `agent` node the schema as `input_schema`, and its `tools` Sends carry that
    node's state, so the tools node would see no channel.
    """
    signature = inspect.signature(ORIGINAL_CREATE_REACT_AGENT)

    @functools.wraps(ORIGINAL_CREATE_REACT_AGENT)
    def create_react_agent(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        arguments = bound.arguments
        if wrap_tools:
            arguments["tools"] = _guarded_tools(arguments["tools"])
            _applied["count"] += 1
        schema = arguments.get("state_schema")
        arguments["state_schema"] = _with_guard_channel(schema, arguments.get("response_format"))
        return ORIGINAL_CREATE_REACT_AGENT(*bound.args, **bound.kwargs)

    return create_react_agent


# -- tool-node: every ToolNode constructed anywhere comes back as ReplayGuard().wrap(node) ------


def _is_tool_node_class(candidate: Any) -> bool:
    # By the real MRO: ToolNode's own (ABCMeta) check asks its subclasses, this one included.
    return ORIGINAL_TOOL_NODE in getattr(candidate, "__mro__", ())


def _guard_node(node: Any) -> Any:
    if getattr(_inside_guard, "active", False):
        return node  # the guard building its own copy
    _inside_guard.active = True
    try:
        guarded = ReplayGuard().wrap(node)
    finally:
        _inside_guard.active = False
    _applied["count"] += 1
    return guarded


def _guarded_tool_node_class() -> type:
    """A stand-in for `ToolNode`: building one returns `ReplayGuard().wrap(the real node)`."""

    class Meta(type(ORIGINAL_TOOL_NODE)):  # type: ignore[misc]
        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            # Built as usual (a test's own subclass too, __init__ once), then guarded.
            return _guard_node(super().__call__(*args, **kwargs))

        # `isinstance(node, ToolNode)` stays true for the guarded (original-class) nodes.
        def __instancecheck__(cls, instance: Any) -> bool:
            if cls is GuardedToolNode:
                return _is_tool_node_class(type(instance))
            return super().__instancecheck__(instance)

        def __subclasscheck__(cls, subclass: Any) -> bool:
            if cls is GuardedToolNode:
                return _is_tool_node_class(subclass)
            return super().__subclasscheck__(subclass)

    class GuardedToolNode(ORIGINAL_TOOL_NODE, metaclass=Meta):  # type: ignore[misc]
        pass

    GuardedToolNode.__name__ = GuardedToolNode.__qualname__ = "ToolNode"
    GuardedToolNode.__module__ = ORIGINAL_TOOL_NODE.__module__
    return GuardedToolNode


# -- tool-node: ... and every StateGraph gets the guard channel in its state, as the docs say --


def _state_graph_init() -> Callable[..., None]:
    """`StateGraph.__init__`, with the guard channel added to `state_schema`.

    Input and output schemas given explicitly stay as they are; left out, they default to
    the (extended) state schema, as they would for a user's own state with the channel.
    """
    signature = inspect.signature(ORIGINAL_STATE_GRAPH_INIT)

    @functools.wraps(ORIGINAL_STATE_GRAPH_INIT)
    def __init__(*args: Any, **kwargs: Any) -> None:
        bound = signature.bind(*args, **kwargs)
        schema = bound.arguments["state_schema"]
        extended = _extended(schema, type(bound.arguments["self"]).__name__)
        if extended is not schema:
            _channel_added["count"] += 1
        bound.arguments["state_schema"] = extended
        ORIGINAL_STATE_GRAPH_INIT(*bound.args, **bound.kwargs)

    return __init__


def _replacements(mode: str) -> dict[str, tuple[object, object]]:
    """Per attribute name: the original object and what replaces it in this mode."""
    if mode in {"agent-last", "agent-first"}:
        guarded = _guarded_create_agent(first=mode == "agent-first")
        return {"create_agent": (ORIGINAL_CREATE_AGENT, guarded)}
    if mode == "react-agent":
        return {"create_react_agent": (ORIGINAL_CREATE_REACT_AGENT, _guarded_create_react_agent())}
    if mode == "tool-node-bare":
        return {"ToolNode": (ORIGINAL_TOOL_NODE, _guarded_tool_node_class())}
    if mode == "tool-node":
        react = _guarded_create_react_agent(wrap_tools=False)
        return {
            "ToolNode": (ORIGINAL_TOOL_NODE, _guarded_tool_node_class()),
            "create_react_agent": (ORIGINAL_CREATE_REACT_AGENT, react),
        }
    if mode != "baseline":
        raise pytest.UsageError(f"REPLAY_GUARD_MODE={mode!r}: not one of {', '.join(MODES)}")
    return {}


def _apply() -> None:
    for name, (original, replacement) in REPLACEMENTS.items():
        PATCHED.setdefault(name, []).extend(_replace_everywhere(original, replacement, name))
    if MODE == "tool-node" and STATE_GRAPH.__init__ is ORIGINAL_STATE_GRAPH_INIT:
        # On the class itself: every StateGraph (and subclass) built anywhere, whichever name
        # it was imported under, create_react_agent's own graph included.
        STATE_GRAPH.__init__ = _state_graph_init()  # type: ignore[method-assign]
        PATCHED["StateGraph.__init__"] = [STATE_GRAPH.__module__]


# Patch now, before any conftest or test module imports the factories.
REPLACEMENTS = _replacements(MODE)
PATCHED: dict[str, list[str]] = {}
_apply()


# -- outcomes -----------------------------------------------------------------------------------


def _first_line(report: pytest.TestReport | pytest.CollectReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) or str(report.longrepr or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def _outcome(report: pytest.TestReport) -> str | None:
    """The test's outcome after this phase, or None when the phase changes nothing."""
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if report.skipped:
        return "skipped"
    if report.failed:
        return "failed" if report.when == "call" else "error"
    return "passed" if report.when == "call" else None


# -- self-check: through the patched names, a looping agent must be stopped --------------------


def _looping_agent(mode: str, lookup: Any, model: Any) -> Any:
    if mode in {"agent-last", "agent-first"}:
        return langchain.agents.create_agent(model, [lookup])
    executor = langgraph.prebuilt.chat_agent_executor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode in {"react-agent", "tool-node"}:
            # No state_schema: the patch gives the default state the channel.
            return executor.create_react_agent(model, [lookup])
        # tool-node-bare: create_react_agent builds its ToolNode by the (patched) name; the
        # channel is added by hand, as the patch does not.
        return executor.create_react_agent(
            model, [lookup], state_schema=_with_guard_channel(None, None)
        )


def _hand_built_graph(lookup: Any, model: Any) -> Any:
    """A graph as the suites build theirs, through the patched names: StateGraph, ToolNode."""
    graph = langgraph.graph

    def agent(state: Any) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = graph.StateGraph(graph.MessagesState)
    if CHANNEL not in builder.channels:
        raise AssertionError(f"StateGraph(MessagesState) has no {CHANNEL!r} channel")
    builder.add_node("agent", agent)
    builder.add_node("tools", langgraph.prebuilt.ToolNode([lookup]))
    builder.add_edge(graph.START, "agent")
    builder.add_conditional_edges("agent", langgraph.prebuilt.tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


def _runs(build: Callable[[Any, Any], Any]) -> int:
    """How many times a lookup that a scripted model repeats 20 times really runs."""
    runs: list[str] = []

    def lookup(id: str) -> str:
        """Look a customer up."""
        runs.append(id)
        return f"{id}: premium plan"

    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=20)
    # A tools node always goes back to the model, so the guard ends the run by raising.
    with contextlib.suppress(LoopAbortedError):
        build(lookup, model).invoke({"messages": [("user", "Who is P1?")]})
    return len(runs)


def _self_check(mode: str) -> str:
    """Whether the patched factories really guard: a 20-times repeated lookup runs once."""
    before, added = _applied["count"], _channel_added["count"]
    try:
        factory = "create_agent" if mode.startswith("agent-") else "create_react_agent"
        counts = {factory: _runs(functools.partial(_looping_agent, mode))}
        if mode == "tool-node":
            counts["StateGraph(MessagesState)"] = _runs(_hand_built_graph)
    except Exception as exc:  # the check itself broke: report it, run the suite anyway
        return f"FAILED: {type(exc).__name__}: {exc}"
    finally:
        _applied["count"], _channel_added["count"] = before, added
    ok = all(n == 1 for n in counts.values())
    ran = ", ".join(f"{n} ({what})" for what, n in counts.items())
    return f"{'ok' if ok else 'FAILED'}: a lookup repeated 20 times ran {ran}"


def pytest_configure(config: pytest.Config) -> None:
    _apply()  # modules imported since the plugin was (the initial conftests) too
    if MODE != "baseline":
        SELF_CHECK.append(_self_check(MODE))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    before = _applied["count"]
    try:
        return (yield)
    finally:
        entry = _outcomes.get(item.nodeid)
        if entry is not None:
            entry["guarded"] = _applied["count"] - before


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    outcome = _outcome(report)
    if outcome is None:
        return
    entry = _outcomes.setdefault(report.nodeid, {"outcome": outcome, "message": ""})
    if entry["outcome"] in {"failed", "error"} and outcome not in {"failed", "error"}:
        return  # a teardown after a failure keeps the failure
    if entry["outcome"] in {"failed", "error"} and outcome == "error":
        return  # a teardown error after a failed call: the call's message is the first cause
    entry["outcome"] = outcome
    entry["message"] = _first_line(report) if outcome in {"failed", "error"} else ""


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _outcomes[report.nodeid] = {"outcome": "error", "message": _first_line(report)}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not RESULTS:
        return
    payload = {
        "mode": MODE,
        "patched": PATCHED,
        "notes": sorted(set(_notes)),
        "self_check": SELF_CHECK[0] if SELF_CHECK else None,
        "guard_applied": _applied["count"],
        "channel_added": _channel_added["count"],
        "modules": {
            "langchain": langchain.__file__,
            "langgraph.prebuilt": langgraph.prebuilt.__file__,
            OWN_PACKAGE: langgraph_replay_guard.__file__,
        },
        "tests": _outcomes,
    }
    Path(RESULTS).write_text(json.dumps(payload, indent=1, sort_keys=True))
