"""The tool a guarded call runs: a copy that reports its runs, its state writes and its error."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tools import StructuredTool, Tool
from langchain_core.tracers.context import register_configure_hook
from langgraph.errors import GraphBubbleUp

from langgraph_replay_guard._compat import (
    channel_writer,
    injected_arg_names,
    own_interrupt,
    with_channel_writer,
)
from langgraph_replay_guard.decisions.memo import IdentityMemo

__all__ = [
    "ToolErrorSpy",
    "ToolRuns",
    "ledgered_tool",
    "model_args",
    "watch_tool_errors",
    "with_invoke",
]

_INJECTED: IdentityMemo[frozenset[str]] = IdentityMemo(256)


def model_args(tool: Any, input: Any) -> dict[str, Any] | None:
    """The model's own arguments in a tool's input, without the ones `ToolNode` injected.

    Args:
        tool: The tool the input is for.
        input: What `ToolNode` passes to `tool.invoke` (the tool call, with injected state,
            store and runtime added to its arguments).

    Returns:
        The arguments, or None when the input is not a tool call.
    """
    args = input.get("args") if isinstance(input, dict) else None
    if not isinstance(args, dict):
        return None
    injected = _INJECTED.recall(tool)
    if injected is None:
        injected = injected_arg_names(tool)
        _INJECTED.remember(tool, injected)
    return {k: v for k, v in args.items() if k not in injected} if injected else dict(args)


class ToolRuns:
    """Whether, and how, the tool body of one call ran (see `ledgered_tool`)."""

    __slots__ = ("args", "body", "error", "result", "started")

    def __init__(self) -> None:
        self.started = False
        """Whether the tool was invoked (its framework code may still fail before its body)."""
        self.body: bool | None = None
        """Whether the tool's own function started; None when the guard cannot see it (a
        `BaseTool` subclass with its own `_run`, a tool whose `invoke` was replaced). False
        after an error is proven: the body LangChain calls is the function the guard
        wrapped, and the framework refused the call before calling it (an async-only tool
        run through `invoke`, arguments its schema rejects): a known no-effect failure."""
        self.args: Any = None
        """The arguments the body was started with (the model's own, without injected ones)."""

    @contextmanager
    def watch(self, config: Any = None) -> Iterator[None]:
        """Around one run of the body.

        The tool's own `interrupt()` is not an outcome: LangGraph runs the tool again from
        its start on resume, so the run does not count as started. Any other control-flow
        signal (a nested guard's stop, a `ParentCommand`, a sub-agent's interrupt) leaves
        the run started: what the body did before it is not known.

        Args:
            config: The config the tool runs with (its task's checkpoint namespace).
        """
        try:
            yield
        except GraphBubbleUp as exc:
            if own_interrupt(exc, config):
                self.started = False
            raise


def ledgered_tool(tool: Any, *, runs: ToolRuns, sends: list[tuple[str, Any]] | None = None) -> Any:
    """A copy of a tool whose runs the ledger sees whole.

    - `runs.started` says whether the body ran at all: a middleware inside the guard may
      answer the call itself (a cache, an emulator, a HITL reject), and such an answer is
      never recorded as the tool's result.
    - Its state writes beside its answer (a write through the task's channel writer, as
      deepagents' `StateBackend` writes `files`) are also appended to `sends`, so the ledger
      records them with the outcome and a replay writes them again.

    The copy is run once per plan: the guard plans each call where the tool runs (see
    `ToolCallWrapper._decided_where_it_runs`), so a retry inside the guard is a new plan,
    which asks the ledger again.

    Args:
        tool: The `BaseTool` the call would run.
        runs: What the copy reports its runs to.
        sends: Where to record the tool's channel writes (None: not recorded).

    Returns:
        A shallow copy whose `invoke`/`ainvoke` are wrapped, or the tool itself when it
        cannot be copied.
    """
    if getattr(tool, "model_copy", None) is None:
        return tool
    attempts = runs
    body = _body_watching(tool, runs)
    invoke, ainvoke = body.invoke, body.ainvoke

    def start(input: Any) -> None:
        attempts.started = True
        attempts.args = model_args(tool, input)

    def recording(config: Any) -> Any:
        send = channel_writer(config) if sends is not None else None
        if send is None or sends is None:
            return config

        def record_and_send(writes: Sequence[tuple[str, Any]]) -> None:
            sends.extend((str(channel), value) for channel, value in writes)
            send(writes)

        return with_channel_writer(config, record_and_send)

    # The sync and async runs share `start`, `recording` and `attempts.watch`; only the call
    # of the original method differs.
    def guarded_invoke(input: Any, config: Any = None, **kwargs: Any) -> Any:
        start(input)
        with attempts.watch(config):
            return invoke(input, recording(config), **kwargs)

    async def guarded_ainvoke(input: Any, config: Any = None, **kwargs: Any) -> Any:
        start(input)
        with attempts.watch(config):
            return await ainvoke(input, recording(config), **kwargs)

    return with_invoke(tool, guarded_invoke, guarded_ainvoke)


_BODY_PATH = (
    "invoke",
    "ainvoke",
    "run",
    "arun",
    "_parse_input",
    "_to_args_and_kwargs",
    "_run",
    "_arun",
)
"""The methods between `tool.invoke` and a function tool's `func`/`coroutine`."""


def _calls_its_function(tool: StructuredTool | Tool) -> bool:
    """Whether LangChain's own code runs this tool's `func`/`coroutine`, with nothing else.

    A subclass that overrides a method on the way (its own `_run`, often with `func=None`)
    or an instance whose `invoke` was replaced runs code the guard cannot see start.
    """
    base: type[Any] = StructuredTool if isinstance(tool, StructuredTool) else Tool
    kind = type(tool)
    own = vars(tool)
    return all(
        getattr(kind, name, None) is getattr(base, name, None) and name not in own
        for name in _BODY_PATH
    )


def _body_watching(tool: Any, runs: ToolRuns) -> Any:
    """A copy of a function tool whose functions report their start to `runs.body`.

    A `StructuredTool` or `Tool` runs its `func` (sync) or `coroutine` (async); LangChain
    validates the input and refuses a sync run of an async-only tool before calling either.
    "Not started" is proven only when that is the code that runs: any other tool (a subclass
    with its own `_run`, a replaced `invoke`) is returned as it is, and `runs.body` stays
    None (not known).
    """
    if not isinstance(tool, StructuredTool | Tool) or not _calls_its_function(tool):
        return tool
    runs.body = False
    update: dict[str, Any] = {}
    func, coroutine = tool.func, tool.coroutine
    if func is not None:

        @functools.wraps(func)
        def started(*args: Any, **kwargs: Any) -> Any:
            runs.body = True
            return func(*args, **kwargs)

        update["func"] = started
    if coroutine is not None:

        @functools.wraps(coroutine)
        async def astarted(*args: Any, **kwargs: Any) -> Any:
            runs.body = True
            return await coroutine(*args, **kwargs)

        update["coroutine"] = astarted
    return tool.model_copy(update=update)


def with_invoke(tool: Any, invoke: Callable[..., Any], ainvoke: Callable[..., Any]) -> Any:
    """A shallow copy of a tool whose `invoke` and `ainvoke` are the given functions.

    Args:
        tool: A `BaseTool` (anything with `model_copy`).
        invoke: The copy's `invoke(input, config=None, **kwargs)`.
        ainvoke: The copy's `ainvoke`.

    Returns:
        The copy, or the tool itself when it cannot be copied.
    """
    copy = getattr(tool, "model_copy", None)
    if copy is None:
        return tool
    with contextlib.suppress(Exception):
        # Built once on the tool itself (as `bind_tools` does), the schema is shared by every
        # copy: a middleware that reads a copy's schema neither rebuilds it at each call nor
        # makes the copy unequal to the tool (a schema built on the copy only is its own).
        _ = tool.tool_call_schema
    replaced = copy()
    # Instance attributes shadow the class's methods; `ToolNode` calls `tool.invoke`.
    object.__setattr__(replaced, "invoke", invoke)
    object.__setattr__(replaced, "ainvoke", ainvoke)
    return replaced


# -- the error a tool raised ----------------------------------------------------------------
#
# What the tool raised, even when the ToolNode turns it into an error message:
# `ToolNode(handle_tool_errors=...)` converts a tool's exception into a ToolMessage inside the
# `execute` callable a wrapper gets, so the wrapper cannot tell "the tool raised after its side
# effect" from "the tool returned an error text". LangChain's callback system reports every
# tool run's error (`on_tool_error`) before the node handles it; a configure hook adds a small
# handler to the tool runs started while the guard's context variable is set.


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
