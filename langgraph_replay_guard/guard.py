"""`ReplayGuard`: the one object users create and share."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Never, Unpack

from langgraph_replay_guard.decisions.control import GuardControl
from langgraph_replay_guard.policy.config import GuardConfig, GuardOptions
from langgraph_replay_guard.policy.options import (
    ToolNameCheck,
    UnclassifiedTools,
    check_namespace,
    check_record,
    check_store,
    guard_config,
    with_config_signature,
)
from langgraph_replay_guard.policy.resolver import PolicyResolver
from langgraph_replay_guard.policy.tool_hints import hinted_tools

if TYPE_CHECKING:
    from langchain_core.messages import SystemMessage
    from langchain_core.tools import BaseTool
    from langgraph.prebuilt import ToolNode
    from langgraph.store.base import BaseStore

    from langgraph_replay_guard.decisions.state import GuardView
    from langgraph_replay_guard.integrations.callbacks import ReplayGuardCallbackHandler
    from langgraph_replay_guard.integrations.middleware import ReplayGuardMiddleware
    from langgraph_replay_guard.records.recording import RecordedGraph
    from langgraph_replay_guard.records.store import RecordStore

__all__ = ["ReplayGuard"]


class ReplayGuard:
    """Loop, duplicate and replay protection for tool calls.

    Create one per application and share it: it holds configuration only, while the
    per-thread state lives in the graph's checkpointed channel.

    Args:
        config: Guard configuration; `GuardConfig()` defaults when omitted. A mapping is
            validated as a `GuardConfig`.
        store: A LangGraph `BaseStore` for the durable replay ledger (`SqliteStore`,
            `PostgresStore`; `InMemoryStore` for tests). When omitted, the graph's own store
            (`compile(store=...)`, `create_agent(store=...)`) is used; without any store
            there is no ledger and `unsafe` tools get a warning.
        namespace: Namespace prefix of everything the guard keeps in a store: ledger rows
            (`(*namespace, "ledger", <thread>)`), execution records (`(*namespace,
            "records")`) and the callback handler's state (`(*namespace, "callbacks")`).
            Give each tenant its own (`("replay_guard", tenant_id)`) so tenants sharing a
            store never see each other's state.
        record: Record runs as execution records (off by default): `True` records into
            `store`, a `BaseStore` records there, under `(*namespace, "records")`. Runs are
            recorded through `guard.record(graph)`.
        **options: `GuardConfig` fields as flat keywords (`ReplayGuard(max_repeats=2,
            exit_behavior="error")`), instead of `config`: typed keyword-only options
            (`GuardOptions`), each with its `GuardConfig` field's meaning and default.

    Raises:
        TypeError: An unknown option (naming the nearest one), an option of the wrong type
            (a path as `store`, `namespace=(1, 2)`, `record="yes"`, a config that is neither
            a `GuardConfig` nor a dict).
        ValueError: `record=True` without a `store`, or an empty `namespace`.
    """

    @with_config_signature
    def __init__(
        self,
        config: GuardConfig | dict[str, Any] | None = None,
        *,
        store: BaseStore | None = None,
        namespace: Sequence[str] = ("replay_guard",),
        record: bool | BaseStore = False,
        **options: Unpack[GuardOptions],
    ) -> None:
        """Create a guard."""
        self.config: GuardConfig = guard_config(
            config, options, owner="ReplayGuard", own=("config", "store", "namespace", "record")
        )
        self.store = check_store(store)
        self.namespace: tuple[str, ...] = check_namespace(namespace)
        self.record_setting = check_record(record)
        self.records: RecordStore | None = _record_store(
            self.record_setting, self.store, self.namespace
        )
        self._tool_names = ToolNameCheck(self.config)
        # The tools this guard listed as unclassified (once per tool and guard, not process).
        self._unclassified = UnclassifiedTools()
        # What class each call is: the configuration, then the classes the MCP annotations
        # of the tools this guard sees give (learned here, this guard's alone).
        self._policies = PolicyResolver(self.config)

    def control(self, *, tools: Sequence[str] | None = None) -> GuardControl:
        """Return a framework-free control for one turn (`should_skip`, `record_*`, `evaluate`).

        Args:
            tools: The names of the tools that exist (your loop's whole tool set). A call to
                any other name is a tool that does not exist, decided as the adapters do
                (reason `"unknown_tool"`: never run, one loop per turn whatever the name),
                and a `ReplayGuardWarning` names each tool of `config.tools` missing from
                them. None (the default): every name is taken as a tool.

        Returns:
            A new `GuardControl` with an empty state (deciding with the classes the guard
            learned from the MCP annotations of the tools it guards, if any).

        Raises:
            TypeError: If `tools` is a string or holds something that is not a string.
        """
        control = GuardControl(self._policies, tools=tools)
        if tools is not None:
            # The caller's whole tool set: a near miss of a name there is a typo.
            self._tool_names.check(tools, where="control(tools=...)", complete=True)
            self._unclassified.check(self._policies, tools, where="control(tools=...)")
        return control

    # -- LangGraph: custom StateGraph ------------------------------------------------------

    def wrap(self, tool_node: ToolNode) -> ToolNode:
        """Return a guarded copy of a `ToolNode`, a drop-in replacement in your graph.

        The graph state needs the guard channel: use `ReplayGuardState`, or add
        `replay_guard: NotRequired[Annotated[dict | None, merge_guard_state]]` to your state.
        A `ReplayGuardWarning` names each tool of `config.tools` that the node does not
        have (a typo there would leave the real tool with the default policy), with the
        node's tool without a policy that the name is near, if any: a warning, not an
        error, as one guard may guard several nodes (or the node's own `wrap_tool_call`
        may serve tools it does not hold), so the guard never knows every tool of the
        graph here. A tool with
        MCP annotations (langchain-mcp-adapters puts them in its `metadata`) that neither
        `tools` nor a toolkit names gets the class they give (see `GuardConfig.policy_for`).

        Its tools that nothing classifies (no `tools` entry, toolkit or MCP annotations)
        are listed once in an `UnclassifiedToolsWarning`; with
        `GuardConfig(require_classes=True)` they are a `ValueError` here.

        Args:
            tool_node: The node to guard (its tools, name, error handling and any wrapper
                it has are kept).

        Returns:
            The guarded node.

        Raises:
            TypeError: `tool_node` is not a `ToolNode` (a function, a tool, a list of tools,
                a compiled agent): the message says what to call instead.
            ValueError: `GuardConfig(require_classes=True)` and a tool of the node is
                unclassified.
        """
        from langgraph.prebuilt import ToolNode

        from langgraph_replay_guard.integrations.tool_node import guarded_tool_node

        if not isinstance(tool_node, ToolNode):
            msg = _not_a_tool_node(tool_node)
            raise TypeError(msg)
        where = f"ToolNode {tool_node.name!r}"
        self._tool_names.check(tool_node.tools_by_name, where=where)
        self._policies.learn(hinted_tools(tool_node.tools_by_name.values()))
        # After learning: a tool its MCP annotations classify is not listed.
        self._unclassified.check(self._policies, tool_node.tools_by_name.values(), where=where)
        return guarded_tool_node(self, tool_node)

    def tool_node(self, tools: Sequence[BaseTool | Callable[..., Any]], **kwargs: Any) -> ToolNode:
        """Build a guarded `ToolNode`.

        Args:
            tools: The tools.
            **kwargs: Other `ToolNode` arguments (`name`, `handle_tool_errors`...).

        Returns:
            The guarded node.
        """
        from langgraph.prebuilt import ToolNode

        return self.wrap(ToolNode(tools, **kwargs))

    def route_after_tools(self, then: str = "agent") -> Callable[[Any], str]:
        """A conditional edge for after the tools node that ends the run on an abort.

        Replace `builder.add_edge("tools", "agent")` with
        `builder.add_conditional_edges("tools", guard.route_after_tools("agent"))`: with a
        static edge the model is called again after the guard stopped the run, and when it
        asks for more tools the tools node raises `LoopAbortedError` naming this fix.

        Args:
            then: The node to go to when the run goes on.

        Returns:
            The routing function.
        """
        from langgraph_replay_guard.integrations.tool_node import route_after_tools

        return route_after_tools(then, exit_behavior=self.config.exit_behavior)

    def system_prompt(self, state: Any, base: str | SystemMessage | None = None) -> SystemMessage:
        """The system prompt for a model call: `base` plus the pending loop reminder.

        The reminder appears in exactly the next model call after a layer tripped, and is
        never written into the message history.

        It is also where a graph that cannot be ended by the guard ends: one that goes back
        to the model after the tools node whatever the guard decided (a static
        `tools -> agent` edge, `create_react_agent`). When such a graph comes back for more
        tool calls after the guard stopped the run, the tools node answers every one of
        them and adds the final message (so the saved history stays valid for the next user
        turn); the next call of this method raises, before the model is called again.

        Args:
            state: The graph state the model node received.
            base: The usual system prompt.

        Returns:
            The system message to put first in the model's input.

        Raises:
            LoopAbortedError: Reason `"stop_ignored"`: the graph came back to the model after
                the guard stopped the run and answered its come-back, in this user turn.
        """
        from langchain_core.messages import SystemMessage

        from langgraph_replay_guard.decisions.engine import ignored_stop_error
        from langgraph_replay_guard.integrations.prompt import (
            ignored_stop,
            next_call_reminder,
            system_prompt_with_reminder,
        )

        stop = ignored_stop(state)
        if stop is not None:
            raise ignored_stop_error(stop)
        reminder = next_call_reminder(state) if self.config.reminder else None
        message = system_prompt_with_reminder(base, reminder)
        return message if message is not None else SystemMessage(content="")

    def inspect(self, state_or_snapshot: Any) -> GuardView:
        """A typed, read-only view of the guard channel.

        Args:
            state_or_snapshot: `graph.get_state(config)`, a state dict or the channel value.

        Returns:
            The `GuardView`, named as the channel's keys: `counters`, `recent_calls`,
            `totals`, `epoch`, `stop`/`stop_reason`, `blocked` and `reminder`.
        """
        from langgraph_replay_guard.integrations.prompt import guard_view

        return guard_view(state_or_snapshot)

    # -- LangChain ----------------------------------------------------------------------------

    def middleware(self, *, name: str | None = None, **options: Never) -> ReplayGuardMiddleware:
        """The guard as `create_agent` middleware.

        Args:
            name: Instance name; several guard middlewares in one agent need distinct names
                (each gets its own state channel).
            **options: None: the middleware shares this guard's configuration (a
                `GuardConfig` field here is a `TypeError` that says to give it to
                `ReplayGuard(...)`; type checkers refuse any keyword but `name`).

        Returns:
            A `ReplayGuardMiddleware` sharing this guard's configuration.
        """
        from langgraph_replay_guard.integrations.middleware import (
            ReplayGuardMiddleware,
        )

        _refuse_options(options, "ReplayGuard.middleware", ("name",))
        middleware = ReplayGuardMiddleware(
            self.config,
            store=self.store,
            name=name,
            namespace=self.namespace,
            record=self.record_setting,
        )
        # One guard for several agents (one middleware each): the tool names of every agent
        # run so far are checked together (the agent with `set_order` may run after the one
        # with `get_order`), and each unclassified tool is listed once per guard.
        middleware.guard._tool_names = self._tool_names
        self._tool_names.middlewares += 1
        middleware.guard._unclassified = self._unclassified
        return middleware

    # -- replay --------------------------------------------------------------------------------

    def resolve(
        self,
        graph: Any,
        config: Mapping[str, Any],
        tool_call_id: str,
        outcome: Literal["succeeded", "failed", "retry"],
        result: Any = None,
        *,
        resume: bool = True,
        **invoke_kwargs: Any,
    ) -> Any:
        """Settle an unsafe call whose outcome is unknown, then resume the graph.

        Only a human who checked upstream can say what happened: `succeeded` (give the
        `result` they confirmed; the model receives it as the tool's result), `failed`
        (`result` is the error text) or `retry` (run the tool again). Nothing else turns an
        unknown outcome into a known one.

        Args:
            graph: The compiled graph (or `create_agent` agent) that stopped.
            config: Its config, with the `thread_id`.
            tool_call_id: The call named by `ReplayUnsafeError.facts["tool_call_id"]` or
                the guard's interrupt value.
            outcome: `"succeeded"`, `"failed"` or `"retry"`.
            result: The confirmed result (succeeded) or error text (failed).
            resume: Resume the graph after recording (answering the guard's interrupt, or
                `invoke(None, config)` after a `ReplayUnsafeError`).
            **invoke_kwargs: Passed to the resuming `invoke` (e.g. `durability="sync"`).

        Returns:
            The graph's output after resuming, or None with `resume=False`.

        Raises:
            ValueError: No unknown outcome is recorded for that call, or `outcome` is not
                one of the three words.
            ReplayInFlightError: The worker holding the call's claim is still alive (a
                process on this machine, or a lease that has not run out); it names the
                host and pid. Nothing is recorded: wait for it, or stop that worker.
            ReplayConflictError: The call's row changed between its read and the write
                (compare-and-set); nothing is recorded.
        """
        from langgraph_replay_guard.integrations.resolve import Resolution, resolve

        asked = Resolution(config, tool_call_id, outcome, result, resume, invoke_kwargs)
        return resolve(self, graph, asked)

    async def aresolve(
        self,
        graph: Any,
        config: Mapping[str, Any],
        tool_call_id: str,
        outcome: Literal["succeeded", "failed", "retry"],
        result: Any = None,
        *,
        resume: bool = True,
        **invoke_kwargs: Any,
    ) -> Any:
        """Async twin of `resolve` (for graphs run with `ainvoke` and async stores)."""
        from langgraph_replay_guard.integrations.resolve import Resolution, aresolve

        asked = Resolution(config, tool_call_id, outcome, result, resume, invoke_kwargs)
        return await aresolve(self, graph, asked)

    def callback_handler(
        self,
        *,
        max_threads: int = 1000,
        store: BaseStore | None = None,
        namespace: Sequence[str] | None = None,
        **options: Never,
    ) -> ReplayGuardCallbackHandler:
        """The guard as a callback handler, for agents whose graph you cannot change.

        Register it with `config={"callbacks": [handler]}` on a `create_agent` agent, a
        graph with a `ToolNode`, or a `langchain_classic` `AgentExecutor`.

        Args:
            max_threads: See `ReplayGuardCallbackHandler`.
            store: The handler's store; this guard's when omitted.
            namespace: The handler's namespace; this guard's when omitted, so tenants stay
                apart.
            **options: None: the handler shares this guard's configuration (a
                `GuardConfig` field here is a `TypeError` that says to give it to
                `ReplayGuard(...)`).

        Returns:
            A `ReplayGuardCallbackHandler` sharing this guard's configuration.
        """
        from langgraph_replay_guard.integrations.callbacks import ReplayGuardCallbackHandler

        _refuse_options(
            options, "ReplayGuard.callback_handler", ("max_threads", "store", "namespace")
        )

        return ReplayGuardCallbackHandler(
            self.config,
            store=self.store if store is None else store,
            max_threads=max_threads,
            namespace=self.namespace if namespace is None else namespace,
        )

    # -- execution records ----------------------------------------------------------------------

    def record(self, graph: Any) -> RecordedGraph:
        """Wrap a compiled graph so that each `invoke`/`ainvoke` run is recorded.

        The wrapper returns and raises exactly what the graph does; `replay(execution_id)`
        serves a recorded response again without calling the model, the tools or the graph.

        Args:
            graph: A compiled graph (custom `StateGraph` or `create_agent`).

        Returns:
            The recording wrapper.

        Raises:
            ValueError: Recording is off (create the guard with `record=True`).
        """
        from langgraph_replay_guard.records.recording import RecordedGraph

        if self.records is None:
            msg = (
                "Recording is off for this guard: create it with "
                "ReplayGuard(config, store=store, record=True) (or record=<a BaseStore>)."
            )
            raise ValueError(msg)
        return RecordedGraph(graph, self.records)

    def __repr__(self) -> str:
        """Show the configuration that differs from the defaults."""
        changed = self.config.model_dump(exclude_defaults=True)
        return f"ReplayGuard(config=GuardConfig(**{changed!r}))"


def _not_a_tool_node(value: object) -> str:
    """Why `wrap` refuses `value`, and what to call instead (one line)."""
    name = getattr(value, "name", None) or getattr(value, "__name__", None)
    got = f"{type(value).__name__} {name!r}" if isinstance(name, str) else type(value).__name__
    if isinstance(value, list | tuple):
        fix = "for a list of tools, call guard.tool_node(tools)"
    elif hasattr(value, "get_graph") and hasattr(value, "nodes"):  # a compiled graph
        fix = (
            "for a create_agent agent, pass middleware=[ReplayGuardMiddleware(...)] to "
            "create_agent; for a graph, wrap its ToolNode before compiling"
        )
    else:
        fix = (
            "for tools (functions or BaseTools), call guard.tool_node([...]) or "
            "guard.wrap(ToolNode([...]))"
        )
    return f"guard.wrap() takes a langgraph.prebuilt.ToolNode, got {got}: {fix}."


def _record_store(
    record: bool | BaseStore, store: BaseStore | None, namespace: tuple[str, ...]
) -> RecordStore | None:
    """Where a guard records runs, from its `record`, `store` and `namespace` options."""
    if record is False:
        return None
    from langgraph_replay_guard.records.store import RecordStore

    if record is True:
        if store is None:
            msg = (
                "record=True needs a store to write records to: pass "
                "ReplayGuard(config, store=SqliteStore(...), record=True), or record=<a BaseStore>."
            )
            raise ValueError(msg)
        return RecordStore(store, namespace=(*namespace, "records"))
    return RecordStore(record, namespace=(*namespace, "records"))


def _refuse_options(options: Mapping[str, object], owner: str, own: Sequence[str]) -> None:
    """Refuse a keyword of a factory that shares the guard's configuration, naming the fix.

    Python's own error ("got an unexpected keyword argument") says neither that a
    `GuardConfig` option belongs to `ReplayGuard(...)` nor the name meant, for a misspelt one.

    Raises:
        TypeError: Any keyword in `options`.
    """
    fields = list(GuardConfig.model_fields)
    for name in options:
        head = f"{owner}() got an unexpected keyword argument {name!r}."
        close = difflib.get_close_matches(name, [*own, *fields], n=1)
        field = name if name in fields else close[0] if close else None
        if field is None:
            msg = f"{head} Its options: {', '.join(own)}."
        elif field in own:
            msg = f"{head} Did you mean {field!r}?"
        else:
            meant = "" if field == name else f" Did you mean {field!r}?"
            msg = (
                f"{head}{meant} {field!r} is a GuardConfig option, and this shares the "
                f"guard's configuration: give {field}=... to ReplayGuard(...) (or "
                "GuardConfig(...)), or build ReplayGuardMiddleware/ReplayGuardCallbackHandler "
                "with it directly."
            )
        raise TypeError(msg)
