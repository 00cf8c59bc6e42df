"""The one place that reads LangGraph's and LangChain's private internals."""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

if TYPE_CHECKING:
    from langgraph.prebuilt import ToolNode

__all__ = [
    "AgentBuild",
    "AgentInputs",
    "TaskScope",
    "ToolNodeSettings",
    "agent_being_built",
    "agent_build",
    "at_first_step",
    "bind_hooks",
    "channel_without_reducer",
    "channel_writer",
    "checkpoint_sizes",
    "checkpoint_thread_ids",
    "delegate_store",
    "dynamic_tool_error",
    "graph_has_channel",
    "graph_state",
    "handled_error_types",
    "injected_arg_names",
    "is_default_tool_error_handler",
    "msgpack_safe_methods",
    "msgpack_safe_types",
    "own_interrupt",
    "run_checkpointer",
    "run_durability",
    "runs_the_tool_itself",
    "scoped_tool_node",
    "signature_once",
    "store_value_sizes",
    "strict_msgpack_ext_hook",
    "subgraph_namespace",
    "task_run",
    "tool_error_content",
    "tool_node_settings",
    "tool_nodes",
    "watching_model_requests",
    "with_channel_writer",
    "wrap_node_tools",
]

# Supported ranges (pyproject.toml): langgraph >=1.0,<2 (prebuilt ToolNode 1.x), langchain
# >=1.3,<2. tests/unit/test_compat.py checks every accessor against the installed versions.

_Hook = TypeVar("_Hook", bound=Callable[..., Any])

logger = logging.getLogger("langgraph_replay_guard")


def signature_once(hook: _Hook) -> _Hook:
    """`hook` with its signature computed once, at import, instead of on every call.

    `create_agent` wraps each middleware `wrap_*` hook in langsmith's `traceable`, which calls
    `inspect.signature` on the hook at every call, tracing on or off: about a third of the
    wrapper's cost, twice per agent step. A precomputed `__signature__` turns that into an
    attribute read (`inspect.signature` returns it as is).
    """
    setattr(hook, "__signature__", inspect.signature(hook))  # noqa: B010 (a function attribute)
    return hook


def bind_hooks(obj: Any, owner: type, names: Sequence[str]) -> None:
    """Give `obj` its own bound hooks, each with its signature computed once.

    `create_agent` wraps `m.wrap_model_call` (a bound method) in `traceable`, which calls
    `inspect.signature` on it twice per call; for a bound method that builds a new
    signature without `self` each time (`signature_once` only spares the function's own).
    A `functools.partial` carrying the signature without `self` is read as it is. The hook
    is the same function, called with the same arguments. A subclass that defines a hook of
    its own keeps its method.

    Args:
        obj: The middleware.
        owner: The class whose hooks these are.
        names: The hooks' names.
    """
    for name in names:
        func: Callable[..., Any] = getattr(owner, name)
        own: object = getattr(type(obj), name, None)
        if own is not func:
            continue
        sig = inspect.signature(func)
        hook = functools.partial(func, obj)
        # Without `self`, as `inspect.signature` gives it for the bound method.
        hook.__signature__ = sig.replace(  # type: ignore[attr-defined]
            parameters=list(sig.parameters.values())[1:]
        )
        setattr(obj, name, hook)


@dataclass(frozen=True)
class AgentInputs:
    """What the `create_agent` call running now was given: its `tools` and `middleware`."""

    tools: tuple[Any, ...]
    """The `tools` argument (empty when None was given)."""
    middleware: tuple[Any, ...]
    """The `middleware` argument, in order."""


# `create_agent` reads `getattr(m, "tools", [])` of every middleware inside a comprehension
# (its own frame before Python 3.12), under the middleware's property and the caller here.
_MAX_FRAMES_UP = 4
_CREATE_AGENT_MODULE = "langchain.agents.factory"


def agent_being_built() -> AgentInputs | None:
    """The `tools` and `middleware` of the `create_agent` call reading a middleware now.

    The one frame read of the package (tests/unit/test_compat.py allows no other), and the
    one thing LangChain gives no public way to know: whether the agent being built gets a
    tools node. `create_agent` adds one whenever a middleware's CLASS has a tool hook, even
    to an agent without tools (its graph and its routing change), and reads each
    middleware's `tools` (langchain/agents/factory.py, `middleware_tools = [...]`) before
    it looks at the tool hooks and before its duplicate-name check. A middleware whose
    `tools` property calls this can fit its tool hooks to the agent and name a problem in
    its own words first.

    Reads the local variables `tools` and `middleware` of
    `langchain.agents.factory.create_agent`, at most a few frames up. When LangChain renames
    them or moves the read, this returns None (the guard keeps its tool hooks, and
    `create_agent`'s own duplicate check applies), and
    `test_agent_being_built_is_read_before_create_agent_looks_at_tool_hooks` fails.

    Returns:
        The arguments of the `create_agent` call running now, or None outside one.
    """
    frame = sys._getframe(1)
    for _ in range(_MAX_FRAMES_UP + 1):
        frame_back = frame.f_back
        if frame_back is None:
            return None
        frame = frame_back
        if frame.f_code.co_name != "create_agent":
            continue
        if frame.f_globals.get("__name__") != _CREATE_AGENT_MODULE:
            continue
        found = frame.f_locals
        tools, middleware = found.get("tools"), found.get("middleware")
        if not isinstance(tools, (list, tuple)) or not isinstance(middleware, (list, tuple)):
            return None
        return AgentInputs(tools=tuple(tools), middleware=tuple(middleware))
    return None


@dataclass(frozen=True)
class AgentBuild:
    """What `create_agent` built around a model call: its tools node and its tool hooks."""

    tools: tuple[Any, ...]
    """The tools the agent's tools node runs (the user's and the middlewares'); none
    without a tools node."""
    tool_hook_owners: tuple[Any, ...]
    """The middlewares whose `wrap_tool_call`/`awrap_tool_call` the tools node runs."""


# How far `agent_build` follows closures: the model call's handler chain is two closures
# per middleware inside the caller, and the tool hook chain two per middleware.
_MAX_REACHED = 400

_BOUND_MODEL = "create_agent.<locals>._get_bound_model"


def _reached(start: Any) -> Iterator[Any]:
    """Every function, bound method and partial reachable from `start` through closures."""
    seen: set[int] = set()
    stack = [start]
    while stack and len(seen) < _MAX_REACHED:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        yield obj
        if isinstance(obj, functools.partial):
            stack.extend([obj.func, *obj.args])
            continue
        method_self = getattr(obj, "__self__", None)
        method_func = getattr(obj, "__func__", None)
        if method_func is not None and method_self is not None:  # a bound method
            stack.append(method_func)
            continue
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is not None:
            stack.append(wrapped)
        if inspect.isfunction(obj):
            for cell in obj.__closure__ or ():
                try:
                    content = cell.cell_contents
                except ValueError:  # a cell not filled yet
                    continue
                if callable(content) and not isinstance(content, type):
                    stack.append(content)


def _hook_owner(obj: Any) -> Any:
    """The object a hook is bound to: a bound method's `self`, a partial's first argument."""
    if isinstance(obj, functools.partial):
        return obj.args[0] if obj.args else None
    return getattr(obj, "__self__", None) if getattr(obj, "__func__", None) else None


def agent_build(handler: Callable[..., Any]) -> AgentBuild | None:
    """The tools node and the tool hooks of the agent a model call's `handler` belongs to.

    LangChain gives a middleware no public way to learn the agent it is in: `create_agent`
    reads `m.name`, `m.tools` and `m.state_schema` of each middleware and tells it nothing;
    a model request holds the tools a middleware outside this one left it (a tool selector
    offers a selection), and nothing says whether another middleware runs tools itself.
    The model call's handler leads to `create_agent`'s own model function, whose
    closure (`_get_bound_model`) holds the tools node and the composed tool hooks it
    checks offered tools against. tests/unit/test_compat.py fails when LangChain changes
    this; here it returns None and the guard treats the agent as one it cannot see whole
    (warnings instead of errors, no check for offered tools nothing runs).

    Args:
        handler: The handler `create_agent` passed to the middleware's model hook.

    Returns:
        The agent's tools node's tools and the owners of its tool hooks, or None.
    """
    for found in _reached(handler):
        code = getattr(found, "__code__", None)
        if code is None or found.__qualname__ != _BOUND_MODEL:
            continue
        if getattr(found, "__module__", None) != "langchain.agents.factory":
            continue
        cells = dict(zip(code.co_freevars, found.__closure__ or (), strict=False))
        try:
            node = cells["tool_node"].cell_contents
            hooks = [
                cells[n].cell_contents
                for n in ("wrap_tool_call_wrapper", "awrap_tool_call_wrapper")
            ]
        except (KeyError, ValueError):
            return None
        tools = tuple(getattr(node, "tools_by_name", {}).values()) if node is not None else ()
        owners: list[Any] = []
        for hook in hooks:
            for reached in _reached(hook) if hook is not None else ():
                owner = _hook_owner(reached)
                known = any(owner is seen for seen in owners)  # by identity, not `__eq__`
                if owner is not None and not known and hasattr(owner, "wrap_tool_call"):
                    owners.append(owner)
        if any(hook is not None for hook in hooks) and not owners:
            return None  # hooks LangChain composes another way: nothing is guessed
        return AgentBuild(tools=tools, tool_hook_owners=tuple(owners))
    return None


_WATCHED_REQUESTS: ContextVar[list[Any] | None] = ContextVar(
    "replay_guard_watched_requests", default=None
)


@functools.cache
def _watched_request_class() -> type:
    """A `ModelRequest` subclass whose instances add themselves to `_WATCHED_REQUESTS`."""
    from langchain.agents.middleware import ModelRequest

    class _WatchedModelRequest(ModelRequest):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            seen = _WATCHED_REQUESTS.get()
            if seen is not None:
                seen.append(self)

    return _WatchedModelRequest


@contextmanager
def watching_model_requests(request: Any) -> Iterator[tuple[Any, list[Any]]]:
    """`request` as a copy whose derived requests are collected while the block runs.

    A middleware inside the guard's model hook changes the request with
    `ModelRequest.override`, which is `dataclasses.replace`: the new request is built with
    the class of the one it replaces. Handed this copy, the guard sees every request made
    from it below, the model's own included: the tools a middleware inside it offers
    (`wrap_model_call` adding one it serves itself) are in their `tools`. A request a
    middleware builds from scratch is not seen.

    Args:
        request: The `ModelRequest` the guard hands down.

    Yields:
        The copy to hand down, and the list the requests made from it go to.
    """
    seen: list[Any] = []
    token = _WATCHED_REQUESTS.set(seen)
    try:
        values = {f.name: getattr(request, f.name) for f in fields(request) if f.init}
        handed = _watched_request_class()(**values)
        seen.clear()  # the copy itself is the guard's request, not one made below
        yield handed, seen
    finally:
        _WATCHED_REQUESTS.reset(token)


def dynamic_tool_error(unknown: Sequence[str], registered: Collection[str]) -> str:
    """`create_agent`'s own message for tools a model request offers that no node runs.

    Args:
        unknown: The offered tools the agent does not have.
        registered: The tools it has.

    Returns:
        The message LangChain raises its `ValueError` with.
    """
    from langchain.agents.factory import DYNAMIC_TOOL_ERROR_TEMPLATE

    return DYNAMIC_TOOL_ERROR_TEMPLATE.format(
        unknown_tool_names=list(unknown), available_tool_names=sorted(registered)
    )


@dataclass(frozen=True)
class ToolNodeSettings:
    """What a `ToolNode` was built with; it keeps these private and has no copy method."""

    wrap_tool_call: Callable[..., Any] | None
    awrap_tool_call: Callable[..., Any] | None
    messages_key: str
    handle_tool_errors: Any


def tool_node_settings(node: Any) -> ToolNodeSettings:
    """The settings of a `langgraph.prebuilt.ToolNode`, to build a guarded copy of it.

    Args:
        node: The ToolNode.

    Returns:
        Its wrappers, messages key and `handle_tool_errors` setting.
    """
    return ToolNodeSettings(
        wrap_tool_call=node._wrap_tool_call,
        awrap_tool_call=node._awrap_tool_call,
        messages_key=node._messages_key,
        handle_tool_errors=node._handle_tool_errors,
    )


def is_default_tool_error_handler(flag: Any) -> bool:
    """Whether `flag` is LangGraph's default `handle_tool_errors` callable.

    The default answers only `ToolInvocationError` (bad arguments); it is private, so it is
    recognised by name.
    """
    return callable(flag) and getattr(flag, "__name__", "") == "_default_handle_tool_errors"


def handled_error_types(flag: Callable[..., Any]) -> tuple[type[BaseException], ...]:
    """The exception types a `handle_tool_errors` callable answers (from its annotations).

    Falls back to every `Exception` when LangGraph no longer has its private helper.
    """
    from langgraph.prebuilt import tool_node as prebuilt

    infer = getattr(prebuilt, "_infer_handled_types", None)
    if infer is None:
        return (Exception,)
    handled = infer(flag)
    return handled if isinstance(handled, tuple) else (handled,)


def tool_error_content(error: Exception, flag: Any) -> str:
    """The ToolMessage text a `ToolNode` gives for a tool error under `handle_tool_errors=flag`."""
    from langgraph.prebuilt import tool_node as prebuilt

    content_for = getattr(prebuilt, "_handle_tool_error", None)
    if content_for is None:
        return f"Error: {error!r}\n Please fix your mistakes."
    return str(content_for(error, flag=flag))


def run_checkpointer(configurable: Mapping[str, Any]) -> Any:
    """The checkpointer of the running graph (from a node's `configurable`), or None."""
    return configurable.get("__pregel_checkpointer")


def run_durability(configurable: Mapping[str, Any]) -> str:
    """The durability mode of the running graph (`"sync"`, `"async"` or `"exit"`)."""
    durability = configurable.get("__pregel_durability")
    return durability if isinstance(durability, str) else "async"


def delegate_store(store: Any) -> Any:
    """The store a wrapping store delegates to, or None.

    `langgraph dev` hands nodes a batching wrapper that keeps the real store in `_store`;
    the guard needs the real one to make a claim atomic in its database.
    """
    inner = getattr(store, "_store", None)
    return None if inner is store else inner


ChannelWriter = Callable[[Sequence[tuple[str, Any]]], None]


def _task_function(config: Mapping[str, Any] | None, key: str) -> Callable[..., Any] | None:
    """A function LangGraph puts in a running task's config (`__pregel_send`...); else None."""
    configurable = config.get("configurable") if config else None
    # `type(...) is dict` first: an ABC's isinstance is a Python call, and every step asks.
    mapping = type(configurable) is dict or isinstance(configurable, Mapping)
    found = configurable.get(key) if mapping else None  # type: ignore[union-attr]
    return found if callable(found) else None


def task_run(config: Mapping[str, Any] | None) -> object | None:
    """An object that is one run of the running task (its scratchpad); None outside a graph.

    LangGraph makes a new one each time it runs a task: a task run again after a crash, a
    resume or from history gets another, a middleware's retry inside one run sees the same.
    """
    configurable = config.get("configurable") if config else None
    found = configurable.get("__pregel_scratchpad") if isinstance(configurable, Mapping) else None
    return found


def channel_writer(config: Mapping[str, Any] | None) -> ChannelWriter | None:
    """The running task's channel writer, from a node's config; None outside a graph.

    Writes sent this way are saved with the task's own output, in the same checkpoint
    write, and never appear in what the node returns (LangGraph's public `push_message`
    writes a message this way).
    """
    return _task_function(config, "__pregel_send")


_FIRST_NODE_STEP = 1
"""The scratchpad step of a graph run's first nodes (LangGraph 1.x: the input is step -1)."""


def at_first_step(config: Mapping[str, Any] | None) -> bool | None:
    """Whether the running task is of its graph run's first step; None outside a graph.

    The scratchpad LangGraph hands a task counts the steps of the run of the task's own
    graph (a sub-graph's count starts again at each of its runs).
    """
    step = getattr(task_run(config), "step", None)
    return step == _FIRST_NODE_STEP if type(step) is int else None


def subgraph_namespace(config: Mapping[str, Any] | None) -> str | None:
    """The running task's checkpoint namespace when it runs in a sub-graph; else None.

    A task's namespace is its node and task id (`tools:<id>`), after its parent task's
    own with `|` between them when its graph runs inside a task of another graph (a
    sub-graph node, or a graph invoked in a tool's body).
    """
    configurable = config.get("configurable") if config else None
    namespace = configurable.get("checkpoint_ns") if isinstance(configurable, Mapping) else None
    return namespace if isinstance(namespace, str) and "|" in namespace else None


def graph_has_channel(config: Mapping[str, Any] | None, channel: str) -> bool | None:
    """Whether the running graph has a state channel; None outside a graph.

    A node reads its graph's channels through the read function LangGraph puts in its
    config; a key the graph lacks raises `KeyError` there.
    """
    read = _task_function(config, "__pregel_read")
    if read is None:
        return None
    try:
        read([channel])
    except KeyError:
        return False
    except Exception:  # a reader that works differently: do not guess
        return None
    return True


def channel_without_reducer(
    config: Mapping[str, Any] | None, channel: str, reducer: Callable[[Any, Any], Any]
) -> str | None:
    """The kind of the running graph's `channel` when it does not merge with `reducer`.

    A state key declared without the reducer, or with it not last in `Annotated[...]`,
    becomes a `LastValue` channel: each write replaces the value, and LangGraph says
    nothing. The read function LangGraph puts in a task's config is a `partial` of its
    `local_read` over the graph's channels; a reducer channel
    (`BinaryOperatorAggregate`) keeps its function as `operator`.

    Args:
        config: The running task's config.
        channel: The state key.
        reducer: The function the channel should merge writes with.

    Returns:
        The channel's class name (`"LastValue"`...) when it exists and does not merge with
        `reducer`; None when it does, when the graph has no such channel, outside a graph,
        or when LangGraph keeps its channels another way (nothing is guessed).
    """
    read = _task_function(config, "__pregel_read")
    if not isinstance(read, functools.partial) or len(read.args) < 2:
        return None
    if getattr(read.func, "__name__", None) != "local_read":
        return None
    channels = read.args[1]
    mapping = type(channels) is dict or isinstance(channels, Mapping)
    found = channels.get(channel) if mapping else None
    if found is None or getattr(found, "operator", None) is reducer:
        return None
    return type(found).__name__


def graph_state(config: Mapping[str, Any] | None) -> Any:
    """The graph state a task started by `Send` would get from an edge; None for other tasks.

    A `Send` task's input is its payload, which the graph's author builds: a copy of the
    state whose last AIMessage keeps only this task's tool call, a `ToolCallWithContext`, a
    bare list of tool calls. LangGraph gives such a task a reader of the state its node would
    get from an edge (`ToolNode` itself reads it for a bare list); a task started by an edge
    has no reader there, its input is that state.
    """
    read = _task_function(config, "__pregel_read_state")
    if read is None:
        return None
    state = read()
    # A node whose input channels are all empty reads as LangGraph's MISSING sentinel.
    return state if isinstance(state, Mapping) or hasattr(state, "__dict__") else None


def with_channel_writer(config: Mapping[str, Any] | None, send: ChannelWriter) -> dict[str, Any]:
    """A copy of a task's config whose channel writer is `send` (see `channel_writer`).

    A tool that writes state beside its answer (deepagents' `StateBackend` writes `files`
    this way) reads the writer from the config it runs with.
    """
    copy = dict(config or {})
    copy["configurable"] = {**(copy.get("configurable") or {}), "__pregel_send": send}
    return copy


_INTERRUPT_SLOTS = 256
"""How many answered `interrupt()` calls of one task `own_interrupt` recognises."""


def own_interrupt(error: BaseException, config: Mapping[str, Any] | None) -> bool:
    """Whether an exception is the running task's own `interrupt()`, and nothing else.

    `interrupt()` raises a `GraphInterrupt` whose interrupt ids LangGraph derives from the
    task's checkpoint namespace and the number of answers the task already has
    (`langgraph.types._interrupt_id`). A subgraph or sub-agent the task invoked raises its
    own interrupts, with ids of its own namespaces; any other control-flow signal
    (`ParentCommand`, a nested guard's stop) is no `GraphInterrupt` at all.

    Args:
        error: The exception that left the tool.
        config: The config the task runs with (its `checkpoint_ns`).

    Returns:
        True only when every interrupt it carries is one of this task's.
    """
    from langgraph.errors import GraphInterrupt

    if not isinstance(error, GraphInterrupt) or not error.args:
        return False
    configurable = config.get("configurable") if config else None
    ns = configurable.get("checkpoint_ns") if isinstance(configurable, Mapping) else None
    interrupts = error.args[0]
    if not isinstance(ns, str) or not isinstance(interrupts, Sequence) or not interrupts:
        return False
    try:
        from langgraph.types import _interrupt_id
    except ImportError:  # pragma: no cover - checked by tests/unit/test_compat.py
        return False
    ids = {getattr(found, "id", None) for found in interrupts}
    for answered in range(_INTERRUPT_SLOTS):
        ids.discard(_interrupt_id(ns, answered))
        if not ids:
            return True
    return False


_TOOL_NODE_EXECUTE = ("ToolNode._run_one.<locals>.execute", "ToolNode._arun_one.<locals>.execute")


def runs_the_tool_itself(handler: Any) -> bool:
    """Whether a tool hook's handler is `ToolNode`'s own execute (no wrapper inside the hook).

    Then nothing but the tool can answer the call, and the guard needs no copy of the tool to
    learn whether it ran. Recognised by name: LangGraph has no public marker for it; a
    renamed function only costs the guard that shortcut.
    """
    return (
        getattr(handler, "__module__", None) == "langgraph.prebuilt.tool_node"
        and getattr(handler, "__qualname__", None) in _TOOL_NODE_EXECUTE
    )


def injected_arg_names(tool: Any) -> frozenset[str]:
    """The names of a tool's arguments that `ToolNode` injects (state, store, runtime).

    `ToolNode` adds them to the call's arguments after every wrapper ran, so the input a
    tool receives holds them beside the model's own arguments. Read with `ToolNode`'s own
    analysis (`_get_all_injected_args`), which also knows a `runtime` parameter of a tool
    whose schema is plain JSON (an MCP tool). Without it (another LangGraph): the tool's
    arguments that its model-facing schema lacks.
    """
    try:
        from langgraph.prebuilt.tool_node import _get_all_injected_args
    except ImportError:  # pragma: no cover - checked by tests/unit/test_compat.py
        return _not_in_the_model_schema(tool)
    try:
        found = _get_all_injected_args(tool)
    except Exception:  # an unusual tool: LangGraph's analysis does not apply
        logger.debug("no injected-argument analysis for %r", tool, exc_info=True)
        return _not_in_the_model_schema(tool)
    names = {*found.state, *found.all_injected_keys}
    names.update(name for name in (found.store, found.runtime) if name)
    return frozenset(names)


def _not_in_the_model_schema(tool: Any) -> frozenset[str]:
    schema = getattr(tool, "tool_call_schema", None)
    fields = getattr(schema, "model_fields", None)
    model = set(fields) if isinstance(fields, Mapping) else set()
    every = getattr(getattr(tool, "args_schema", None), "model_fields", None)
    return frozenset(set(every) - model) if isinstance(every, Mapping) and model else frozenset()


class TaskScope(Protocol):
    """What a scoped `ToolNode` opens around each of its tasks (see `scoped_tool_node`)."""

    def __enter__(self) -> Any:
        """Open the scope."""

    def __exit__(self, kind: Any, error: BaseException | None, trace: Any) -> bool:
        """Close the scope; True keeps the exception, for the node to raise `error()`."""

    def finish(self, output: Any) -> Any:
        """The node's output, completed (called once the task's tool calls returned)."""

    def error(self) -> BaseException:
        """The exception the scope kept when it closed."""


_SCOPED_TOOL_NODE: type[Any] | None = None


def scoped_tool_node(
    tools: Sequence[Any], *, task_scope: Callable[[Any], TaskScope], **kwargs: Any
) -> ToolNode:
    """A `ToolNode` that runs each task (one run of the node) inside `task_scope(config)`.

    The guard needs to know where one run of the node starts and ends, to write its
    channel once per run beside the node's output. `ToolNode` has no public hook for
    that, so its private `_func`/`_afunc` are extended here.

    Args:
        tools: The node's tools.
        task_scope: Called with the task's config; its result is entered around the run,
            and its `finish` gets the node's output and returns the output to give.
        **kwargs: Other `ToolNode` arguments.

    Returns:
        The node (a `ToolNode` subclass instance).
    """
    global _SCOPED_TOOL_NODE
    if _SCOPED_TOOL_NODE is None:
        from langchain_core.runnables import RunnableConfig
        from langgraph.prebuilt import ToolNode as BaseToolNode
        from langgraph.runtime import Runtime

        # LangGraph passes `config` and `runtime` by their annotations: keep them exact.

        class ScopedToolNode(BaseToolNode):
            _task_scope: Callable[[Any], TaskScope]

            def _func(self, input: Any, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
                scope = self._task_scope(config)
                with scope:
                    return scope.finish(super()._func(input, config, runtime))
                # The scope kept an exception: raised here, outside any handler, so that it
                # keeps its own context.
                raise scope.error()

            async def _afunc(
                self, input: Any, config: RunnableConfig, runtime: Runtime[Any]
            ) -> Any:
                scope = self._task_scope(config)
                with scope:
                    return scope.finish(await super()._afunc(input, config, runtime))
                raise scope.error()

        _SCOPED_TOOL_NODE = ScopedToolNode
    node = _SCOPED_TOOL_NODE(tools, **kwargs)
    node._task_scope = task_scope
    return cast("ToolNode", node)


_THREADS_QUERY = (
    "SELECT thread_id FROM checkpoints WHERE checkpoint_ns = '' "
    "GROUP BY thread_id ORDER BY MIN(checkpoint_id)"
)


def checkpoint_thread_ids(saver: Any) -> list[str]:
    """Every thread with a checkpoint in a saver's database, oldest first.

    A checkpointer has no public way to list its threads. `SqliteSaver` and
    `PostgresSaver` keep them in their `checkpoints` table (checkpoint ids are time-ordered
    UUIDs), read here through the saver's own connection without loading any checkpoint; any
    other saver is listed with `list(None)`, which loads every checkpoint.
    """
    conn = getattr(saver, "conn", None)
    lock = getattr(saver, "lock", None)
    execute = getattr(conn, "execute", None)
    if callable(execute) and type(saver).__name__ in ("SqliteSaver", "PostgresSaver"):
        if lock is not None:
            with lock:
                rows = list(execute(_THREADS_QUERY).fetchall())
        else:
            rows = list(execute(_THREADS_QUERY).fetchall())
        return [str(row["thread_id"] if isinstance(row, Mapping) else row[0]) for row in rows]
    found: dict[str, None] = {}
    for item in saver.list(None):
        found.setdefault(str(item.config["configurable"]["thread_id"]), None)
    return list(reversed(found))


def tool_nodes(graph: Any) -> list[ToolNode]:
    """Every `ToolNode` of a compiled graph and of its subgraphs (a node's `bound` runnable).

    Used by the crash test to count a tool's body starts without the user's cooperation.

    Args:
        graph: A compiled graph (`Pregel`).

    Returns:
        The graph's tools nodes, its own first.
    """
    from langgraph.prebuilt import ToolNode as BaseToolNode

    graphs = [graph, *(sub for _, sub in graph.get_subgraphs(recurse=True))]
    found: list[ToolNode] = []
    for each in graphs:
        for node in getattr(each, "nodes", {}).values():
            bound = getattr(node, "bound", None)
            if isinstance(bound, BaseToolNode) and not any(bound is f for f in found):
                found.append(bound)
    return found


def wrap_node_tools(node: ToolNode, wrap: Callable[[Any], Any]) -> None:
    """Replace each tool of a `ToolNode` by `wrap(tool)`, in place.

    `ToolNode` looks its tools up in a private dict (its public `tools_by_name` returns it)
    at every call, so a tool replaced there is the one a call runs.

    Args:
        node: The tools node.
        wrap: Gets a tool, returns the tool to run instead (same name).
    """
    tools: dict[str, Any] = node._tools_by_name
    for name, tool in list(tools.items()):
        tools[name] = wrap(tool)


# What one read of a checkpoint loads, measured in the database (nothing is fetched): its
# own blob and metadata, its pending writes and (PostgreSQL) the channel blobs it points
# at, as `SqliteSaver.get_tuple` and `PostgresSaver`'s SELECT_SQL read them. Newest first.
_SQLITE_CHECKPOINT_SIZES = (
    "SELECT c.checkpoint_id, length(c.checkpoint) + coalesce(length(c.metadata), 0) + "
    "coalesce((SELECT sum(length(w.value)) FROM writes w WHERE w.thread_id = c.thread_id "
    "AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id), 0) "
    "FROM checkpoints c WHERE c.thread_id = ? AND c.checkpoint_ns = ? "
    "ORDER BY c.checkpoint_id DESC"
)
_POSTGRES_CHECKPOINT_SIZES = (
    "SELECT c.checkpoint_id, octet_length(c.checkpoint::text) "
    "+ coalesce(octet_length(c.metadata::text), 0) "
    "+ coalesce((SELECT sum(octet_length(bl.blob)) "
    "FROM jsonb_each_text(c.checkpoint -> 'channel_versions') v "
    "JOIN checkpoint_blobs bl ON bl.thread_id = c.thread_id "
    "AND bl.checkpoint_ns = c.checkpoint_ns AND bl.channel = v.key "
    "AND bl.version = v.value), 0) "
    "+ coalesce((SELECT sum(octet_length(cw.blob)) FROM checkpoint_writes cw "
    "WHERE cw.thread_id = c.thread_id AND cw.checkpoint_ns = c.checkpoint_ns "
    "AND cw.checkpoint_id = c.checkpoint_id), 0) "
    "FROM checkpoints c WHERE c.thread_id = %s AND c.checkpoint_ns = %s "
    "ORDER BY c.checkpoint_id DESC"
)
# The store's rows of a namespace and of the namespaces under it (what `search` reads), by
# the byte length of their stored value. The prefix is compared, not LIKE-matched: a thread
# id may hold '%' or '_'.
_SQLITE_STORE_SIZES = (
    "SELECT prefix, key, length(CAST(value AS BLOB)) FROM store "
    "WHERE prefix = ? OR substr(prefix, 1, length(?)) = ?"
)
_POSTGRES_STORE_SIZES = (
    "SELECT prefix, key, octet_length(value::text) FROM store "
    "WHERE prefix = %s OR starts_with(prefix, %s)"
)


def _rows(owner: Any, query: str, params: tuple[Any, ...]) -> list[Sequence[Any]]:
    conn = owner.conn
    lock = getattr(owner, "lock", None)
    if lock is not None:
        with lock:
            found = list(conn.execute(query, params).fetchall())
    else:
        found = list(conn.execute(query, params).fetchall())
    return [list(row.values()) if isinstance(row, Mapping) else list(row) for row in found]


def checkpoint_sizes(
    saver: Any, thread_id: str, checkpoint_ns: str = ""
) -> list[tuple[str, int]] | None:
    """The checkpoints of a thread and the bytes one read of each loads, newest first.

    Measured by a read-only query of the saver's own tables (`SqliteSaver`,
    `PostgresSaver`) that fetches no checkpoint, so the CLI can refuse one that is too big
    before the saver loads it.

    Returns:
        `(checkpoint_id, bytes)` pairs; None for another saver (nothing can be measured).
    """
    name = type(saver).__name__
    if name == "SqliteSaver":
        rows = _rows(saver, _SQLITE_CHECKPOINT_SIZES, (thread_id, checkpoint_ns))
    elif name == "PostgresSaver":
        rows = _rows(saver, _POSTGRES_CHECKPOINT_SIZES, (thread_id, checkpoint_ns))
    else:
        return None
    return [(str(checkpoint_id), int(size or 0)) for checkpoint_id, size in rows]


def store_value_sizes(
    store: Any, namespace: tuple[str, ...]
) -> dict[tuple[tuple[str, ...], str], int] | None:
    """The byte length of each stored value in a namespace and below, without fetching it.

    Returns:
        `{(namespace, key): bytes}` for `SqliteStore` and `PostgresStore` (which keep a
        namespace as its parts joined by '.'); None for another store.
    """
    name = type(store).__name__
    text = ".".join(namespace)
    if name == "SqliteStore":
        rows = _rows(store, _SQLITE_STORE_SIZES, (text, text + ".", text + "."))
    elif name == "PostgresStore":
        rows = _rows(store, _POSTGRES_STORE_SIZES, (text, text + "."))
    else:
        return None
    return {(tuple(str(prefix).split(".")), str(key)): int(size or 0) for prefix, key, size in rows}


# -- LangGraph's msgpack allow-list (langgraph.checkpoint.serde: private module and hook) ----------


def msgpack_safe_types() -> frozenset[tuple[str, ...]]:
    """LangGraph's strict msgpack allow-list: the (module, name) pairs it deems safe."""
    from langgraph.checkpoint.serde import _msgpack

    return frozenset(_msgpack.SAFE_MSGPACK_TYPES)


def msgpack_safe_methods() -> frozenset[tuple[str, str, str]]:
    """The (module, name, method) calls LangGraph's msgpack reader allows (always strict)."""
    from langgraph.checkpoint.serde import _msgpack

    return frozenset(_msgpack.SAFE_MSGPACK_METHODS)


def strict_msgpack_ext_hook(allowed: Collection[tuple[str, ...]]) -> Callable[[int, bytes], Any]:
    """LangGraph's msgpack ext hook in strict mode: it rebuilds only `allowed` types.

    A type outside the list comes back as its raw payload (never imported): the caller
    checks names first so that such a value is reported, not silently turned into data.
    """
    from langgraph.checkpoint.serde import jsonplus

    return jsonplus._create_msgpack_ext_hook(set(allowed))
