"""The guard's decision in the tool run's metadata and tags, for LangSmith and other tracers."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from langchain_core.callbacks import (
    AsyncCallbackManager,
    BaseCallbackHandler,
    BaseCallbackManager,
    CallbackManager,
)

from langgraph_replay_guard.decisions.engine import Decision
from langgraph_replay_guard.storage.plans import adrive, drive

if TYPE_CHECKING:
    from langchain_core.messages import ToolCall
    from langchain_core.tools import BaseTool
    from langgraph.prebuilt.tool_node import ToolCallRequest

__all__ = [
    "TRACE_KEY",
    "BlockedRun",
    "LedgerAction",
    "ablocked_run",
    "blocked_run",
    "trace_info",
    "trace_tags",
    "traced",
    "traced_request",
]

M = TypeVar("M", bound=BaseCallbackManager)

TRACE_KEY = "replay_guard"
"""The run metadata key holding the guard's decision."""

LedgerAction = Literal["claimed", "replayed", "none"]
"""`claimed`: the ledger recorded the call before it ran; `replayed`: the ledger answered it
without running the tool; `none`: the ledger was not involved (no store or thread id, or the
call did not run)."""


def trace_info(
    decision: Decision | None,
    *,
    replay: str | None,
    source: str | None = None,
    ledger: LedgerAction = "none",
    verdict: str | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """The guard's decision about one call, as the small JSON object put in run metadata.

    Args:
        decision: The engine's decision, or None for a call it could not key.
        replay: The call's replay class (`pure`, `idempotent`, `unsafe`), or None.
        source: Where the class comes from (`GuardConfig.policy_source`: `tools`,
            `toolkit`, `annotations` for MCP annotations, `default`), or None.
        ledger: What the replay ledger did with the call.
        verdict: Overrides the decision's verdict (a sibling of an aborting call is `abort`).
        reason: Overrides the decision's reason.

    Returns:
        `{"verdict", "reason", "count", "replay", "source", "ledger"}`, and `"shadow"`
        (`{"verdict", "reason"}`) for a call that ran in shadow mode although enforcing
        would have blocked it.
    """
    info: dict[str, Any] = {
        "verdict": verdict or (decision.verdict.value if decision is not None else "deny"),
        "reason": reason or (decision.reason if decision is not None else None),
        "count": decision.count if decision is not None else 1,
        "replay": replay,
        "source": source,
        "ledger": ledger,
    }
    shadowed = decision.shadowed if decision is not None else None
    if shadowed is not None:
        # Shadow mode: the call ran; enforcing would have done this.
        info["shadow"] = {"verdict": shadowed.verdict.value, "reason": shadowed.reason}
    return info


def trace_tags(info: Mapping[str, Any]) -> list[str]:
    """The run tag for a decision (`replay_guard:deny`), to filter runs by verdict.

    Args:
        info: A `trace_info` object.

    Returns:
        One tag.
    """
    return [f"{TRACE_KEY}:{info['verdict']}"]


def traced(config: Mapping[str, Any] | None) -> bool:
    """Whether a run with this config reports to any callback handler (a tracer).

    Cheap: LangGraph hands each node a callback manager holding every inherited handler,
    tracers configured by environment included; without handlers nothing is reported.

    Args:
        config: The runnable config of the tool call.

    Returns:
        False when no handler could see a run.
    """
    callbacks = (config or {}).get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        return bool(callbacks.handlers)
    if isinstance(callbacks, list):
        return bool(callbacks)
    # No callbacks given: a tracer may still come from the environment (LANGSMITH_TRACING).
    return True


def traced_request(
    request: ToolCallRequest, info: Callable[[], Mapping[str, Any]]
) -> ToolCallRequest:
    """The request with a tool whose run carries the decision in its metadata and tags.

    `BaseTool.run` merges the tool's own `metadata` and `tags` into its run; the config the
    node passes to the tool was fixed before any wrapper ran, so the tool is the place.

    Args:
        request: The call the guard lets run.
        info: Builds the `trace_info` object (called only when something traces the run).

    Returns:
        A new request (the same one when nothing traces the run).
    """
    tool = request.tool
    if tool is None or not traced(getattr(request.runtime, "config", None)):
        return request
    decision = info()
    update = {
        "metadata": {**(tool.metadata or {}), TRACE_KEY: dict(decision)},
        "tags": [*(tool.tags or []), *trace_tags(decision)],
    }
    return request.override(tool=tool.model_copy(update=update))


def _run_args(
    tool_call: ToolCall, tool: BaseTool | None
) -> tuple[dict[str, Any], str, dict[str, Any]]:
    name = tool.name if tool is not None else str(tool_call.get("name", ""))
    description = tool.description if tool is not None else ""
    args = tool_call.get("args")
    inputs = dict(args) if isinstance(args, Mapping) else None
    kwargs = {"inputs": inputs, "tool_call_id": tool_call.get("id"), "name": name}
    return {"name": name, "description": description}, str(args), kwargs


def _configure_args(config: Mapping[str, Any], info: Mapping[str, Any]) -> tuple[Any, ...]:
    # As BaseTool.run does: the config's callbacks, tags and metadata are inherited, the
    # decision is the run's own (not passed on to child runs).
    return (
        config.get("callbacks"),
        None,
        False,
        config.get("tags"),
        trace_tags(info),
        config.get("metadata"),
        {TRACE_KEY: dict(info)},
    )


@dataclass(frozen=True, slots=True)
class BlockedRun:
    """A call the guard answered without running the tool, to report as a tool run.

    Tracers then show the call, with the guard's answer as its output (or the stop as its
    error) and the decision in its metadata, where a plain run of the tool would be.
    """

    config: Mapping[str, Any] | None
    """The runnable config of the call (its callbacks, tags, metadata)."""
    tool_call: ToolCall
    tool: BaseTool | None
    """The tool, for its name and description."""
    info: Mapping[str, Any]
    """A `trace_info` object."""
    output: Any = None
    """What the model is told instead (a ToolMessage or a Command)."""
    error: BaseException | None = None
    """The error the call stops the run with, instead of an output."""


def blocked_run(run: BlockedRun, *, exclude: BaseCallbackHandler | None = None) -> None:
    """Report a call the guard answered without running the tool, as a tool run of its own.

    Args:
        run: The call and the guard's answer.
        exclude: A handler not to tell (the callback guard reporting its own refusal).
    """
    manager = _manager(CallbackManager.configure, run)
    if manager is None:
        return
    if exclude is not None:
        manager.remove_handler(exclude)
    drive(_report_plan(manager, run), _call)


async def ablocked_run(run: BlockedRun) -> None:
    """Async `blocked_run`."""
    manager = _manager(AsyncCallbackManager.configure, run)
    if manager is not None:
        await adrive(_report_plan(manager, run), _acall)


def _manager(configure: Callable[..., M], run: BlockedRun) -> M | None:
    """The callback manager a blocked run reports to; None when nothing traces the call."""
    config = run.config
    if config is None or not traced(config):
        return None
    return configure(*_configure_args(config, run.info))


def _report_plan(manager: Any, blocked: BlockedRun) -> Generator[Callable[[], Any], Any, None]:
    """Start the tool run, then end it with the output or the error: one plan, each op a call.

    The sync driver calls each op; the async one awaits what it returns (the async
    manager's callbacks are coroutines).
    """
    serialized, input_str, kwargs = _run_args(blocked.tool_call, blocked.tool)
    run = yield functools.partial(manager.on_tool_start, serialized, input_str, **kwargs)
    tool_call_id = kwargs["tool_call_id"]
    if blocked.error is not None:
        yield functools.partial(run.on_tool_error, blocked.error, tool_call_id=tool_call_id)
    else:
        name = serialized["name"]
        yield functools.partial(
            run.on_tool_end, blocked.output, name=name, tool_call_id=tool_call_id
        )


def _call(op: Callable[[], Any]) -> Any:
    return op()


async def _acall(op: Callable[[], Awaitable[Any]]) -> Any:
    return await op()
