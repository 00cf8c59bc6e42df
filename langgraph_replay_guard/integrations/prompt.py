"""The loop reminder for exactly the next model call, and read-only views of the channel."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import SystemMessage

from langgraph_replay_guard.decisions.engine import render_reminder, state_view, stop_was_ignored
from langgraph_replay_guard.decisions.state import GuardView, is_channel_value, settled
from langgraph_replay_guard.integrations.batches import (
    current_turn,
    last_ai_id,
    state_field,
    turn_anchors,
)
from langgraph_replay_guard.integrations.calls import GUARD_CHANNEL

__all__ = ["guard_view", "ignored_stop", "next_call_reminder", "system_prompt_with_reminder"]


def next_call_reminder(
    state: Any, *, channel: str = GUARD_CHANNEL, messages_key: str = "messages"
) -> str | None:
    """The reminder for the model call about to be made, or None.

    A reminder belongs to the batch of tool calls that tripped a layer: it is shown when
    the last AIMessage in the state is that batch's (the very next model call) and in the
    same user turn, and never again. Nothing is written, so it never enters the history.

    Args:
        state: Graph state with messages and the guard channel.
        channel: State key of the guard channel.
        messages_key: State key of the messages.

    Returns:
        The reminder text, or None.
    """
    value = state_field(state, channel)
    if _settled_without(value, "reminder"):
        return None  # nothing armed: checked (or reset, if unreadable) it would say the same
    view = settled(value)
    reminder = view.get("reminder")
    if not reminder:
        return None
    if reminder.get("batch") != last_ai_id(state, messages_key):
        return None
    if view.get("turn") != current_turn(state, messages_key, turn_anchors(value)):
        return None
    return render_reminder(reminder)


def ignored_stop(
    state: Any, *, channel: str = GUARD_CHANNEL, messages_key: str = "messages"
) -> Mapping[str, Any] | None:
    """The stop of this turn when the guard already answered a come-back after it, or None.

    The model node of a graph that goes back to the model whatever the guard decided (a
    static `tools -> agent` edge) is where such a run can end with a valid history: the
    tools node answered every call and saved its answers, and the model is not called again
    (see `engine.stop_was_ignored`). Nothing is written.

    Args:
        state: Graph state with messages and the guard channel.
        channel: State key of the guard channel.
        messages_key: State key of the messages.

    Returns:
        The state's `stop` entry, or None.
    """
    value = state_field(state, channel)
    if _settled_without(value, "stop"):
        return None  # no stop (checked, an unreadable value resets to none either)
    view = settled(value)
    if not stop_was_ignored(view):
        return None
    if view.get("turn") != current_turn(state, messages_key, turn_anchors(value)):
        return None  # a new user message ends the stop
    stop: Mapping[str, Any] = view["stop"]
    return stop


def system_prompt_with_reminder(
    base: str | SystemMessage | None, reminder: str | None
) -> SystemMessage | None:
    """Append a reminder to a system prompt, changing nothing else in it.

    A prompt made of content blocks gets the reminder as one more text block: the blocks
    before it stay as they were (an Anthropic `cache_control` mark keeps the cached prefix
    cached). A string prompt gets the text appended. The message's other fields (`id`,
    `name`, `additional_kwargs`, `response_metadata`) are kept.

    Args:
        base: The usual system prompt.
        reminder: Reminder text or None.

    Returns:
        The system message to use (None only when both are empty).
    """
    if isinstance(base, SystemMessage):
        if not reminder:
            return base
        content = base.content
        if isinstance(content, list):
            # One more block, never a rebuilt string: the blocks carry provider marks.
            blocks: list[str | dict[Any, Any]] = [*content, {"type": "text", "text": reminder}]
            return base.model_copy(update={"content": blocks})
        text = content if isinstance(content, str) else base.text
        return base.model_copy(update={"content": f"{text}\n\n{reminder}" if text else reminder})
    if not reminder:
        return SystemMessage(content=base) if base else None
    return SystemMessage(content=f"{base}\n\n{reminder}" if base else reminder)


def guard_view(state_or_snapshot: Any, *, channel: str = GUARD_CHANNEL) -> GuardView:
    """A typed, read-only view of the guard channel.

    Args:
        state_or_snapshot: A `StateSnapshot` (`graph.get_state(config)`), a state dict, or
            the channel value itself.
        channel: State key of the guard channel.

    Returns:
        The view; a missing channel gives the view of an empty state.
    """
    values = state_or_snapshot
    if not isinstance(values, Mapping):  # a StateSnapshot (a dict's .values is a method)
        values = getattr(values, "values", values)
    if is_channel_value(values) and channel not in values:
        value: Any = values
        reminder = None
    else:
        value = state_field(values, channel)
        reminder = next_call_reminder(values, channel=channel)
    return state_view(value, reminder)


def _settled_without(value: Any, field: str) -> bool:
    """A stored state (not a write still to fold) with no batch in progress and no `field`.

    Such a value reads the same settled as stored, so the fast paths skip `settled` on it.
    """
    return (
        type(value) is dict
        and "op" not in value
        and value.get(field) is None
        and not value.get("log")
        and "pending" not in value
    )
