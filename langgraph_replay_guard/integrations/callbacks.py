"""`ReplayGuardCallbackHandler`: the guard for agent executors, registered as a callback."""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast
from uuid import UUID

from langchain_core.agents import AgentAction
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolInvocationError
from langgraph.types import Command

from langgraph_replay_guard.config import GuardConfig
from langgraph_replay_guard.control import result_text
from langgraph_replay_guard.engine import (
    Decision,
    Verdict,
    call_facts,
    decide,
    make_event,
    render_reminder,
)
from langgraph_replay_guard.errors import (
    InvalidArgumentsError,
    LoopAbortedError,
    ReplayGuardError,
)
from langgraph_replay_guard.integrations.callback_state import (
    RunInfo,
    RunTree,
    Scope,
    ScopeKey,
    ScopeTable,
)
from langgraph_replay_guard.integrations.calls import (
    Batch,
    BatchPlan,
    PlannedCall,
    abort_answer,
    denied_event,
    emit,
    executed_event,
    guard_update,
    loop_error,
    result_outcome,
    snapshot,
)
from langgraph_replay_guard.state import Event, GuardView, settled, state_for_turn

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

__all__ = ["ReplayGuardCallbackHandler", "ToolCallBlockedError"]

logger = logging.getLogger("langgraph_replay_guard")

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_NAMESPACE = ("replay_guard", "callbacks")
"""Store namespace of the handler's per-thread guard state (the item key is the thread id)."""

# Tools an AgentExecutor runs itself to report a parsing error or an unknown tool name.
_EXECUTOR_TOOLS = frozenset({"_Exception", "invalid_tool"})

_ANSWER_NOW = " Do not call any more tools; answer the user now."


class ToolCallBlockedError(ReplayGuardError, ToolInvocationError, OutputParserException):
    """Raised by the callback handler to refuse a tool call; its text is what the model reads.

    A callback cannot return a result in place of a tool, it can only raise. This error is
    shaped so that executors hand its text to the model instead of failing the run:

    - it is a LangGraph `ToolInvocationError`: `create_agent` and a `ToolNode` with the
      default `handle_tool_errors` answer the call with an error `ToolMessage` whose content
      is `message`;
    - it is an `OutputParserException` with `send_to_llm=True`: a `langchain_classic`
      `AgentExecutor(handle_parsing_errors=True)` turns it into an observation.

    Attributes:
        message: What the model is told.
        tool_name: The refused tool, or `""` for a whole executor step.
    """

    def __init__(self, message: str, *, tool_name: str = "") -> None:
        Exception.__init__(self, message)
        self.message = message
        self.tool_name = tool_name
        self.tool_kwargs: dict[str, Any] = {}
        self.source = None  # ToolInvocationError's validation error: there is none
        self.filtered_errors = None
        self.observation = message
        self.llm_output = message
        self.send_to_llm = True



_SIGNALS = (ToolCallBlockedError, LoopAbortedError)


def _fail_open(method: F) -> F:
    """Let the guard's own signals through; log anything else instead of failing the run.

    The handler runs with `raise_error=True` so that its refusals stop tool calls; without
    this, an unexpected error in the guard (a store that is down) would fail the user's run.
    """

    @functools.wraps(method)
    def wrapper(self: ReplayGuardCallbackHandler, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except _SIGNALS:
            raise
        except Exception:
            logger.exception(
                "langgraph-replay-guard: %s failed; the call is not guarded", method.__name__
            )
            return None

    return cast("F", wrapper)


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


def _tool_call(name: str, args: Any, call_id: str | None) -> ToolCall:
    # Executors may pass a plain string as a tool's input; the call key hashes it as it is.
    return cast("ToolCall", {"name": name, "args": args, "id": call_id, "type": "tool_call"})


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

    Aborts: a callback cannot end a run. With `on_abort="end"` the aborting call (and its
    batch) is answered with the stop message, which tells the model to answer without
    tools; if the model asks for tools again anyway, the handler raises `LoopAbortedError`
    (the only way a callback can stop a run). With `on_abort="error"` the abort raises
    `LoopAbortedError` before any tool of its batch runs.

    Args:
        config: Guard configuration (`GuardConfig()` defaults when omitted).
        store: Optional LangGraph `BaseStore` holding each thread's guard state, so that
            several processes share it. In memory otherwise.
        max_threads: Most threads kept in memory; the least recently used are evicted
            (their state is lost unless a store keeps it).
        namespace: Store namespace for the guard state (the item key is the thread id).

    Raises:
        ValueError: If `max_threads` is below 1.
    """

    raise_error = True
    """Refusals must propagate: with `raise_error=False` LangChain logs and runs the tool."""

    def __init__(
        self,
        config: GuardConfig | dict[str, Any] | None = None,
        *,
        store: BaseStore | None = None,
        max_threads: int = 1000,
        namespace: tuple[str, ...] = DEFAULT_NAMESPACE,
    ) -> None:
        """Create the handler."""
        if max_threads < 1:
            msg = f"max_threads={max_threads!r} must be at least 1 (the threads kept in memory)."
            raise ValueError(msg)
        if config is None:
            config = GuardConfig()
        elif not isinstance(config, GuardConfig):
            config = GuardConfig.model_validate(config)
        self.config: GuardConfig = config
        self._scopes = ScopeTable(max_threads, store, namespace)
        self._runs = RunTree()
        # Pure in-memory work takes microseconds: run it on the event loop in async runs.
        # Store I/O may block, so with a store LangChain runs the handler in its executor.
        self.run_inline = store is None

    # -- public API ---------------------------------------------------------------------------

    def inspect(self, thread_id: str | None = None, *, run_id: UUID | str | None = None) -> GuardView:
        """A read-only view of a thread's guard state.

        Args:
            thread_id: The thread.
            run_id: Instead of a thread, the root run id of a run without a thread id.

        Returns:
            Counters, recent calls, stop reason, recent blocked calls and the pending
            reminder (not cleared). An unknown thread gives the view of an empty state.
        """
        value = self._value(thread_id, run_id)
        state = settled(value)
        pending = state.get("reminder")
        return GuardView.from_state(state, render_reminder(pending) if pending else None)

    def reminder(self, thread_id: str | None = None, *, run_id: UUID | str | None = None) -> str | None:
        """The pending loop reminder for the thread's next prompt, returned once.

        A callback cannot edit a prompt: put this text into the system prompt of the next
        model call yourself (with `create_agent`, from a `@dynamic_prompt` middleware).

        Args:
            thread_id: The thread.
            run_id: Instead of a thread, the root run id of a run without a thread id.

        Returns:
            The reminder, or None when no layer tripped since the last read in this turn.
        """
        key = self._key(thread_id, run_id)
        scope = self._scopes.peek(key)
        if scope is None:
            return None
        with scope.lock:
            state = settled(self._scopes.read(scope))
            pending = state.get("reminder")
            # Only for the model call that reads the tripping batch's results.
            if not pending or pending.get("batch") != scope.last_batch:
                return None
            marker = tuple(sorted(pending.items()))
            if marker == scope.shown:
                return None
            scope.shown = marker
            return render_reminder(pending)

    def check(self, agent: Any) -> ReplayGuardCallbackHandler:
        """Fail now if `agent` would not hand the handler's refusals to the model.

        Args:
            agent: A compiled LangGraph graph (`create_agent`, `StateGraph.compile()`) or a
                `langchain_classic` `AgentExecutor`.

        Returns:
            The handler, so that `config={"callbacks": [handler.check(agent)]}` reads well.

        Raises:
            ValueError: If the agent's error handling would fail the run on a refusal, or
                would replace the refusal's text.
            TypeError: If `agent` is neither kind.
        """
        from langgraph_replay_guard.integrations.callback_check import enforcement_problems

        problems = enforcement_problems(agent)
        if problems:
            msg = "ReplayGuardCallbackHandler cannot enforce its decisions here:\n- " + (
                "\n- ".join(problems)
            )
            raise ValueError(msg)
        return self

    # -- run tree -------------------------------------------------------------------------------

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
        """Decide an `AgentExecutor` step as soon as the agent has chosen its tool calls."""
        info = self._runs.end(run_id)
        actions = _actions(outputs)
        if info is None or actions is None or info.inside_tool:
            return
        self._plan_step(info, actions)

    @_fail_open
    def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Forget the run."""
        self._runs.end(run_id)

    # -- model calls ----------------------------------------------------------------------------

    @_fail_open
    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Note the turn; refuse the model call of a stopped run with `on_abort="error"`."""
        info, _ = self._runs.start(run_id, parent_run_id, metadata)
        if not info.inside_tool:
            self._model_start(info, _turn_of(messages[0] if messages else [], info.root))

    @_fail_open
    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A text model's call: the run is the turn."""
        info, _ = self._runs.start(run_id, parent_run_id, metadata)
        if not info.inside_tool:
            self._model_start(info, f"run:{info.root}")

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
        """Decide the batch of tool calls the model asked for, against one snapshot."""
        info = self._runs.end(run_id)
        if info is None or info.inside_tool:
            return
        generation = response.generations[0][0] if response.generations else None
        message = generation.message if isinstance(generation, ChatGeneration) else None
        if not isinstance(message, AIMessage):
            return
        scope = self._scopes.get(info.scope)
        with scope.lock:
            if not message.tool_calls:
                scope.last_batch = None  # a final answer: no reminder is pending any more
                return
            calls = [(c["name"], c.get("args", {}), c.get("id")) for c in message.tool_calls]
            self._plan(scope, message.id or f"run:{run_id}", calls)

    @_fail_open
    def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Forget the run."""
        self._runs.end(run_id)

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
        """Let the call run, or refuse it by raising `ToolCallBlockedError`.

        Raises:
            ToolCallBlockedError: The call must not run; its text is what the model reads.
            LoopAbortedError: The run is aborted (`on_abort="error"`, or tools asked for
                after the guard stopped the run).
        """
        info, nested = self._runs.start(run_id, parent_run_id, metadata, tool=True)
        name = (serialized or {}).get("name") or kwargs.get("name") or ""
        if nested or name in _EXECUTOR_TOOLS:
            return  # a tool used inside a tool is part of the outer call
        args: Any = inputs if inputs is not None else input_str
        scope = self._scopes.get(info.scope)
        try:
            with scope.lock:
                plan, planned = self._claim(scope, info, run_id, name, args, kwargs.get("tool_call_id"))
                message, events = self._answer(plan, planned)
                if message is None:
                    info.call = (scope, plan, planned)
                    return
                if events:
                    self._scopes.write(scope, guard_update(self.config, events))
        except _SIGNALS:
            self._runs.end(run_id)
            raise
        self._runs.end(run_id)  # the tool body will not run, so no end event comes
        if planned.decision is not None:
            emit(_stream_writer(), planned.decision, planned.tool_call)
            logger.info("langgraph-replay-guard: refused %s: %s", name, planned.decision.reason)
        raise ToolCallBlockedError(message, tool_name=name)

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
            outcome, text = "success", result_text(output)
        self._record(info, outcome, text)

    @_fail_open
    def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Record a call that failed or timed out (an identical call may be retried)."""
        info = self._runs.end(run_id)
        if info is None or info.call is None or isinstance(error, GraphBubbleUp):
            return  # an interrupt is not an outcome: the call runs again on resume
        outcome = "timeout" if isinstance(error, TimeoutError) else "failure"
        self._record(info, outcome, str(error))

    # -- deciding -------------------------------------------------------------------------------

    def _key(self, thread_id: str | None, run_id: UUID | str | None) -> ScopeKey:
        if thread_id is not None:
            return ("thread", str(thread_id))
        if run_id is not None:
            return ("run", str(run_id))
        msg = "Pass the thread_id (or, for a run without one, its root run_id)."
        raise TypeError(msg)

    def _value(self, thread_id: str | None, run_id: UUID | str | None) -> Any:
        key = self._key(thread_id, run_id)
        if key[0] == "thread":
            return self._scopes.read_thread(key[1])
        scope = self._scopes.peek(key)
        return scope.value if scope is not None else None

    def _model_start(self, info: RunInfo, turn: str) -> None:
        scope = self._scopes.get(info.scope)
        with scope.lock:
            scope.turn = turn
            if self.config.on_abort != "error":
                return
            view = state_for_turn(settled(self._scopes.read(scope)), turn, self.config.scope)
            stop = view.get("stop")
        if stop is not None:
            # The abort was turned into a ToolMessage (a ToolNode handling every error):
            # stop before the model is called again.
            msg = (
                f"Loop aborted: '{stop['tool']}' ({stop['reason']}, attempt {stop['count']})."
            )
            raise LoopAbortedError(msg, tool=stop["tool"], reason=stop["reason"], count=stop["count"])

    def _plan(
        self,
        scope: Scope,
        batch_id: str,
        calls: Sequence[tuple[str, Any, str | None]],
        *,
        keep: bool = True,
    ) -> BatchPlan:
        """Decide every call of a batch by position against one snapshot (scope lock held).

        Raises:
            LoopAbortedError: When the batch aborts with `on_abort="error"`, or the model
                asks for tools after the guard stopped the run.
        """
        config = self.config
        state = snapshot(self._scopes.read(scope), batch_id)
        batch = Batch(AIMessage(content="", id=batch_id), scope.turn)
        earlier: list[str] = []
        planned: list[PlannedCall] = []
        for index, (name, args, call_id) in enumerate(calls):
            tool_call = _tool_call(name, args, call_id)
            try:
                facts = call_facts(config, name, args)
            except InvalidArgumentsError as exc:
                planned.append(PlannedCall(tool_call, index, None, None, exc))
                continue
            decision = decide(state, facts, config, turn=scope.turn, earlier_in_batch=earlier)
            earlier.append(facts.key)
            planned.append(PlannedCall(tool_call, index, facts, decision, None))
        plan = BatchPlan(batch, planned)
        scope.last_batch = batch_id
        aborting = plan.abort if config.on_abort != "continue" else None
        if aborting is not None and aborting.decision is not None:
            view = state_for_turn(state, scope.turn, config.scope)
            if view.get("stop") is not None and view.get("last_batch") != batch_id:
                raise self._ignored_stop(aborting.decision)
            if config.on_abort == "error":
                events = abort_answer(aborting, aborting, batch)[1]
                self._scopes.write(scope, guard_update(config, events))
                raise loop_error(aborting.decision)
        if keep:
            scope.plan, scope.taken, scope.executor = plan, set(), False
        return plan

    def _ignored_stop(self, decision: Decision) -> LoopAbortedError:
        msg = (
            "Loop aborted: the model asked for more tool calls after the loop guard stopped "
            "the run, and a callback cannot end a run any other way. Use "
            "ReplayGuardMiddleware (create_agent) to end runs gracefully."
        )
        return LoopAbortedError(msg, tool=decision.tool, reason="stopped", count=decision.count)

    def _plan_step(self, info: RunInfo, actions: list[AgentAction]) -> None:
        """Decide an `AgentExecutor` step; refuse it whole if any call is refused.

        The executor turns only an `OutputParserException` raised while the agent plans into
        an observation, so a refusal must be raised here, before any tool of the step runs.
        The calls of a refused step that the guard would have allowed are not run either;
        the model is told to ask for them again.
        """
        scope = self._scopes.get(info.scope)
        with scope.lock:
            if scope.actions is actions[0]:
                return  # the same step seen again as the output of an enclosing chain
            scope.actions = actions[0]
            calls = [
                (a.tool, a.tool_input, getattr(a, "tool_call_id", None))
                for a in actions
                if a.tool not in _EXECUTOR_TOOLS
            ]
            if not calls:
                return
            plan = self._plan(scope, _step_id(actions), calls)
            scope.executor = True
            answers = [self._answer(plan, planned) for planned in plan.calls]
            if all(message is None for message, _ in answers):
                return
            events = [event for _, recorded in answers for event in recorded]
            if events:
                self._scopes.write(scope, guard_update(self.config, events))
            scope.plan = None
        for planned, (message, _) in zip(plan.calls, answers, strict=True):
            if message is not None and planned.decision is not None:
                emit(_stream_writer(), planned.decision, planned.tool_call)
        raise ToolCallBlockedError(_step_message(plan, [m for m, _ in answers]))

    def _claim(
        self,
        scope: Scope,
        info: RunInfo,
        run_id: UUID,
        name: str,
        args: Any,
        call_id: str | None,
    ) -> tuple[BatchPlan, PlannedCall]:
        """The planned call a started tool run is, planning a batch of one when unknown."""
        plan = scope.plan
        if plan is not None:
            for planned in plan.calls:
                if planned.index in scope.taken:
                    continue
                tool_call = planned.tool_call
                if call_id is not None and tool_call.get("id") == call_id:
                    scope.taken.add(planned.index)
                    return plan, planned
                if (
                    (call_id is None or scope.executor)
                    and tool_call["name"] == name
                    and tool_call["args"] == args
                ):
                    scope.taken.add(planned.index)
                    return plan, planned
        if scope.turn is None:
            scope.turn = f"run:{info.root}"
        single = self._plan(scope, call_id or f"run:{run_id}", [(name, args, call_id)], keep=False)
        return single, single.calls[0]

    def _answer(self, plan: BatchPlan, planned: PlannedCall) -> tuple[str | None, list[Event]]:
        """What the model is told instead of running a call (None: run it), and its events."""
        aborting = plan.abort if self.config.on_abort != "continue" else None
        if aborting is not None and aborting.decision is not None:
            answer, events = abort_answer(planned, aborting, plan.batch)
            text = answer.text + (_ANSWER_NOW if planned is aborting else "")
            return text, events
        if planned.error is not None:
            logger.warning("langgraph-replay-guard: %s", planned.error)
            return f"Not executed: {planned.error}", []
        decision = planned.decision
        if decision is None or decision.verdict is Verdict.ALLOW:
            return None, []
        abort = decision.verdict is Verdict.ABORT
        event = denied_event(planned, plan.batch, decision.reason or "denied", abort=abort)
        return decision.message or "Not executed.", [event]

    # -- recording ------------------------------------------------------------------------------

    def _record(self, info: RunInfo, outcome: str, text: str | None) -> None:
        assert info.call is not None
        scope, plan, planned = info.call
        if planned.facts is None:
            return
        if outcome == "timeout":
            event = make_event(
                planned.facts,
                "timeout",
                batch=plan.batch.batch_id,
                index=planned.index,
                turn=plan.batch.turn,
            )
        else:
            event = executed_event(self.config, planned, plan.batch, outcome, text)
        with scope.lock:
            self._scopes.write(scope, guard_update(self.config, [event]))

    def __repr__(self) -> str:
        """Show the configuration that differs from the defaults."""
        changed = self.config.model_dump(exclude_defaults=True)
        return f"ReplayGuardCallbackHandler(config=GuardConfig(**{changed!r}))"


def _step_message(plan: BatchPlan, messages: list[str | None]) -> str:
    """The observation of a refused `AgentExecutor` step."""
    if len(plan.calls) == 1 and messages[0] is not None:
        return messages[0]
    lines = ["The loop guard did not run the tool calls of this step:"]
    for planned, message in zip(plan.calls, messages, strict=True):
        call = planned.tool_call
        why = message or (
            "not run because another call of the same step was refused; ask for it again "
            "if you still need it."
        )
        lines.append(f"- {call['name']}: {why}")
    return "\n".join(lines)
