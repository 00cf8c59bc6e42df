"""`ReplayGuardState`: a graph state with messages and the guard channel, to subclass."""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from langgraph_replay_guard.decisions.state import merge_guard_state

__all__ = ["ReplayGuardState"]


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
