"""A guard channel that a sub-graph gets empty at every run: found from the messages, refused."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage

from langgraph_replay_guard._compat import at_first_step, subgraph_namespace
from langgraph_replay_guard.integrations.batches import state_messages

__all__ = ["ResetWatch", "reset_channel_message"]

_MAX_REMEMBERED = 4096
"""Most (thread, AIMessage id) pairs one wrapper remembers (the oldest go first)."""

_LOOKBACK = 400
"""Most messages looked through for an AIMessage decided before (recent batches)."""


class ResetWatch:
    """Remembers the batches a wrapper decided on an empty channel in a sub-graph.

    A guarded `ToolNode` in a sub-graph whose state declares the guard channel, called as a
    node of a parent graph whose state does not, starts from the parent's state at every
    parent step: its channel is empty at every call, and the messages carry the whole
    thread. A call decided on an empty channel at the sub-graph's first step (the tool
    calls come from the parent's model) whose messages hold another AIMessage that this
    wrapper already decided so in the same thread is that reset. A sub-agent that loops
    inside its own run (a `create_react_agent` worker: its tools run after its own model)
    keeps its channel for the run, and a fresh run (deepagents' `task`) starts from new
    messages: neither is looked at. Only the calls that find the channel empty are: never
    a step of a graph whose channel works.
    """

    def __init__(self) -> None:
        """Start with nothing remembered."""
        self._seen: OrderedDict[tuple[str | None, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def check(
        self, config: Mapping[str, Any] | None, state: Any, messages_key: str, tool_call_id: Any
    ) -> str | None:
        """Note this call's batch; the sub-graph's namespace when the channel was reset.

        Args:
            config: The running task's config.
            state: The state the call is decided against.
            messages_key: Key of the message list.
            tool_call_id: The call's id (its AIMessage is this call's batch).

        Returns:
            The sub-graph's checkpoint namespace when an earlier batch of the thread was
            decided on an empty channel too; None otherwise (also outside a sub-graph).
        """
        namespace = subgraph_namespace(config)
        if namespace is None or not at_first_step(config):
            return None
        configurable = config.get("configurable") if config else None
        thread = configurable.get("thread_id") if isinstance(configurable, Mapping) else None
        thread = str(thread) if thread is not None else None
        batches = [
            message
            for message in state_messages(state, messages_key)[-_LOOKBACK:]
            if isinstance(message, AIMessage) and message.tool_calls and message.id
        ]
        mine = [m.id for m in batches if any(c.get("id") == tool_call_id for c in m.tool_calls)]
        with self._lock:
            reset = any((thread, m.id) in self._seen for m in batches if m.id not in mine and m.id)
            for batch_id in mine:
                if batch_id:
                    self._seen[(thread, batch_id)] = None
                    self._seen.move_to_end((thread, batch_id))
            while len(self._seen) > _MAX_REMEMBERED:
                self._seen.popitem(last=False)
        return namespace if reset else None


def reset_channel_message(channel: str, namespace: str) -> str:
    """The error for a guard channel a sub-graph gets empty at every run.

    Args:
        channel: The state key.
        namespace: The sub-graph's checkpoint namespace.

    Returns:
        The message, with the line to write.
    """
    parent = namespace.split("|")[0].split(":")[0]
    return (
        f"the guard channel {channel!r} is empty again in the sub-graph that runs this "
        f"ToolNode (node {parent!r} of its parent graph), although the thread's messages "
        "hold a tool call the guard already decided: the parent graph's state has no "
        f"{channel!r} channel, so every run of the sub-graph starts without it and the "
        "guard would stop no loop. Declare the channel in the parent graph's state too: "
        f"`{channel}: NotRequired[Annotated[dict[str, Any] | None, merge_guard_state]]` in "
        f"a TypedDict state, `{channel}: Annotated[dict[str, Any] | None, "
        "merge_guard_state] = None` in a pydantic or dataclass state (merge_guard_state "
        "from langgraph_replay_guard), or build the parent on ReplayGuardState; see "
        "docs/using-it-with.md."
    )
