"""Sees the exception a tool raised even when the ToolNode turns it into an error message.

`ToolNode(handle_tool_errors=...)` converts a tool's exception into a ToolMessage inside the
`execute` callable a wrapper gets, so the wrapper cannot tell "the tool raised after its side
effect" from "the tool returned an error text". LangChain's callback system reports every
tool run's error (`on_tool_error`) before the node handles it; a configure hook adds a small
handler to the tool runs started while the guard's context variable is set.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tracers.context import register_configure_hook

__all__ = ["ToolErrorSpy", "watch_tool_errors"]


class ToolErrorSpy(BaseCallbackHandler):
    """Remembers the exception of the first tool run it sees (the guarded call itself)."""

    run_inline = True  # record before the node handles the error, in the tool's own thread

    def __init__(self) -> None:
        """Create an empty spy."""
        self.run_id: UUID | None = None
        self.error: BaseException | None = None

    def on_tool_start(
        self, serialized: Any, input_str: str, *, run_id: UUID, **kwargs: Any
    ) -> None:
        """Note the guarded call's run (nested tool runs start later)."""
        if self.run_id is None:
            self.run_id = run_id

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Keep the guarded call's own exception."""
        if run_id == self.run_id:
            self.error = error


_SPY: ContextVar[ToolErrorSpy | None] = ContextVar("replay_guard_tool_error_spy", default=None)
# Not inheritable: only the tool run started directly under the guard gets the handler.
register_configure_hook(_SPY, inheritable=False)


@contextlib.contextmanager
def watch_tool_errors() -> Iterator[ToolErrorSpy]:
    """Watch the tool run started inside the block; its exception lands in `spy.error`."""
    spy = ToolErrorSpy()
    token = _SPY.set(spy)
    try:
        yield spy
    finally:
        _SPY.reset(token)
