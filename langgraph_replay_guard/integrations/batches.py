"""Where a tool call sits: the AIMessage batch that asked for it and the user turn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage

__all__ = [
    "ToolCallBatch",
    "current_turn",
    "find_batch",
    "last_ai_id",
    "previous_batch",
    "state_field",
    "state_messages",
    "turn_anchors",
]


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
    if type(state) is dict or isinstance(state, Mapping):  # a dict without the ABC's call
        return state.get(key)
    return getattr(state, key, None)


def state_messages(state: Any, messages_key: str = "messages") -> Sequence[BaseMessage]:
    """The message list of a graph state (empty when there is none)."""
    messages = state_field(state, messages_key)
    return messages if type(messages) is list or isinstance(messages, Sequence) else []


def turn_anchors(value: Any) -> dict[str, str | None]:
    """Turns the guard channel already knows, by AIMessage id.

    A turn lookup walks back through the messages to the last user message; it can stop at
    the AIMessage of the last batch the guard recorded, whose turn is in the channel. That
    keeps the lookup short however long the thread is.
    """
    anchors: dict[str, str | None] = {}
    if type(value) is not dict and not isinstance(value, Mapping):
        return anchors
    # The raw value is read before it is checked: take only well-typed anchors (a wrong
    # one can only shorten the walk to a wrong turn, which starts the counters afresh).
    last_batch, turn = value.get("last_batch"), value.get("turn")
    if isinstance(last_batch, str) and (turn is None or isinstance(turn, str)):
        anchors[last_batch] = turn
    # The batch in progress: its first event's turn (`log`; format 2 kept it in `pending`).
    log = value.get("log")
    if log is None and "pending" in value and isinstance(value["pending"], Mapping):
        log = value["pending"].get("events")
    first = log[0] if isinstance(log, list) and log else None
    if (type(first) is dict or isinstance(first, Mapping)) and isinstance(first.get("b"), str):
        first_turn = first.get("t")
        anchors[first["b"]] = first_turn if isinstance(first_turn, str) else None
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
