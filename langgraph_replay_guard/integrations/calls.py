"""Deciding one tool call inside LangGraph: batch position, turn, blocked answers, state writes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks.manager import dispatch_custom_event
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage
from langgraph.types import Command

from langgraph_replay_guard.decisions.engine import (
    STOP_IGNORED,
    UNKNOWN_TOOL,
    CallPlan,
    Decision,
    PlannedCall,
    Verdict,
    call_facts,
    duplicate_message,
    fold_settings,
    make_event,
    plan_calls,
    prompt_name,
    stop_was_ignored,
)
from langgraph_replay_guard.decisions.failures import SAME_FAILURE
from langgraph_replay_guard.decisions.state import (
    Event,
    StateUpdate,
    load_state,
    own_update,
    settled,
    stored_state,
)
from langgraph_replay_guard.policy.resolver import PolicyResolver, resolver_of

if TYPE_CHECKING:
    from langgraph_replay_guard.policy.config import GuardConfig

__all__ = [
    "ANSWER_MARK",
    "DECISION_EVENT",
    "GUARD_CHANNEL",
    "STOPPED_MARK",
    "STOP_MARK",
    "BatchPlan",
    "PlanCache",
    "abort_answer",
    "blocked_answer",
    "blocked_tool_message",
    "final_ai_message",
    "find_batch",
    "guard_update",
    "plan_batch",
    "result_outcome",
    "snapshot",
    "state_field",
    "state_messages",
    "stopped_here",
    "tool_message",
]

logger = logging.getLogger("langgraph_replay_guard")

GUARD_CHANNEL = "replay_guard"
"""Key of the guard's channel in the graph state."""

DECISION_EVENT = "replay_guard_decision"
"""Name of the LangChain custom event sent for each decision that is not a plain allow."""

STOP_MARK = "replay_guard_stop"
"""`response_metadata` key of the final AIMessage of a run the guard stopped (the reason)."""

ANSWER_MARK = "replay_guard_answer"
"""`response_metadata` key of each ToolMessage the guard wrote itself: the tool did not run.

Its value is the decision's reason (`duplicate`, `repeat_limit`, `stopped`...).
`replay-guard export` copies it into the trajectory (`"guard"`), so that `replay-guard eval`
does not score the guard's own answers as the tool's results.
"""

STOPPED_MARK = "replay_guard_stopped"
"""`response_metadata` key of each ToolMessage answering a call of a batch the guard stopped.

The final AIMessage is written once, after the batch's last call; a tools task started by
`Send` runs one call and sees only its own answer, so each answer is marked too
(`stopped_here`). A key of its own: users find the final message by `STOP_MARK`.
"""


@dataclass(frozen=True)
class ToolCallBatch:
    """Where a tool call sits: its AIMessage, its position and the user turn."""

    ai_message: AIMessage
    turn: str | None

    @property
    def tool_calls(self) -> Sequence[ToolCall]:
        """The calls of the batch, in the order the model asked for them."""
        return self.ai_message.tool_calls

    @property
    def batch_id(self) -> str | None:
        """Id of the AIMessage holding the batch."""
        return self.ai_message.id


def state_field(state: Any, key: str) -> Any:
    """A key of the graph state, which may be a mapping or an object (pydantic state)."""
    if isinstance(state, Mapping):
        return state.get(key)
    return getattr(state, key, None)


def state_messages(state: Any, messages_key: str = "messages") -> Sequence[BaseMessage]:
    """The message list of a graph state (empty when there is none)."""
    messages = state_field(state, messages_key)
    return messages if isinstance(messages, Sequence) else []


def turn_anchors(value: Any) -> dict[str, str | None]:
    """Turns the guard channel already knows, by AIMessage id.

    A turn lookup walks back through the messages to the last user message; it can stop at
    the AIMessage of the last batch the guard recorded, whose turn is in the channel. That
    keeps the lookup short however long the thread is.
    """
    anchors: dict[str, str | None] = {}
    if not isinstance(value, Mapping):
        return anchors
    # The raw value is read before it is checked: take only well-typed anchors (a wrong
    # one can only shorten the walk to a wrong turn, which starts the counters afresh).
    last_batch, turn = value.get("last_batch"), value.get("turn")
    if isinstance(last_batch, str) and (turn is None or isinstance(turn, str)):
        anchors[last_batch] = turn
    pending = value.get("pending")
    if not isinstance(pending, Mapping):
        return anchors
    batch, events = pending.get("batch"), pending.get("events")
    if isinstance(batch, str) and isinstance(events, list) and events:
        first = events[0]
        first_turn = first.get("t") if isinstance(first, Mapping) else None
        anchors[batch] = first_turn if isinstance(first_turn, str) else None
    return anchors


def _turn_before(
    messages: Sequence[BaseMessage], index: int, anchors: Mapping[str, str | None]
) -> str | None:
    for i in range(index - 1, -1, -1):
        message = messages[i]
        if isinstance(message, HumanMessage):
            return message.id or f"human-{i}"
        if message.id is not None and message.id in anchors and isinstance(message, AIMessage):
            return anchors[message.id]
    return None


def find_batch(
    state: Any,
    tool_call_id: str | None,
    messages_key: str = "messages",
    anchors: Mapping[str, str | None] | None = None,
) -> ToolCallBatch | None:
    """Find the AIMessage that asked for a tool call, and the turn it belongs to.

    Args:
        state: Graph state (a mapping or an object with a messages attribute).
        tool_call_id: Id of the tool call; None matches the last AIMessage with tool calls.
        messages_key: Key of the message list.
        anchors: Known turns by AIMessage id (`turn_anchors`), to shorten the walk back.

    Returns:
        The batch, or None when no AIMessage holds the call.
    """
    messages = state_messages(state, messages_key)
    ai_index = None
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not isinstance(message, AIMessage) or not message.tool_calls:
            continue
        if tool_call_id is None or any(c.get("id") == tool_call_id for c in message.tool_calls):
            ai_index = index
            break
    if ai_index is None:
        return None
    turn = _turn_before(messages, ai_index, anchors or {})
    ai = messages[ai_index]
    assert isinstance(ai, AIMessage)
    return ToolCallBatch(ai_message=ai, turn=turn)


def current_turn(
    state: Any,
    messages_key: str = "messages",
    anchors: Mapping[str, str | None] | None = None,
) -> str | None:
    """Id of the last user message in the state (the turn a model call belongs to)."""
    messages = state_messages(state, messages_key)
    return _turn_before(messages, len(messages), anchors or {})


def last_ai_id(state: Any, messages_key: str = "messages") -> str | None:
    """Id of the last AIMessage in the state."""
    for message in reversed(state_messages(state, messages_key)):
        if isinstance(message, AIMessage):
            return message.id
    return None


def snapshot(value: Any, batch_id: str | None) -> Mapping[str, Any]:
    """The guard state that a call of batch `batch_id` is decided against.

    Events already written by siblings of the same batch (saved before a resume) are
    left out: siblings are accounted for by their position in the batch instead, so a
    re-run call gets the same decision it got the first time.

    Args:
        value: The channel value from the graph state.
        batch_id: Id of the AIMessage holding the call.

    Returns:
        A settled state.
    """
    value = stored_state(value)
    pending = value.get("pending") if isinstance(value, Mapping) else None
    if isinstance(pending, Mapping) and pending.get("batch") == batch_id and batch_id is not None:
        state = load_state(value)  # checked; a corrupt value gives the reset state
        state["pending"] = None
        return state
    return settled(value)


@dataclass(frozen=True)
class BatchPlan(CallPlan):
    """Decisions for every call of one AIMessage, all against the same snapshot."""

    batch: ToolCallBatch
    stop_was_ignored: bool = False
    """The turn's stop is a come-back the guard already answered: the next one raises."""


def plan_batch(
    policies: GuardConfig | PolicyResolver,
    state: Mapping[str, Any],
    batch: ToolCallBatch,
    tools: Collection[str] | None = None,
) -> BatchPlan:
    """Decide every call of a batch by position (identical calls: the first one runs).

    Args:
        policies: The guard's `PolicyResolver`, or a configuration on its own.
        state: Settled guard state (from `snapshot`).
        batch: The batch.
        tools: Names of the tools that exist, when known (a call to another name is an
            unknown tool).

    Returns:
        The plan.
    """
    calls = plan_calls(
        policies, state, batch.tool_calls, batch.turn, batch_id=batch.batch_id, tools=tools
    )
    return BatchPlan(calls=calls, batch=batch, stop_was_ignored=stop_was_ignored(state))


# (resolver, value, AIMessage, turn, plan, tools, what the resolver had learned: its version)
_Planned = tuple[PolicyResolver, Any, AIMessage, str | None, BatchPlan, tuple[str, ...] | None, int]


class PlanCache:
    """The last batch plan of one guard, reused while the channel value and batch are the same.

    A step plans its batch in the model call (the middleware) or at its first tool call,
    and each of its tool calls reads the plan again; all see the same channel value object
    and AIMessage, so one plan serves them all. The key is object identity: the reducer
    never changes a value in place, and a value read back from a checkpoint is a new object
    (a miss, planned again). One tuple, read and replaced atomically, so parallel tool calls
    never pair a key with another key's plan.
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        """Create an empty cache."""
        self._last: _Planned | None = None

    def plan(
        self,
        policies: GuardConfig | PolicyResolver,
        value: Any,
        batch: ToolCallBatch,
        tools: tuple[str, ...] | None = None,
    ) -> BatchPlan:
        """`plan_batch(policies, snapshot(value, batch.batch_id), batch, tools)`, cached.

        A plan made before the resolver learned a class is not reused (its version).

        Args:
            policies: The guard's `PolicyResolver` (fixed for the guard that owns the cache).
            value: The channel value from the graph state.
            batch: The batch.
            tools: Names of the tools that exist, when known.

        Returns:
            The plan.
        """
        resolver = resolver_of(policies)
        version = resolver.version  # before planning: a class learned meanwhile replans
        last = self._last
        if (
            last is not None
            and last[0] is resolver
            and last[6] == version
            and last[1] is value
            and last[2] is batch.ai_message
            and last[3] == batch.turn
            and last[5] == tools
        ):
            return last[4]
        plan = plan_batch(resolver, snapshot(value, batch.batch_id), batch, tools)
        self._last = (resolver, value, batch.ai_message, batch.turn, plan, tools, version)
        return plan

    def planned(
        self,
        value: Any,
        messages: Sequence[BaseMessage],
        tool_call_id: str | None,
        tools: tuple[str, ...] | None,
    ) -> tuple[BatchPlan, PlannedCall] | None:
        """The cached plan of a tool call whose AIMessage is the last message, if there is one.

        A tool call's state ends with the AIMessage that asked for it: when that message and
        the channel value are the very objects the cached plan was made from, its turn is
        the same too, and the messages need no walk.

        Args:
            value: The channel value from the graph state.
            messages: The state's messages.
            tool_call_id: The call's id.
            tools: Names of the tools that exist, when known.

        Returns:
            The plan and the call's entry, or None (plan it with `plan`).
        """
        last = self._last
        if (
            last is None
            or last[1] is not value
            or not messages
            or messages[-1] is not last[2]
            or last[5] != tools
        ):
            return None
        plan = last[4]
        planned = plan.call(tool_call_id)
        return None if planned is None else (plan, planned)


def guard_update(config: GuardConfig, events: list[Event]) -> StateUpdate:
    """The channel write that records events."""
    return own_update(fold_settings(config), events)


_RESULT_LOOKBACK = 400
"""Most messages a duplicate's earlier answer is looked for in (it is a recent call)."""


def earlier_answer(
    policies: GuardConfig | PolicyResolver,
    decision: Decision,
    state: Any,
    messages_key: str = "messages",
    call_id: str | None = None,
) -> ToolMessage | None:
    """The thread's answer to a duplicate's earlier call, or None when it is gone.

    After Summarization (or a user) removed that exchange there is nothing to use, and the
    call runs. The earlier call is found by its call key among the AIMessages' calls, and
    its answer by tool_call_id (its content may have been rewritten since, by
    `PIIMiddleware` for one: that is what the model saw). An earlier call that ran under
    other arguments than the model asked (a middleware coerced one) has no message with
    its key: the channel names its tool_call_id (`call_id`, `engine.earlier_call_id`).

    Args:
        policies: The guard's `PolicyResolver` (the call keys).
        decision: A `duplicate` decision of an earlier batch.
        state: The graph state.
        messages_key: Key of the message list.
        call_id: The earlier call's tool_call_id, when the channel names it.

    Returns:
        The earlier call's ToolMessage, or None.
    """
    answers: dict[str, ToolMessage] = {}
    for message in reversed(state_messages(state, messages_key)[-_RESULT_LOOKBACK:]):
        if call_id is not None:
            if (
                isinstance(message, ToolMessage)
                and message.tool_call_id == call_id
                and message.status != "error"
            ):
                return message
            continue
        if isinstance(message, ToolMessage):
            # Only a successful run is the result: an error answer is a failed run or the
            # guard's own answer to an earlier repeat.
            if message.status != "error":
                answers[message.tool_call_id] = message
        elif isinstance(message, AIMessage):
            for call in message.tool_calls:
                answer = answers.get(call.get("id") or "")
                if call["name"] != decision.tool or answer is None:
                    continue
                try:
                    key = call_facts(policies, call["name"], call["args"]).key
                except Exception:
                    continue
                if key == decision.call_key:
                    return answer
    return None


def whole_duplicate_answer(
    answer: ToolMessage, decision: Decision, earlier: ToolMessage
) -> ToolMessage:
    """A duplicate's answer that carries the earlier result whole, as the thread holds it.

    A middleware may show the model less than the thread holds (`ContextEditingMiddleware`
    clears old tool outputs in the model's request only), so "use the earlier result" must
    not point at something the model may no longer see: the answer carries it.

    Args:
        answer: The duplicate's answer (with a preview of the result).
        decision: Its decision.
        earlier: The earlier call's ToolMessage (`earlier_answer`).

    Returns:
        The answer with the earlier result in full.
    """
    text = duplicate_message(decision.tool or answer.name or "", earlier.text)
    return answer.model_copy(update={"content": text})


def denied_event(planned: PlannedCall, batch: ToolCallBatch, reason: str, *, abort: bool) -> Event:
    """Event recording a call that was not executed."""
    assert planned.facts is not None
    return make_event(
        planned.facts,
        "denied",
        reason=reason,
        abort=abort,
        batch=batch.batch_id,
        index=planned.index,
        turn=batch.turn,
        batch_size=len(batch.tool_calls),
    )


def answered_event(planned: PlannedCall, batch: ToolCallBatch, *, shadowed: bool = False) -> Event:
    """Event recording a call another piece answered (the tool never ran through the guard).

    In shadow mode, a call that enforcing would have answered itself carries enforcing's
    reason, counted in the channel's `shadow`: a call of a batch it would have stopped
    (enforcing answers those before any other piece sees them) and, with `shadowed`, any
    call it would have blocked (a name that does not exist, which the tools node answers).
    A call enforcing would only deny is handed to the pieces inside it, as here: the one
    that answers it answers it when enforcing too, and it is not counted.
    """
    assert planned.facts is not None
    shown = planned.decision.shadowed if planned.decision is not None else None
    if shown is not None and not shadowed and not stops_the_batch(shown):
        shown = None
    return make_event(
        planned.facts,
        "answered",
        reason=shown.reason if shown is not None else None,
        abort=shown is not None and shown.verdict is Verdict.ABORT,
        batch=batch.batch_id,
        index=planned.index,
        turn=batch.turn,
        batch_size=len(batch.tool_calls),
    )


def stops_the_batch(decision: Decision) -> bool:
    """Whether enforcing answers this decision's call itself, stopping its whole batch."""
    return decision.verdict is Verdict.ABORT or decision.reason == "stopped"


def previous_batch(messages: Sequence[BaseMessage]) -> tuple[AIMessage, set[str]] | None:
    """The AIMessage whose answers end the history, and the ids of the calls answered.

    A model call that follows tool answers (the tools node's, a HITL reject's, a call
    limit's, a structured-output retry's) finds its previous batch right before them.
    """
    answered: set[str] = set()
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            answered.add(message.tool_call_id)
            continue
        if isinstance(message, AIMessage) and message.tool_calls and answered:
            return message, answered
        return None
    return None


def executed_event(
    config: GuardConfig,
    planned: PlannedCall,
    batch: ToolCallBatch,
    outcome: str,
    text: str | None,
    *,
    command: bool = False,
    preview: bool = True,
    call_id: str | None = None,
) -> Event:
    """Event recording a call that ran.

    A tool without a policy of its own (its facts' `source` is `"default"`: no `tools`
    entry, toolkit or MCP annotations) that returned a `Command` changed the graph's
    state: it is recorded as a world-changing call (not a pure read), so an identical call
    after another state change runs again (`set_mode("a")`, `set_mode("b")`,
    `set_mode("a")` ends in mode a). With `preview=False` the event keeps the result's
    digest and no text, as with `GuardConfig(store_previews=False)`: the caller adds the
    preview once it knows what the model is given (`ReplayGuardMiddleware`). `call_id` is
    the call's tool_call_id when it ran under other arguments than the model asked.
    """
    facts = planned.facts
    assert facts is not None
    if not preview:
        facts = facts._replace(store_previews=False)
    if command and facts.replay == "pure" and facts.source == "default":
        facts = facts._replace(replay="idempotent")
    shadowed = planned.decision.shadowed if planned.decision is not None else None
    return make_event(
        facts,
        "success" if outcome == "success" else "failure",
        result=text,
        reason=shadowed.reason if shadowed is not None else None,
        abort=shadowed is not None and shadowed.verdict is Verdict.ABORT,
        batch=batch.batch_id,
        index=planned.index,
        turn=batch.turn,
        batch_size=len(batch.tool_calls),
        call_id=call_id,
    )


def blocked_tool_message(
    tool_call: ToolCall, content: str, *, reason: str | None, stop: str | None = None
) -> ToolMessage:
    """The ToolMessage a blocked call is answered with.

    `reason` is why this call was not run (marked `ANSWER_MARK`; None, an answer the tools
    node itself gives, unmarked); `stop`, the reason its batch stopped the run.
    """
    marks = {} if reason is None else {ANSWER_MARK: reason}
    if stop is not None:
        marks[STOPPED_MARK] = stop
    return ToolMessage(
        content=content,
        name=tool_call["name"],
        tool_call_id=tool_call.get("id") or "",
        status="error",
        response_metadata=marks,
    )


def stopped_here(state: Any, messages_key: str = "messages") -> bool:
    """Whether the last message of a state answers a call of a batch the guard stopped.

    Read right after a tools task ran (`route_after_tools`): its last message is its own
    answer. A task started by `Send` runs one call of the batch, and sees only its own
    writes: the guard channel of a sibling task's call may show no stop, and the final
    AIMessage is written by the task of the last call only; the mark is on every answer.
    """
    messages = state_messages(state, messages_key)
    if not messages:
        return False
    marks = getattr(messages[-1], "response_metadata", None)
    return isinstance(marks, Mapping) and (STOP_MARK in marks or STOPPED_MARK in marks)


def final_ai_message(decision: Decision, batch: ToolCallBatch) -> AIMessage:
    """The AIMessage that ends a run the guard stopped (`exit_behavior="end"`).

    It carries the name of the AIMessage that asked for the stopped batch: supervisors and
    swarms tell their agents apart by it (`create_agent(name=...)`).
    """
    if decision.reason == STOP_IGNORED:
        why = (
            "I kept asking for tools after the loop guard had stopped this run "
            f"(the last one '{prompt_name(decision.tool)}')"
        )
    elif decision.reason == "cycle":
        why = "my tool calls kept repeating in a cycle with identical results"
    elif decision.reason == UNKNOWN_TOOL:
        why = (
            f"I called tools that do not exist {decision.count} times "
            f"(the last one '{prompt_name(decision.tool)}')"
        )
    elif decision.reason == SAME_FAILURE:
        why = (
            f"'{prompt_name(decision.tool)}' kept failing with the same error whatever "
            f"arguments I tried ({decision.count - 1} attempts in a row)"
        )
    else:
        why = (
            f"I called '{prompt_name(decision.tool)}' {decision.count} times with the same "
            "arguments without making progress"
        )
    return AIMessage(
        content=(
            f"I stopped here because {why}. Please tell me how you would like to proceed, "
            "or give me more information."
        ),
        name=batch.ai_message.name,
        response_metadata={STOP_MARK: decision.reason},
    )


def abort_answer(
    planned: PlannedCall, aborting: PlannedCall, batch: ToolCallBatch
) -> tuple[ToolMessage, list[Event]]:
    """Answer one call of a batch that aborts the run, and the events that record it.

    The aborting call gets its decision's message; its siblings are told the run stopped.
    A come-back (the model asked for tools after the stop, reason `"stop_ignored"`) is
    answered call by call with each one's own decision and recorded as blocked calls of
    that reason, without stopping the run again: the turn's stop keeps the reason the run
    was stopped for, and `engine.stop_was_ignored` finds the come-back in `blocked`.

    Args:
        planned: The call to answer.
        aborting: The call whose decision aborts the run.
        batch: Their batch.

    Returns:
        The ToolMessage and the events (none for a call whose arguments could not be keyed).
    """
    decision = aborting.decision
    assert decision is not None
    reason = decision.reason or "repeat_limit"
    answered = reason
    if reason == STOP_IGNORED:
        own = planned.decision if planned.decision is not None else decision
        answered = own.reason or STOP_IGNORED
        content = own.message or decision.message or "Stopped by the loop guard."
        events = (
            [] if planned.facts is None else [denied_event(planned, batch, reason, abort=False)]
        )
    elif planned is aborting:
        content = decision.message or "Stopped by the loop guard."
        events = [denied_event(planned, batch, reason, abort=True)]
    else:
        content = (
            "Not executed: the loop guard stopped the run because of "
            f"'{prompt_name(decision.tool)}' ({decision.reason}). No further tool calls are made."
        )
        answered = "stopped"
        events = (
            [] if planned.facts is None else [denied_event(planned, batch, "stopped", abort=False)]
        )
    return blocked_tool_message(planned.tool_call, content, reason=answered, stop=reason), events


def blocked_answer(planned: PlannedCall, batch: ToolCallBatch) -> tuple[ToolMessage, list[Event]]:
    """Answer a call that its plan does not let run, and the events that record it.

    A call whose arguments could not be keyed is told why (and logged); it records nothing.
    A denied or aborting call gets its decision's message and a `denied` event. For the
    other calls of a batch that aborts, see `abort_answer`.

    Args:
        planned: The call: an `error`, or a decision other than allow.
        batch: Its batch.

    Returns:
        The ToolMessage and the events.
    """
    if planned.error is not None:
        logger.warning("langgraph-replay-guard: %s", planned.error)
        message = blocked_tool_message(
            planned.tool_call, f"Not executed: {planned.error}", reason="invalid_arguments"
        )
        return message, []
    decision = planned.decision
    assert decision is not None
    abort = decision.verdict is Verdict.ABORT
    event = denied_event(planned, batch, decision.reason or "denied", abort=abort)
    # The first call to a missing tool gets the tools node's own answer, as without the
    # guard, unmarked too: a test or a user comparing messages sees no difference, and `eval`
    # scores it as the tools node's error, which it is.
    own_answer = decision.reason == UNKNOWN_TOOL and decision.count == 1 and not abort
    message = blocked_tool_message(
        planned.tool_call,
        decision.message or "Not executed.",
        reason=None if own_answer else decision.reason or "denied",
    )
    return message, [event]


def tool_message(result: Any) -> ToolMessage | None:
    """The ToolMessage a tool call returned: the result itself, or the last one of its Command.

    A tool may return a list of Commands and ToolMessages (LangGraph's tools node takes one):
    the last ToolMessage among them and their Commands' messages.
    """
    if isinstance(result, ToolMessage):
        return result
    message: ToolMessage | None = None
    for answer in result if isinstance(result, list) else [result]:
        if isinstance(answer, ToolMessage):
            message = answer
        elif isinstance(answer, Command) and isinstance(answer.update, Mapping):
            for item in answer.update.get("messages", []) or []:
                if isinstance(item, ToolMessage):
                    message = item
    return message


def result_outcome(result: Any) -> tuple[str, str | None]:
    """Outcome and text of what a tool call returned (a ToolMessage or a Command).

    Returns:
        `("success" | "failure", text)`.
    """
    message = tool_message(result)
    if message is None:
        return "success", None
    outcome = "failure" if message.status == "error" else "success"
    content = message.content
    text = content if isinstance(content, str) else repr(content)
    return outcome, text


def emit(writer: Callable[[Any], None] | None, decision: Decision, tool_call: ToolCall) -> None:
    """Report a non-allow decision: on LangGraph's custom stream and as a LangChain event.

    A decision that shadows one (shadow mode) reports the shadowed one, with
    `"mode": "shadow"`: the call ran.

    The custom event (`DECISION_EVENT`) reaches callback handlers: tracers, and the
    recorder of execution records.
    """
    # In shadow mode the call ran: report what enforcing would have done, marked as such.
    shown = decision.shadowed or decision
    payload = {
        "tool": shown.tool,
        "tool_call_id": tool_call.get("id"),
        "verdict": shown.verdict.value,
        "reason": shown.reason,
        "count": shown.count,
    }
    if decision.shadowed is not None:
        payload["mode"] = "shadow"
    if writer is not None:
        try:
            writer({GUARD_CHANNEL: payload})
        except Exception:
            logger.debug("could not write a guard decision to the custom stream", exc_info=True)
    try:
        dispatch_custom_event(DECISION_EVENT, payload)
    except Exception:  # outside a run (no parent run id): nobody to tell
        logger.debug("could not dispatch a guard decision event", exc_info=True)
