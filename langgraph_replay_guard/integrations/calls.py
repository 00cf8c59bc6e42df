"""Planning a batch's calls against the guard channel and recording them as events."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks.manager import dispatch_custom_event
from langchain_core.messages import AIMessage, BaseMessage, ToolCall, ToolMessage
from langgraph.types import Command

from langgraph_replay_guard.decisions.engine import (
    CallDecisions,
    DecidedCall,
    Decision,
    Verdict,
    decide_calls,
    fold_settings,
    make_event,
    stop_was_ignored,
)
from langgraph_replay_guard.decisions.keys import content_hash
from langgraph_replay_guard.decisions.state import (
    Event,
    StateUpdate,
    batch_in_progress,
    load_state,
    merge_guard_state,
    own_update,
    preview_facts,
    settled,
    show_update,
)
from langgraph_replay_guard.integrations.batches import ToolCallBatch
from langgraph_replay_guard.policy.config import keeps_previews
from langgraph_replay_guard.policy.resolver import PolicyResolver, resolver_of

if TYPE_CHECKING:
    from langgraph_replay_guard.policy.config import GuardConfig

__all__ = [
    "DECISION_EVENT",
    "GUARD_CHANNEL",
    "BatchDecisions",
    "DecisionCache",
    "PlannedValues",
    "answered_event",
    "decide_batch",
    "denied_event",
    "emit",
    "executed_event",
    "executed_write",
    "given_previews",
    "guard_update",
    "message_text",
    "result_outcome",
    "snapshot",
    "tool_message",
]

logger = logging.getLogger("langgraph_replay_guard")


GUARD_CHANNEL = "replay_guard"
"""Key of the guard's channel in the graph state."""


DECISION_EVENT = "replay_guard_decision"
"""Name of the LangChain custom event sent for each decision that is not a plain allow."""


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
    if batch_id is not None and batch_in_progress(value) == batch_id:
        state = load_state(value)  # checked; a corrupt value gives the reset state
        state["log"] = []
        return state
    return settled(value)


@dataclass(frozen=True)
class BatchDecisions(CallDecisions):
    """Decisions for every call of one AIMessage, all against the same snapshot."""

    batch: ToolCallBatch
    stop_was_ignored: bool = False
    """The turn's stop is a come-back the guard already answered: the next one raises."""


def decide_batch(
    policies: GuardConfig | PolicyResolver,
    state: Mapping[str, Any],
    batch: ToolCallBatch,
    tools: Collection[str] | None = None,
) -> BatchDecisions:
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
    calls = decide_calls(
        policies, state, batch.tool_calls, batch.turn, batch_id=batch.batch_id, tools=tools
    )
    return BatchDecisions(calls=calls, batch=batch, stop_was_ignored=stop_was_ignored(state))


_Planned = tuple[
    PolicyResolver,
    Any,
    AIMessage,
    str | None,
    BatchDecisions,
    tuple[str, ...] | None,
    int,
    Mapping[str | None, DecidedCall],
]


class DecisionCache:
    """The last batch decisions of one guard, reused while the channel value and batch are the same.

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

    def decide(
        self,
        policies: GuardConfig | PolicyResolver,
        value: Any,
        batch: ToolCallBatch,
        tools: tuple[str, ...] | None = None,
    ) -> BatchDecisions:
        """`decide_batch(policies, snapshot(value, batch.batch_id), batch, tools)`, cached.

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
        plan = decide_batch(resolver, snapshot(value, batch.batch_id), batch, tools)
        # Each call of the batch finds its entry by id, without asking the core again.
        by_id = {planned.tool_call.get("id"): planned for planned in reversed(plan.calls)}
        self._last = (resolver, value, batch.ai_message, batch.turn, plan, tools, version, by_id)
        return plan

    def decided(
        self,
        value: Any,
        messages: Sequence[BaseMessage],
        tool_call_id: str | None,
        tools: tuple[str, ...] | None,
    ) -> tuple[BatchDecisions, DecidedCall] | None:
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
            The decisions and the call's entry, or None (decide it with `decide`).
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
        planned = last[7].get(tool_call_id)
        return None if planned is None else (last[4], planned)


def given_previews(
    config: GuardConfig, messages: Sequence[BaseMessage], value: Any
) -> dict[str, str]:
    """Previews for the channel's results without one, cut from the messages the model read.

    `messages` end where the model's answer starts: their last batch (the ToolMessages after
    the last AIMessage) is what the model read of the results the channel recorded as digests
    (`defer_previews`). A ToolMessage whose text still has a recorded digest reached the
    model unchanged and gives its preview; a changed one (a middleware's redaction) none. The
    batch before is read too when a digest is still without a preview: a batch whose previews
    no write carried (its tools never ran: a HITL reject, a jump) gets them one step late.
    AIMessages whose calls got no answer at all (`after_model` jumps back to the model) are
    passed over: their steps carried no previews either.

    Returns:
        Result digest -> preview (empty: nothing to show).
    """
    if not keeps_previews(config, messages=True) or value is None:
        return {}
    facts = preview_facts(value)
    unshown = facts.unshown
    if not unshown:
        return {}
    previews: dict[str, str] = {}
    chars = config.result_preview_chars
    end = len(messages)
    read = 0  # the batches read: the last one, then the one before it
    while True:
        start = end
        while start and not isinstance(messages[start - 1], AIMessage):
            start -= 1
        answered = False
        for message in messages[start:end]:
            if isinstance(message, ToolMessage):
                answered = True
                text = message_text(message)
                digest = content_hash(text)
                if digest in unshown:
                    previews[digest] = text[:chars]
        ai = messages[start - 1] if start else None
        # An AIMessage whose calls got no answer (an `after_model` jump back to the model)
        # hides no batch: its step wrote nothing, so the walk goes on past it.
        read += answered or not isinstance(ai, AIMessage) or not ai.tool_calls
        if start == 0 or read == 2 or len(previews) == len(unshown):
            break
        if read and ai is not None and ai.id is not None and ai.id == facts.last_batch:
            # The tool hook recorded the last batch: its writes carried the show of the one
            # before, so a digest still without a preview there is one of the last batch's
            # own results that a middleware changed (its text that of an earlier result):
            # it keeps its digest only, as when read in time.
            break
        end = start - 1
    return previews


class PlannedValues:
    """The channel value a batch was planned on, and the show the tools node's writes carry.

    The model call plans its answer's batch on the channel value with the previews of the
    batch the model read (`given_previews`), but writes nothing when the tools node will
    write (one channel version a step): the tools node reads the value without them. This
    maps what the tools node reads (the channel value and its newest message, by identity)
    to the value planned on and the `show_update` its writes carry. A tools node that finds
    no entry (a new process after an interrupt or a crash) computes the same from its own
    state: the messages before the newest AIMessage are what the model read.
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        """Create an empty map."""
        self._last: tuple[Any, Any, Any, Mapping[str, Any] | None] | None = None

    def remember(
        self, seen: Any, newest: Any, planned: Any, show: Mapping[str, Any] | None
    ) -> None:
        """Say that a tools node reading `seen` after `newest` runs a batch planned on `planned`.

        Args:
            seen: The channel value the tools node will read.
            newest: The message the tools node's messages will end with (the model's answer).
            planned: The channel value the batch was planned on.
            show: The `show_update` its writes carry (None: none).
        """
        self._last = (seen, newest, planned, show)

    def planned(
        self, config: GuardConfig, messages: Sequence[BaseMessage], value: Any
    ) -> tuple[Any, Mapping[str, Any] | None]:
        """The value the batch of the tools node's newest AIMessage is planned on, and its show.

        Args:
            config: The guard's configuration.
            messages: The tools node's messages.
            value: The channel value it reads.

        Returns:
            The value to plan on, and the `show_update` the node's writes carry (or None).
        """
        newest = messages[-1] if messages else None
        last = self._last
        if last is not None and last[0] is value and last[1] is newest:
            return last[2], last[3]
        end = len(messages)
        while end and not isinstance(messages[end - 1], AIMessage):
            end -= 1
        previews = given_previews(config, messages[: end - 1], value) if end else {}
        show = show_update(previews) if previews else None
        planned = merge_guard_state(value, show) if show is not None else value
        self._last = (value, newest, planned, show)
        return planned, show


def guard_update(
    config: GuardConfig, events: list[Event], edits: Sequence[Mapping[str, Any]] = ()
) -> StateUpdate:
    """The channel write that records events (and carries preview `edits`: `own_update`)."""
    return own_update(fold_settings(config), events, edits)


def denied_event(planned: DecidedCall, batch: ToolCallBatch, reason: str, *, abort: bool) -> Event:
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


def answered_event(planned: DecidedCall, batch: ToolCallBatch, *, shadowed: bool = False) -> Event:
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


def executed_event(
    config: GuardConfig,
    planned: DecidedCall,
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
    if command and facts.replay == "pure" and facts.source == "default":
        facts = facts._replace(replay="idempotent")
    shadowed = planned.decision.shadowed if planned.decision is not None else None
    ai = batch.ai_message  # the batch's id and size, read off its message once
    return make_event(
        facts,
        "success" if outcome == "success" else "failure",
        result=text,
        reason=shadowed.reason if shadowed is not None else None,
        abort=shadowed is not None and shadowed.verdict is Verdict.ABORT,
        batch=ai.id,
        index=planned.index,
        turn=batch.turn,
        batch_size=len(ai.tool_calls),
        call_id=call_id,
        previews=preview,
    )


def executed_write(
    config: GuardConfig,
    planned: DecidedCall,
    batch: ToolCallBatch,
    outcome: str,
    text: str | None,
    *,
    command: bool = False,
    preview: bool = True,
    call_id: str | None = None,
    edits: Sequence[Mapping[str, Any]] = (),
) -> StateUpdate:
    """The channel write recording a call that ran (`executed_event`, in `guard_update`).

    The record step of one call: the core builds its event and the write that carries it in
    one pass (the event first, then the write, so nothing of the adapter runs in between).
    `edits`: the preview edits the write carries (`PlannedValues`).
    """
    event = executed_event(
        config, planned, batch, outcome, text, command=command, preview=preview, call_id=call_id
    )
    # `guard_update`'s body, inline: a call to it would run adapter code between the core's
    # event and its write (the walk `test_one_path.py` holds to one visit of the core).
    return own_update(fold_settings(config), [event], edits)


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
    return outcome, message_text(message)


def message_text(message: Any) -> str:
    """A message's content as a result's digest and preview are taken from it.

    Content that is not a string (content blocks) is taken as its repr.
    """
    content = getattr(message, "content", "")
    return content if isinstance(content, str) else repr(content)


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
