"""Replay stops that travel LangGraph's control-flow path, past retry and error handlers."""

from __future__ import annotations

from typing import TypeVar, cast

from langgraph.errors import GraphBubbleUp

from langgraph_replay_guard.errors import (
    LoopAbortedError,
    ReplayConflictError,
    ReplayGuardError,
    ReplayInFlightError,
    ReplayUnsafeError,
)

__all__ = [
    "NodeErrorPassage",
    "ReplayUnsafeSignal",
    "as_signal",
]


class ReplayUnsafeSignal(ReplayUnsafeError, GraphBubbleUp):
    """A `ReplayUnsafeError` that retry and error handlers pass on instead of handling.

    An unknown outcome must reach a human: `ToolRetryMiddleware` would run the call again and
    `ToolErrorMiddleware` (or a catch-all handler) would hand it to the model as an ordinary
    tool error. Both, like LangGraph's `RetryPolicy` and `ToolNode`, let LangGraph's
    control-flow signals (`GraphBubbleUp`: interrupts, parent commands) through untouched.
    Callers catch it as the `ReplayUnsafeError` it is.
    """


class ReplayConflictSignal(ReplayConflictError, GraphBubbleUp):
    """A `ReplayConflictError` that retry and error handlers pass on (see `ReplayUnsafeSignal`)."""


class ReplayInFlightSignal(ReplayInFlightError, GraphBubbleUp):
    """A `ReplayInFlightError` that retry and error handlers pass on (see `ReplayUnsafeSignal`)."""


class LoopAbortedSignal(LoopAbortedError, GraphBubbleUp):
    """A `LoopAbortedError` that retry and error handlers pass on: a stop must stop the run.

    A `ToolNode(handle_tool_errors=True)` or `ToolErrorMiddleware` would hand it to the model
    as a tool error, and the loop would go on.
    """


class NodeErrorPassage(GraphBubbleUp):
    """An error a `ToolNode`'s own execution let out, carried past the node's wrapper handling.

    Without a wrapper, what a ToolNode's execution lets out (an error its
    `handle_tool_errors` leaves, LangGraph's own argument injection failing: a tool that
    needs a store the graph lacks) leaves the node. With any wrapper, the node turns
    whatever the wrapper lets out into an error `ToolMessage`. When the guard is the node's
    only wrapper it sends such an error on inside this signal, which the node lets through,
    and the guarded node raises the error itself once the node's run is over
    (`TaskWrites.error`): LangGraph, its retry policies and error handlers see the error
    they see without the guard.

    Args:
        error: The error.
    """

    def __init__(self, error: Exception) -> None:
        """Carry `error`."""
        super().__init__(error)
        self.error = error


for _signal_kind in (
    ReplayUnsafeSignal,
    ReplayConflictSignal,
    ReplayInFlightSignal,
    LoopAbortedSignal,
):
    # What users see (tracebacks, recorded errors, logs) is the public error they catch.
    _base = _signal_kind.__mro__[1]
    _signal_kind.__name__ = _signal_kind.__qualname__ = _base.__name__
    _signal_kind.__module__ = _base.__module__

_SIGNALS: tuple[tuple[type[ReplayGuardError], type[ReplayGuardError]], ...] = (
    (ReplayUnsafeError, ReplayUnsafeSignal),
    (ReplayConflictError, ReplayConflictSignal),
    (ReplayInFlightError, ReplayInFlightSignal),
    (LoopAbortedError, LoopAbortedSignal),
)


_Error = TypeVar("_Error", bound=ReplayGuardError)


def as_signal(error: _Error) -> _Error:
    """The same error as a LangGraph control-flow signal (`GraphBubbleUp`), if it is a stop.

    Args:
        error: A replay stop or a loop stop the guard built.

    Returns:
        An instance of the signal subclass with the same message and attributes (callers
        still catch it as the class they know), or `error` itself for any other error.
    """
    for kind, signal_kind in _SIGNALS:
        if isinstance(error, kind) and not isinstance(error, GraphBubbleUp):
            signal = signal_kind.__new__(signal_kind)
            signal.args = error.args
            signal.__dict__.update(error.__dict__)
            signal.__cause__ = error.__cause__
            return cast("_Error", signal)  # a subclass of the error's own class
    return error
