"""The answers the guard gives calls it does not run, and the message that ends a stopped run."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, ToolCall, ToolMessage

from langgraph_replay_guard.decisions.engine import (
    DecidedCall,
    Decision,
    Verdict,
    call_facts,
)
from langgraph_replay_guard.decisions.failures import SAME_FAILURE
from langgraph_replay_guard.decisions.keys import content_hash
from langgraph_replay_guard.decisions.state import Event
from langgraph_replay_guard.decisions.texts import (
    STOP_IGNORED,
    UNKNOWN_TOOL,
    duplicate_message,
    prompt_name,
    with_last_result,
)
from langgraph_replay_guard.integrations.batches import ToolCallBatch, state_messages
from langgraph_replay_guard.integrations.calls import denied_event, message_text
from langgraph_replay_guard.policy.resolver import PolicyResolver

if TYPE_CHECKING:
    from langgraph_replay_guard.policy.config import GuardConfig

__all__ = [
    "ANSWER_MARK",
    "STOPPED_MARK",
    "STOP_MARK",
    "abort_answer",
    "blocked_answer",
    "earlier_answer",
    "final_ai_message",
    "last_result_answer",
    "message_with_result",
    "stopped_here",
    "whole_duplicate_answer",
]

logger = logging.getLogger("langgraph_replay_guard")


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


def message_with_result(
    state: Any, digest: str, messages_key: str = "messages"
) -> ToolMessage | None:
    """The newest successful ToolMessage of the thread whose text has this result digest.

    A short circuit quotes its call's last result (`same_result`): the channel recorded its
    digest, and a message with that digest holds that very text, whichever call it answers
    (an older result of the same call, or a message a middleware changed, has another
    digest). Read only when a call is short-circuited, newest first, the whole history.

    Args:
        state: The graph state.
        digest: The last result's digest (`engine.last_result_digest`).
        messages_key: Key of the message list.

    Returns:
        The ToolMessage, or None when the history no longer holds that text.
    """
    for message in reversed(state_messages(state, messages_key)):
        if (
            isinstance(message, ToolMessage)
            and message.status != "error"
            and content_hash(message_text(message)) == digest
        ):
            return message
    return None


def last_result_answer(
    answer: ToolMessage, earlier: ToolMessage, preview_chars: int
) -> ToolMessage:
    """A `same_result` answer made without a preview, with one cut from the thread.

    Where the guard reads the thread's messages its channel keeps result digests only
    (`keeps_previews`): the preview of the last identical result is cut from that call's
    ToolMessage, as the model was given it.

    Args:
        answer: The short-circuited call's answer (no preview).
        earlier: A ToolMessage holding the last result (`message_with_result`).
        preview_chars: `GuardConfig.result_preview_chars`.

    Returns:
        The answer with the preview.
    """
    preview = message_text(earlier)[:preview_chars]
    return answer.model_copy(update={"content": with_last_result(answer.text, preview)})


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
    planned: DecidedCall, aborting: DecidedCall, batch: ToolCallBatch
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


def blocked_answer(planned: DecidedCall, batch: ToolCallBatch) -> tuple[ToolMessage, list[Event]]:
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
