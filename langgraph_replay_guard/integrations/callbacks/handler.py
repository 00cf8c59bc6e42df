"""`ReplayGuardCallbackHandler`: the guard for agent executors, registered as a callback."""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Unpack, cast
from uuid import UUID

from langchain_core.agents import AgentAction
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langgraph.errors import GraphBubbleUp, GraphInterrupt
from langgraph.types import Command

from langgraph_replay_guard.decisions.control import result_text
from langgraph_replay_guard.decisions.state import GuardView
from langgraph_replay_guard.errors import LoopAbortedError
from langgraph_replay_guard.integrations.callbacks.decisions import (
    Call,
    CallbackDecider,
    Refusal,
    Shadowed,
    as_tool_call,
)
from langgraph_replay_guard.integrations.callbacks.executors import (
    ToolCallBlockedError,
    agent_tools,
    all_tools_known,
    enforcement_problems,
)
from langgraph_replay_guard.integrations.callbacks.marks import (
    HeldOutcomes,
    UnknownOutcome,
    outcome_of,
)
from langgraph_replay_guard.integrations.callbacks.scopes import (
    RunTree,
    ScopeKey,
    ScopeTable,
    scopes_namespace,
)
from langgraph_replay_guard.integrations.calls import emit, result_outcome
from langgraph_replay_guard.integrations.tracing import (
    TRACE_KEY,
    BlockedRun,
    blocked_run,
    trace_info,
)
from langgraph_replay_guard.policy.config import GuardConfig, GuardOptions
from langgraph_replay_guard.policy.options import (
    ToolNameCheck,
    UnclassifiedTools,
    check_max_threads,
    check_namespace,
    check_store,
    guard_config,
    unclassified_tool_error,
    with_config_signature,
)
from langgraph_replay_guard.policy.tool_hints import hinted, hinted_tools

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

__all__ = ["ReplayGuardCallbackHandler"]

logger = logging.getLogger("langgraph_replay_guard")

F = TypeVar("F", bound=Callable[..., Any])

# Tools an AgentExecutor runs itself to report a parsing error or an unknown tool name.
_EXECUTOR_TOOLS = frozenset({"_Exception", "invalid_tool"})


_SIGNALS = (ToolCallBlockedError, LoopAbortedError)


def _fail_open(method: F) -> F:
    """Let the guard's signals and LangGraph's through; log any other error of its own.

    The handler runs with `raise_error=True` so that its refusals stop tool calls; without
    this, an unexpected error in the guard (a store that is down) would fail the user's run
    where no call is at stake (a model call, a record after a tool ran). Where a call is
    about to run, `on_tool_start` and `on_chain_end` decide themselves: an `unsafe` or
    `idempotent` call is refused (`_store_refusal`), a `pure` read runs with a warning.
    """

    @functools.wraps(method)
    def wrapper(self: ReplayGuardCallbackHandler, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (*_SIGNALS, GraphBubbleUp):
            raise
        except Exception:
            logger.exception(
                "langgraph-replay-guard: %s failed (its store is down?); this event is not "
                "recorded in the guard state",
                method.__name__,
            )
            return None

    return cast("F", wrapper)


_MAX_STORE_ERROR_CHARS = 300

STORE_REASON = "store_unavailable"
"""Reason, in trace metadata, of a call refused because the guard's store failed."""


def _store_problem(error: Exception) -> str:
    """The guard's own error, as one bounded line for the model and the log."""
    text = f"{type(error).__name__}: {error}"
    if len(text) > _MAX_STORE_ERROR_CHARS:
        text = text[: _MAX_STORE_ERROR_CHARS - 3] + "..."
    return text


def _store_refusal(tools: Sequence[tuple[str, str]], error: Exception) -> ToolCallBlockedError:
    """The refusal of calls with side effects the guard could not check (its store failed).

    Args:
        tools: `(name, class)` of each `unsafe` or `idempotent` call refused.
        error: What the guard's store (or the guard) raised.

    Returns:
        The error to raise; its text is what the model reads.
    """
    named = ", ".join(f"'{name}' ({replay})" for name, replay in tools)
    problem = _store_problem(error)
    msg = (
        f"Not executed: the loop guard could not check the call of tool {named} because its "
        f"store failed ({problem}). Without that check it cannot tell whether an identical "
        "call already took effect, nor record that this one starts, so nothing with side "
        "effects can run safely: such calls are refused until the store answers again. Do "
        "not retry it now; tell the user the action could not be done yet."
    )
    logger.error(
        "langgraph-replay-guard: refused %s: the handler's store failed (%s). Fix the store "
        "(connection, credentials, disk); unsafe and idempotent calls are refused until then.",
        named,
        problem,
    )
    return ToolCallBlockedError(msg, tool_name=tools[0][0] if len(tools) == 1 else "")


def _stream_writer() -> Callable[[Any], None] | None:
    try:
        from langgraph.config import get_stream_writer

        return get_stream_writer()
    except Exception:  # outside a LangGraph run there is no stream
        return None


def _turn_of(messages: Sequence[BaseMessage], root: UUID) -> str:
    """The turn a model call belongs to: the id of the last user message it sees.

    LangGraph gives every message an id. Messages without one (an `AgentExecutor` prompt)
    make the root run the turn: each `invoke` of an executor is one user turn.
    """
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            if message.id:
                return message.id
            break
    return f"run:{root}"


def _offered_tools(invocation_params: Any) -> list[str]:
    """The names of the tools a model call is offered, from its `invocation_params`.

    Chat models put their bound tools there in their provider's format: OpenAI's
    `{"type": "function", "function": {"name": ...}}`, Anthropic's `{"name": ...}`, Google's
    `{"function_declarations": [{"name": ...}]}`, or the tools themselves. A tool with no
    name (a provider's built-in tool) is left out.
    """
    tools = invocation_params.get("tools") if isinstance(invocation_params, dict) else None
    if not isinstance(tools, list | tuple):
        return []
    names: list[str] = []
    for item in tools:
        if isinstance(item, dict):
            function = item.get("function")
            found = function.get("name") if isinstance(function, dict) else item.get("name")
            declarations = item.get("function_declarations")
            if isinstance(declarations, list):
                names.extend(_offered_tools({"tools": declarations}))
        else:
            found = getattr(item, "name", None)
        if isinstance(found, str) and found:
            names.append(found)
    return names


def _actions(outputs: Any) -> list[AgentAction] | None:
    """The tool calls an agent step decided on, from a chain's outputs, or None."""
    if isinstance(outputs, AgentAction):
        return [outputs]
    if isinstance(outputs, list) and outputs and all(isinstance(a, AgentAction) for a in outputs):
        return outputs
    return None


def _step_id(actions: list[AgentAction]) -> str:
    """Batch id of an executor step: the AIMessage of a tool-calling agent, else a new id."""
    log = getattr(actions[0], "message_log", None) or []
    message_id = getattr(log[-1], "id", None) if log else None
    return message_id or f"step:{uuid.uuid4().hex}"


class ReplayGuardCallbackHandler(BaseCallbackHandler):
    """Loop and duplicate protection for agents you cannot rebuild, as a callback handler.

    Register it on a run, `config={"callbacks": [handler]}`, of a `create_agent` agent, a
    LangGraph graph with a `ToolNode`, or a `langchain_classic` `AgentExecutor`. It sees the
    batch of tool calls each model call asks for, decides them with the same engine and
    rules as `guard.wrap` and the middleware, and refuses a call by raising
    `ToolCallBlockedError` before the tool body runs; the executor hands the refusal's text
    to the model. State is kept per thread (`metadata["thread_id"]`, which LangGraph sets;
    a run without one gets a scope of its own) and per user turn.

    Setup each executor needs (`check(agent)` verifies it):

    - `create_agent` / `ToolNode`: the default `handle_tool_errors` (or `True`, or a tuple
      including `ToolCallBlockedError`).
    - `AgentExecutor`: `handle_parsing_errors=True`; pass the thread as
      `config={"metadata": {"thread_id": ...}}`.

    Aborts: a callback cannot end a run. With `exit_behavior="end"` the aborting call (and its
    batch) is answered with the stop message, which tells the model to answer without
    tools; if the model asks for tools again anyway, the handler raises `LoopAbortedError`
    (the only way a callback can stop a run). With `exit_behavior="error"` the abort raises
    `LoopAbortedError` before any tool of its batch runs.

    Tools that do not exist: a call to a name the agent lacks is answered (an executor's step
    is refused) and counted as one loop per turn whatever the name, reason `unknown_tool`.
    The handler learns the names from `check(agent)` (the tools node's whole tool set: the
    agent's tools and the tools its middleware serve), or from an `AgentExecutor`'s own answer
    to the first such call; once it knows them, the tools each model call is offered are
    added (a tool a middleware adds to the model call and serves itself).

    Unknown outcomes: when an `unsafe` call raises (an exception its policy does not name
    in `no_effect_errors`), its side effect may have happened. Every later identical call
    in the thread is refused until a human settles it with `resolve`. `idempotent` tools
    are retried as before: a callback cannot add an idempotency key to a tool's input.
    With a store, an `unsafe` call is claimed in it before its body runs (the mark that
    protects it is durable before `on_tool_start` returns; a store that cannot take it
    refuses the call), cleared when the call ends and kept when it raises, so a crash or a
    store outage after the side effect leaves an unknown outcome that every process sees.
    Without one, the marks are held in memory until `resolve`: `unknown_outcome_threads()`
    lists the threads holding them, so that a long-running process can settle them. No
    mark is ever evicted or capped: each is a store item of its own, read by key.

    Store failures: an `unsafe` or `idempotent` call the handler cannot check because its
    store failed is refused (`ToolCallBlockedError` naming the tool and the error); a
    `pure` read runs unguarded, with a warning.

    Tracing: a callback cannot change the run it is told about, and a refusal stops that
    run before the handlers after this one hear of it. Each refused call is therefore
    reported as a tool run of its own, under the same parent, that ends in the
    `ToolCallBlockedError` and carries the decision in its metadata
    (`{"replay_guard": {"verdict", "reason", "count", "replay", "source", "ledger"}}`) and a
    `replay_guard:<verdict>` tag; the error has the same `metadata`. An allowed call is the
    tool's own run, without guard metadata. Register this handler before any tracer: a
    handler listed before it also sees the refused run start and never end.

    MCP annotations: a tool's `readOnlyHint`/`idempotentHint`/`destructiveHint` (in its
    `metadata`, where langchain-mcp-adapters puts them) give its class when the configuration
    does not name it. The handler learns them from `check(agent)`, or else from the tool's
    first run (the batch that first calls it was decided when the model answered, before).

    Args:
        config: Guard configuration (`GuardConfig()` defaults when omitted).
        store: Optional LangGraph `BaseStore` holding each thread's guard state, so that
            several processes share it. In memory otherwise.
        max_threads: Most threads kept in memory; the least recently used are evicted
            (their loop state is lost unless a store keeps it; their unknown outcomes are
            kept until resolved).
        namespace: Namespace prefix, as `ReplayGuard`'s (one per tenant): the state is
            kept under `(*namespace, "callbacks")`, the item key is the thread id.
        **options: `GuardConfig` fields as flat keywords, instead of `config`: typed
            keyword-only options (`GuardOptions`), each with its `GuardConfig` field's
            meaning and default.

    Raises:
        TypeError: An option of the wrong type (a path as `store`, `max_threads="10"`,
            `namespace=(1, 2)`).
        ValueError: If `max_threads` is below 1 or `namespace` is empty.
    """

    raise_error = True
    """Refusals must propagate: with `raise_error=False` LangChain logs and runs the tool."""

    @with_config_signature
    def __init__(
        self,
        config: GuardConfig | dict[str, Any] | None = None,
        *,
        store: BaseStore | None = None,
        max_threads: int = 1000,
        namespace: Sequence[str] = ("replay_guard",),
        **options: Unpack[GuardOptions],
    ) -> None:
        """Create the handler."""
        self.config: GuardConfig = guard_config(
            config,
            options,
            owner="ReplayGuardCallbackHandler",
            own=("config", "store", "max_threads", "namespace"),
        )
        store = check_store(store)
        scopes = ScopeTable(
            check_max_threads(max_threads), store, scopes_namespace(check_namespace(namespace))
        )
        self._guard = CallbackDecider(self.config, scopes)
        self._tool_names = ToolNameCheck(self.config)
        # The tools this handler listed as unclassified (once per tool and handler).
        self._unclassified = UnclassifiedTools()
        self._runs = RunTree()
        # Pure in-memory work takes microseconds: run it on the event loop in async runs.
        # Store I/O may block, so with a store LangChain runs the handler in its executor.
        self.run_inline = store is None

    # -- public API ---------------------------------------------------------------------------

    def inspect(
        self, thread_id: str | None = None, *, run_id: UUID | str | None = None
    ) -> GuardView:
        """A read-only view of a thread's guard state.

        Args:
            thread_id: The thread.
            run_id: Instead of a thread, the root run id of a run without a thread id.

        Returns:
            The thread's `GuardView`, named as the guard channel: `counters`,
            `recent_calls`, `totals`, `stop`/`stop_reason`, `blocked` and `reminder` (not
            cleared). An unknown thread gives the view of an empty state.
        """
        return self._guard.view(_scope_key(thread_id, run_id))

    def reminder(
        self, thread_id: str | None = None, *, run_id: UUID | str | None = None
    ) -> str | None:
        """The pending loop reminder for the thread's next prompt, returned once.

        A callback cannot edit a prompt: put this text into the system prompt of the next
        model call yourself (with `create_agent`, from a `@dynamic_prompt` middleware). It
        never contains tool output.

        Args:
            thread_id: The thread.
            run_id: Instead of a thread, the root run id of a run without a thread id.

        Returns:
            The reminder, or None when no layer tripped at the latest batch of tool calls
            or it was returned already.
        """
        return self._guard.reminder(_scope_key(thread_id, run_id))

    def unknown_outcomes(
        self,
        thread_id: str | None = None,
        *,
        run_id: UUID | str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[UnknownOutcome]:
        """The unsafe calls of a thread whose outcome is unknown, a page at a time.

        Each is refused when called again until `resolve` settles it. A thread keeps every
        one (there is no cap); read them in pages: `offset=0`, then `offset=limit`, ...
        until a page is shorter than `limit`.

        Args:
            thread_id: The thread.
            run_id: Instead of a thread, the root run id of a run without a thread id.
            limit: Most outcomes returned.
            offset: How many to skip.

        Returns:
            The page (empty past the end).

        Raises:
            ValueError: If `limit` is below 1 or `offset` below 0.
        """
        _check_page("unknown_outcomes", limit, offset)
        marks = self._guard.unknown(_scope_key(thread_id, run_id), limit, offset)
        return [outcome_of(mark) for mark in marks]

    def unknown_outcome_threads(self, *, limit: int = 100, offset: int = 0) -> list[HeldOutcomes]:
        """The threads whose unknown outcomes this handler holds in memory, a page at a time.

        A handler without a store keeps each unknown outcome in this process's memory until
        `resolve` settles it (forgetting one could repeat a side effect), so in a
        long-running process they add up, thread by thread. List them here, check upstream,
        then `unknown_outcomes(thread_id)` and `resolve(...)` each. With a store, a thread's
        marks are store items instead (`replay-guard inspect` and `unknown_outcomes` read
        them) and only runs without a thread id are listed here.

        Args:
            limit: Most threads returned.
            offset: How many to skip (oldest first).

        Returns:
            The page (empty past the end): each thread (or root run id) and its count.

        Raises:
            ValueError: If `limit` is below 1 or `offset` below 0.
        """
        _check_page("unknown_outcome_threads", limit, offset)
        return self._guard.marks.held(limit, offset)

    def resolve(
        self,
        thread_id: str | None,
        tool: str,
        args: Any,
        outcome: Literal["succeeded", "failed", "retry"],
        result: Any = None,
        *,
        run_id: UUID | str | None = None,
    ) -> None:
        """Settle an unsafe call whose outcome is unknown, so that identical calls run again.

        When an `unsafe` tool raises an exception its policy does not name in
        `ToolPolicy.no_effect_errors` (the connection dropped after the email went out),
        the handler cannot know whether the side effect happened. It refuses every later
        identical call (same tool, same canonical arguments) in the thread with
        `ToolCallBlockedError` until a human who checked upstream calls this method.

        All three outcomes clear the mark and let the next identical call run: `retry`
        (it did not happen), `succeeded` or `failed` (it did or did not; `result` is then
        recorded in the thread's guard state as the call's confirmed result or error).

        `idempotent` tools are not marked: a callback cannot change a tool's input, so it
        cannot pass an idempotency key, and their retries run as before. Use the
        middleware or `guard.wrap` for replay-safe idempotent calls.

        Args:
            thread_id: The thread (`None` with `run_id`).
            tool: The tool's name.
            args: The call's arguments, as the model gave them (a dict, or the plain
                string an executor passed).
            outcome: `"succeeded"`, `"failed"` or `"retry"`.
            result: For `succeeded`/`failed`, the confirmed result or error text.
            run_id: Instead of a thread, the root run id of a run without a thread id.

        Raises:
            ValueError: `outcome` is not one of the three words, or no unknown outcome is
                recorded for that call.
        """
        self._guard.resolve(_scope_key(thread_id, run_id), tool, args, outcome, result)

    def check(self, *agents: Any) -> ReplayGuardCallbackHandler:
        """Fail now if an agent would not hand the handler's refusals to the model.

        Lists the agents' tools that nothing classifies in an `UnclassifiedToolsWarning`
        (a `ValueError` with `GuardConfig(require_classes=True)`). Also checks each tool of
        `config.tools` that the agents do not have: a typo there
        would leave the real tool with the default policy. A name near a tool of the agents
        that has no policy is a `ValueError` when the handler sees every tool they can
        run (no tools node with a `wrap_tool_call`, which may serve other tools) and
        enforces (unless `strict_tool_names=False`); any other, a `ReplayGuardWarning`. A
        handler shared by several agents checks them together (`check(agent_a, agent_b)`):
        the tools of all of them are known at once, and a policy for one agent's tool is no
        typo of the other's. And learns the agents' tool names: a call to any other name is
        a tool that does not exist (reason `unknown_tool`).

        Args:
            *agents: Compiled LangGraph graphs (`create_agent`, `StateGraph.compile()`) or
                `langchain_classic` `AgentExecutor`s, at least one.

        Returns:
            The handler, so that `config={"callbacks": [handler.check(agent)]}` reads well.

        Raises:
            ValueError: If an agent's error handling would fail the run on a refusal, or
                would replace the refusal's text; or a policy name is a near miss of a tool
                without a policy (`GuardConfig.strict_tool_names`); or a tool is
                unclassified under `GuardConfig(require_classes=True)`.
            TypeError: If no agent is given, or one is neither kind.
        """
        if not agents:
            msg = "ReplayGuardCallbackHandler.check() needs the agent: check(agent)."
            raise TypeError(msg)
        problems = [problem for agent in agents for problem in enforcement_problems(agent)]
        tools = [tool for agent in agents for tool in agent_tools(agent)]
        names = [tool.name for tool in tools]
        where = "the agent" if len(agents) == 1 else f"the {len(agents)} agents"
        complete = all(all_tools_known(agent) for agent in agents)
        try:
            self._tool_names.check(names, where=where, complete=complete)
        except ValueError as error:
            if len(agents) > 1:
                raise
            msg = (
                f"{error} If this handler also guards another agent that has that tool, "
                "check them together: handler.check(agent, other_agent)."
            )
            raise ValueError(msg) from None
        self._guard.learn_tools(names)
        self._guard.policies.learn(hinted_tools(tools))
        # Asked for: every unclassified tool, listed again.
        self._unclassified.check(self._guard.policies, tools, where=where, again=True)
        if problems:
            msg = "ReplayGuardCallbackHandler cannot enforce its decisions here:\n- " + (
                "\n- ".join(problems)
            )
            raise ValueError(msg)
        return self

    # -- chains: the run tree and AgentExecutor steps -----------------------------------------

    @_fail_open
    def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Remember the run's scope and root."""
        self._runs.start(run_id, parent_run_id, metadata)

    @_fail_open
    def on_chain_end(
        self,
        outputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Decide an `AgentExecutor` step as soon as the agent has chosen its tool calls.

        Raises:
            ToolCallBlockedError: The step must not run (an `OutputParserException`, which
                `AgentExecutor(handle_parsing_errors=True)` turns into an observation).
            LoopAbortedError: The run is aborted.
        """
        info = self._runs.end(run_id)
        actions = _actions(outputs)
        if info is None or actions is None or info.inside_tool:
            return
        calls: list[Call] = [
            (a.tool, a.tool_input, getattr(a, "tool_call_id", None))
            for a in actions
            if a.tool not in _EXECUTOR_TOOLS
        ]
        try:
            refusal = self._guard.step(info.scope, actions[0], _step_id(actions), calls)
        except (*_SIGNALS, GraphBubbleUp):
            raise
        except Exception as error:
            self._unchecked([name for name, _, _ in calls], error)
            return
        if isinstance(refusal, Shadowed):
            writer = _stream_writer()
            for decision, tool_call in refusal.decisions:
                emit(writer, decision, tool_call)
        elif refusal is not None:
            raise _refuse(refusal)

    @_fail_open
    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Forget the run."""
        self._runs.end(run_id)

    on_llm_error = on_chain_error  # a model run that failed is forgotten the same way

    # -- model calls ----------------------------------------------------------------------------

    @_fail_open
    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        """Note the turn of the model call (see `_model_start`)."""
        self._model_start(messages[0] if messages else [], **kwargs)

    @_fail_open
    def on_llm_start(self, serialized: dict[str, Any], prompts: list[str], **kwargs: Any) -> None:
        """A text model's call: the root run is the turn (see `_model_start`)."""
        self._model_start([], **kwargs)

    def _model_start(
        self,
        messages: Sequence[BaseMessage],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Note the turn of a model call outside any tool (`_turn_of` its messages).

        Raises:
            LoopAbortedError: With `exit_behavior="error"`, when the turn was stopped.
        """
        info, _ = self._runs.start(run_id, parent_run_id, metadata)
        if info.inside_tool:
            return
        if self._guard.tools is not None:
            # The names are known (`check`): a tool a middleware offers the model and serves
            # itself, which the tools node lacks, is one too.
            self._guard.learn_tools(_offered_tools(kwargs.get("invocation_params")))
        self._guard.model_start(info.scope, _turn_of(messages, info.root), messages)

    @_fail_open
    def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Decide the batch of tool calls the model asked for, against one snapshot.

        Raises:
            LoopAbortedError: When the batch aborts with `exit_behavior="error"`, or the model
                asks for tools after the guard stopped the run.
        """
        info = self._runs.end(run_id)
        if info is None or info.inside_tool:
            return
        generation = response.generations[0][0] if response.generations else None
        message = generation.message if isinstance(generation, ChatGeneration) else None
        if not isinstance(message, AIMessage):
            return
        if not message.tool_calls:
            self._guard.model_answered(info.scope)
            return
        calls = [(c["name"], c.get("args", {}), c.get("id")) for c in message.tool_calls]
        recorded = self._guard.batch(info.scope, message.id or f"run:{run_id}", calls)
        if recorded:
            writer = _stream_writer()
            for decision, tool_call in recorded:
                emit(writer, decision, tool_call)

    # -- tool calls -----------------------------------------------------------------------------

    @_fail_open
    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Let the call run, or refuse it before its body runs.

        Raises:
            ToolCallBlockedError: The call must not run; its text is what the model reads.
            LoopAbortedError: The run is aborted.
        """
        info, nested = self._runs.start(run_id, parent_run_id, metadata, tool=True)
        name = (serialized or {}).get("name") or kwargs.get("name") or ""
        if not nested and metadata:
            # A tool's run carries its metadata, MCP annotations included: its later batches
            # get their class (this one was decided when the model answered).
            self._guard.policies.learn(hinted([(name, metadata)]))
        if not nested and name == "invalid_tool" and isinstance(inputs, dict):
            self._invalid_tool(info.scope, inputs)
        if nested or name in _EXECUTOR_TOOLS:
            return  # a tool used inside a tool is part of the outer call
        policies = self._guard.policies
        if policies.policy_source(name) == "default":
            if policies.config.require_classes:
                # Refused like any call the guard does not let run: a callback can only raise.
                self._runs.end(run_id)
                text = unclassified_tool_error([name], "the agent")
                raise ToolCallBlockedError(text, tool_name=name)
            self._unclassified.check(policies, [name], where="the agent")
        call: Call = (name, inputs if inputs is not None else input_str, kwargs.get("tool_call_id"))
        try:
            admitted = self._guard.tool_start(
                info.scope, call, fallback_id=f"run:{run_id}", fallback_turn=f"run:{info.root}"
            )
        except (ToolCallBlockedError, GraphBubbleUp):
            raise
        except LoopAbortedError as stop:
            self._runs.end(run_id)
            replay, source = self._class_of(name)
            trace = trace_info(None, replay=replay, source=source, verdict="abort")
            trace.update(reason=stop.reason, count=stop.count)
            self._report_refused(call, trace, stop)
            raise
        except Exception as problem:
            try:
                self._unchecked([name], problem)
            except ToolCallBlockedError as refused:
                self._runs.end(run_id)  # the body will not run, so no end event comes
                replay, source = self._class_of(name)
                trace = trace_info(
                    None, replay=replay, source=source, verdict="deny", reason=STORE_REASON
                )
                self._report_refused(call, trace, refused)
                raise
            return
        if isinstance(admitted, Refusal):
            self._runs.end(run_id)  # the body will not run, so no end event comes
            error = _refuse(admitted, name)
            decision = admitted.decisions[0][0] if admitted.decisions else None
            replay, source = self._class_of(name)
            trace = trace_info(decision, replay=replay, source=source)
            self._report_refused(call, trace, error)
            raise error
        # First: an unsafe call is claimed now, and only its end settles the claim.
        info.call = admitted
        shadowed = admitted.planned.decision
        if shadowed is not None and shadowed.shadowed is not None and not admitted.scope.executor:
            # Shadow mode: the call runs; what enforcing would have done is reported (an
            # executor's step reported it when it was decided, see `on_chain_end`).
            emit(_stream_writer(), shadowed, admitted.planned.tool_call)

    def _unchecked(self, names: Sequence[str], error: Exception) -> None:
        """Calls about to run that the guard could not check: its store (or itself) failed.

        Fails closed for side effects: an `unsafe` or `idempotent` call might repeat an
        effect (an unknown outcome, a retry) that only the store knows of. A `pure` read
        runs, with a warning.

        Args:
            names: The tools of the call (or of the executor step).
            error: What the guard raised.

        Raises:
            ToolCallBlockedError: When any call is `unsafe` or `idempotent`.
        """
        classes = [(name, self._class_of(name)[0]) for name in names]
        effects = [(name, replay) for name, replay in classes if replay != "pure"]
        if effects:
            logger.debug("langgraph-replay-guard: the guard failed", exc_info=error)
            raise _store_refusal(effects, error)
        logger.warning(
            "langgraph-replay-guard: the handler's store failed (%s); pure tool(s) %s run "
            "unguarded (no loop or duplicate check) until it answers again.",
            _store_problem(error),
            ", ".join(repr(n) for n in names),
        )

    def _invalid_tool(self, scope: ScopeKey, inputs: dict[str, Any]) -> None:
        """An `AgentExecutor` answers a name it lacks with its `InvalidTool`: record it."""
        requested = inputs.get("requested_tool_name")
        available = inputs.get("available_tool_names")
        if isinstance(requested, str) and isinstance(available, list):
            self._guard.invalid_tool(scope, requested, [n for n in available if isinstance(n, str)])

    def _class_of(self, tool: str) -> tuple[str, str]:
        """A tool's class and where it comes from, for `trace_info`."""
        policies = self._guard.policies
        return policies.policy_for(tool).replay, policies.policy_source(tool)

    def _report_refused(self, call: Call, trace: dict[str, Any], error: BaseException) -> None:
        """Report a refused call as an errored tool run carrying the decision, for tracers.

        A callback cannot change the run it was told about, and its refusal stops that run
        before any handler after it hears of it (nor does any end event follow for those
        before it): a separate run, under the same parent, is what tracers can show.
        """
        if isinstance(error, ToolCallBlockedError):
            error.metadata = {TRACE_KEY: trace}
        from langchain_core.runnables.config import var_child_runnable_config

        config = var_child_runnable_config.get()
        if config is None:
            return  # not inside a runnable (an AgentExecutor step): nothing to attach to
        blocked_run(BlockedRun(config, as_tool_call(call), None, trace, error=error), exclude=self)

    @_fail_open
    def on_tool_end(
        self,
        output: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Record a call that ran and its result."""
        info = self._runs.end(run_id)
        if info is None or info.call is None:
            return
        if isinstance(output, ToolMessage | Command):
            outcome, text = result_outcome(output)
        else:
            # An AgentExecutor passes no tool call id, so a tool's handled error arrives as
            # plain text: it is recorded as a result.
            outcome, text = "success", result_text(output)
        self._guard.record(info.call, outcome, text)

    @_fail_open
    def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Record a call that raised.

        A `pure` or `idempotent` call, or one whose exception its policy names in
        `no_effect_errors`, failed plainly: an identical call may be retried. Any other
        exception of an `unsafe` call leaves its outcome unknown (see `resolve`), a control
        flow error other than an interrupt included (its body started; what it did is not
        known). An interrupt is a pause that LangGraph reruns on resume: it settles nothing.
        """
        info = self._runs.end(run_id)
        if info is None or info.call is None:
            return
        if isinstance(error, GraphInterrupt):
            self._guard.paused(info.call)  # not an outcome: the call runs again on resume
            return
        self._guard.failed(info.call, error)

    def __repr__(self) -> str:
        """Show the configuration that differs from the defaults."""
        changed = self.config.model_dump(exclude_defaults=True)
        return f"ReplayGuardCallbackHandler(config=GuardConfig(**{changed!r}))"


def _scope_key(thread_id: str | None, run_id: UUID | str | None) -> ScopeKey:
    if thread_id is not None:
        return ("thread", str(thread_id))
    if run_id is not None:
        return ("run", str(run_id))
    msg = "Pass the thread_id (or, for a run without one, its root run_id)."
    raise TypeError(msg)


def _refuse(refusal: Refusal, tool_name: str = "") -> ToolCallBlockedError:
    """The error that refuses a call, after reporting the decisions on the custom stream."""
    writer = _stream_writer()
    for decision, tool_call in refusal.decisions:
        emit(writer, decision, tool_call)
        logger.info("langgraph-replay-guard: refused %s (%s)", decision.tool, decision.reason)
    return ToolCallBlockedError(refusal.message, tool_name=tool_name)


def _check_page(method: str, limit: int, offset: int) -> None:
    if limit < 1 or offset < 0:
        msg = f"{method}(limit={limit!r}, offset={offset!r}): pass limit >= 1 and offset >= 0."
        raise ValueError(msg)
