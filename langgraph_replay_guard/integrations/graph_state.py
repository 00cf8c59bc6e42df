"""`ReplayGuardState`: a graph state with messages and the guard channel, to subclass."""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, Required, get_args, get_origin, get_type_hints

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from langgraph_replay_guard.decisions.state import merge_guard_state

__all__ = ["ReplayGuardState", "declared_without_reducer"]


class ReplayGuardState(TypedDict):
    """Graph state with `messages` and the guard channel (`GUARD_CHANNEL`).

    Subclass it to add your own keys. To add the guard to a state you already have, add
    the one line `replay_guard: NotRequired[Annotated[dict[str, Any] | None, merge_guard_state]]`:
    the reducer must be the LAST item of `Annotated[...]`, or LangGraph makes the key a
    last-value channel, which the guard refuses at its first call (a `ValueError` naming
    this line; in a pydantic or dataclass state,
    `replay_guard: Annotated[dict[str, Any] | None, merge_guard_state] = None`). With
    `| None` the channel starts empty, so `invoke()` output shows it only once the guard
    has recorded something (`dict[str, Any]` works too; the channel then starts as `{}`
    and is in every output).
    """

    messages: Annotated[list[AnyMessage], add_messages]
    replay_guard: NotRequired[Annotated[dict[str, Any] | None, merge_guard_state]]


def declared_without_reducer(schema: Any, channel: str) -> bool:
    """Whether a state class declares `channel` without `merge_guard_state` last in `Annotated`.

    What LangGraph would build for such a key is a last-value channel (see
    `_compat.channel_without_reducer`, which reads the running graph); this reads the class
    itself, for a check before the graph exists (`create_agent(state_schema=...)`).

    Args:
        schema: A state class (a `TypedDict`, a pydantic model, a dataclass), or None.
        channel: The key.

    Returns:
        True when the class declares the key with another last item, or none; False when it
        has the reducer last, does not declare the key, or its annotations cannot be read.
    """
    if schema is None:
        return False
    try:
        hints = get_type_hints(schema, include_extras=True)
    except Exception:  # forward references it cannot resolve here: the first call checks
        return False
    hint = hints.get(channel)
    if hint is None:
        return False
    while get_origin(hint) in (NotRequired, Required):
        hint = get_args(hint)[0]
    metadata = getattr(hint, "__metadata__", ())
    return not (metadata and metadata[-1] is merge_guard_state)
