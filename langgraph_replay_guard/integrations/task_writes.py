"""The guard's own state writes, sent beside a node's output instead of inside what it returns."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, BaseMessage

from langgraph_replay_guard._compat import channel_writer
from langgraph_replay_guard.decisions.state import Event, StateUpdate
from langgraph_replay_guard.integrations.calls import guard_update
from langgraph_replay_guard.integrations.signals import NodeErrorPassage

if TYPE_CHECKING:
    from langgraph_replay_guard.policy.config import GuardConfig

__all__ = ["TaskWrites", "write_events", "write_update"]

logger = logging.getLogger("langgraph_replay_guard")

_CURRENT: ContextVar[TaskWrites | None] = ContextVar("replay_guard_task_writes", default=None)


@dataclass(eq=False, repr=False, slots=True)  # compared, hashed and shown as itself
class TaskWrites:
    """The events and stop message one run of a guarded `ToolNode` collects from its calls.

    A hook returns what its handler returned (the tool's ToolMessage or Command), so the
    guard's bookkeeping cannot ride in it. Each call adds its events here instead; when the
    node's run ends they go to the guard channel as ONE write, through the task's channel
    writer: saved in the same checkpoint write as the node's messages (a crash keeps both
    or neither), folded by the channel's reducer, never part of the node's return value.
    A stop's final AIMessage is appended to the node's messages, after every ToolMessage.

    Args:
        owner: The wrapper whose calls collect here (a nested guarded graph has its own).
        config: The task's config.
        guard_config: The guard's configuration (the fold settings of the write).
        channel: The guard channel's key.
        messages_key: The node's messages key.
    """

    owner: object
    config: Mapping[str, Any] | None
    guard_config: GuardConfig
    channel: str
    messages_key: str
    events: list[Event] = field(default_factory=list, init=False)
    stop: AIMessage | None = field(default=None, init=False)
    _token: Token[TaskWrites | None] | None = field(default=None, init=False)
    _kept: Exception | None = field(default=None, init=False)

    def __enter__(self) -> TaskWrites:
        """Make this the collector of the calls that run in this context."""
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> bool:
        """Stop collecting (an exception drops the task's writes, as LangGraph does).

        Returns:
            True for a `NodeErrorPassage`: the error it carries is kept for `error()`, and
            the node raises it once the scope is closed.
        """
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None
        if isinstance(error, NodeErrorPassage):
            self._kept = error.error
            return True
        return False

    def error(self) -> Exception:
        """The error a `NodeErrorPassage` carried out of the node's calls (see `__exit__`)."""
        if self._kept is None:
            msg = "no error was kept: the node's calls raised no NodeErrorPassage"
            raise RuntimeError(msg)
        return self._kept

    def finish(self, output: Any) -> Any:
        """Send the collected events as one write; add the stop message to the output.

        Args:
            output: What the `ToolNode` returned (`{messages_key: [...]}`, a list of
                messages, or a list of updates and Commands).

        Returns:
            The output, with the stop's final AIMessage last when the run stopped.
        """
        if self.events:
            # LangGraph stores the first write to an empty channel as it is; it reads as the
            # state its events fold into (`state.own_update`), so a first write is an ordinary one.
            _written(self.config, self.channel, guard_update(self.guard_config, self.events))
        stop = self.stop
        if stop is None:
            return output
        if isinstance(output, dict) and isinstance(output.get(self.messages_key), list):
            return {**output, self.messages_key: [*output[self.messages_key], stop]}
        if not isinstance(output, list):
            return output
        if all(isinstance(item, BaseMessage) for item in output):  # a node given a message list
            return [*output, stop]
        return [*output, {self.messages_key: [stop]}]  # the node's updates and Commands


def write_events(
    owner: object,
    config: Mapping[str, Any] | None,
    guard_config: GuardConfig,
    channel: str,
    events: list[Event],
    *,
    stop: AIMessage | None = None,
    edits: Sequence[Mapping[str, Any]] = (),
) -> bool:
    """Record a call's events in the guard channel, beside the node's output.

    Inside a guarded `ToolNode` run of `owner` they join its `TaskWrites` (one write per
    run); elsewhere (a `create_agent` tool task, a model call) they are written at once
    through the task's channel writer.

    Args:
        owner: The wrapper recording them.
        config: The running task's config.
        guard_config: The guard's configuration.
        channel: The guard channel's key.
        events: The events.
        stop: A stop's final AIMessage, to add after the node's ToolMessages.
        edits: Preview edits the write carries (`own_update`), outside a `ToolNode` run.

    Returns:
        Whether `stop` was taken care of (False: the caller must answer with it itself).
    """
    current = _collector(owner, channel)
    if current is not None:
        current.events.extend(events)
        if stop is not None:
            current.stop = stop
        return True
    if events or edits:
        _written(config, channel, guard_update(guard_config, events, edits))
    return stop is None


def write_update(
    owner: object, config: Mapping[str, Any] | None, channel: str, update: StateUpdate
) -> None:
    """`write_events` for a write the core already built (`calls.executed_write`).

    Inside a guarded `ToolNode` run of `owner` its events join the run's one write;
    elsewhere it is written as it is.

    Args:
        owner: The wrapper recording it.
        config: The running task's config.
        channel: The guard channel's key.
        update: The write (`state.own_update`).
    """
    current = _collector(owner, channel)
    if current is not None:
        current.events.extend(update["events"])
        return
    _written(config, channel, update)


def _collector(owner: object, channel: str) -> TaskWrites | None:
    """The guarded `ToolNode` run of `owner` writing `channel` in this context, if any."""
    current = _CURRENT.get()
    if current is not None and current.owner is owner and current.channel == channel:
        return current
    return None


def _written(config: Mapping[str, Any] | None, channel: str, update: StateUpdate) -> None:
    send = channel_writer(config)
    if send is None:
        # Outside a graph (a ToolNode invoked directly): there is no state to keep count in.
        logger.debug("no graph task to write the guard channel %r to; not recorded", channel)
        return
    send([(channel, update)])
