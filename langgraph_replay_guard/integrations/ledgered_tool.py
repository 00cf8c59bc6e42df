"""The tool a guarded call runs: a copy that reports its runs, its state writes, and runs once."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from langgraph.errors import GraphBubbleUp

from langgraph_replay_guard._compat import channel_writer, with_channel_writer
from langgraph_replay_guard.integrations.signals import RetryRefused

__all__ = ["ToolRuns", "ledgered_tool"]


class ToolRuns:
    """Whether, and how, the tool body of one call ran (see `ledgered_tool`)."""

    __slots__ = ("args", "error", "result", "started")

    def __init__(self) -> None:
        self.started = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.args: Any = None
        """The arguments the body was started with (the model's own, without injected ones)."""

    @contextmanager
    def watch(self) -> Iterator[None]:
        """Around one run of the body: remember what it raised.

        An interrupt (`GraphBubbleUp`) is not an outcome: LangGraph runs the tool again
        from its start on resume, so the run does not count as started.
        """
        try:
            yield
        except GraphBubbleUp:
            self.started = False
            raise
        except BaseException as exc:
            self.error = exc
            raise

    def again(self) -> Any:
        """What a second run gets: the first run's result, or a refusal."""
        if self.error is not None:
            raise RetryRefused(self.error)
        return self.result


def ledgered_tool(
    tool: Any, *, runs: ToolRuns, sends: list[tuple[str, Any]] | None = None, once: bool = False
) -> Any:
    """A copy of a tool whose runs the ledger sees whole.

    - `runs.started` says whether the body ran at all: a middleware inside the guard may
      answer the call itself (a cache, an emulator, a HITL reject), and such an answer is
      never recorded as the tool's result.
    - Its state writes beside its answer (a write through the task's channel writer, as
      deepagents' `StateBackend` writes `files`) are also appended to `sends`, so the ledger
      records them with the outcome and a replay writes them again.
    - With `once` (an `unsafe` call, claimed once where the guard sits in the middleware
      list), its body runs at most once: a second invocation (a retry middleware inside the
      guard) returns the first result, or, when the first run raised (the effect may have
      happened), raises `RetryRefused`.

    Args:
        tool: The `BaseTool` the call would run.
        runs: What the copy reports its runs to.
        sends: Where to record the tool's channel writes (None: not recorded).
        once: Whether to refuse a second run.

    Returns:
        A shallow copy whose `invoke`/`ainvoke` are wrapped, or the tool itself when it
        cannot be copied.
    """
    copy = getattr(tool, "model_copy", None)
    if copy is None:
        return tool
    attempts = runs
    invoke, ainvoke = tool.invoke, tool.ainvoke
    schema = getattr(tool, "tool_call_schema", None)
    fields = getattr(schema, "model_fields", None)

    def start(input: Any) -> bool:
        """Note a run's start; False when it must not run (a second run of a `once` call)."""
        if once and attempts.started:
            return False
        attempts.started = True
        args = input.get("args") if isinstance(input, dict) else None
        if isinstance(args, dict):
            # Injected arguments (state, store, runtime) are not the model's: leave them out.
            attempts.args = {k: v for k, v in args.items() if fields is None or k in fields}
        return True

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
        if not start(input):
            return attempts.again()
        with attempts.watch():
            attempts.result = invoke(input, recording(config), **kwargs)
        return attempts.result

    async def guarded_ainvoke(input: Any, config: Any = None, **kwargs: Any) -> Any:
        if not start(input):
            return attempts.again()
        with attempts.watch():
            attempts.result = await ainvoke(input, recording(config), **kwargs)
        return attempts.result

    guarded = copy()
    # Instance attributes shadow the class's methods; `ToolNode` calls `tool.invoke`.
    object.__setattr__(guarded, "invoke", guarded_invoke)
    object.__setattr__(guarded, "ainvoke", guarded_ainvoke)
    return guarded
