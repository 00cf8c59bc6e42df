"""The one place that reads LangGraph's and LangChain's private internals."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "ToolNodeSettings",
    "create_agent_middleware",
    "delegate_store",
    "handled_error_types",
    "is_default_tool_error_handler",
    "run_checkpointer",
    "run_durability",
    "signature_once",
    "tool_error_content",
    "tool_node_settings",
]

# Supported ranges (pyproject.toml): langgraph >=1.0,<2 (prebuilt ToolNode 1.x), langchain
# >=1.3,<2. tests/unit/test_compat.py checks every accessor against the installed versions.

_Hook = TypeVar("_Hook", bound=Callable[..., Any])


def signature_once(hook: _Hook) -> _Hook:
    """`hook` with its signature computed once, at import, instead of on every call.

    `create_agent` wraps each middleware `wrap_*` hook in langsmith's `traceable`, which calls
    `inspect.signature` on the hook at every call, tracing on or off: about a third of the
    wrapper's cost, twice per agent step. A precomputed `__signature__` turns that into an
    attribute read (`inspect.signature` returns it as is).
    """
    setattr(hook, "__signature__", inspect.signature(hook))  # noqa: B010 (a function attribute)
    return hook


# `create_agent` reads `m.name` of every middleware inside a comprehension (its own frame
# before Python 3.12), so the building call is at most a few frames up.
_MAX_FRAMES_UP = 4


def create_agent_middleware() -> list[Any] | None:
    """The middleware list of the `langchain.agents.create_agent` call running now, if any.

    Used to name the problem when two guard middlewares would collide, before LangChain's
    generic "Please remove duplicate middleware instances." Reads a local variable of
    `langchain.agents.factory.create_agent`; when LangChain renames it, this returns None and
    LangChain's own check still applies.
    """
    frame = sys._getframe(1)
    for _ in range(_MAX_FRAMES_UP + 1):
        frame_back = frame.f_back
        if frame_back is None:
            return None
        frame = frame_back
        code = frame.f_code
        if code.co_name == "create_agent" and frame.f_globals.get("__name__") == (
            "langchain.agents.factory"
        ):
            middleware = frame.f_locals.get("middleware")
            return list(middleware) if isinstance(middleware, (list, tuple)) else None
    return None


@dataclass(frozen=True)
class ToolNodeSettings:
    """What a `ToolNode` was built with; it keeps these private and has no copy method."""

    wrap_tool_call: Callable[..., Any] | None
    awrap_tool_call: Callable[..., Any] | None
    messages_key: str
    handle_tool_errors: Any


def tool_node_settings(node: Any) -> ToolNodeSettings:
    """The settings of a `langgraph.prebuilt.ToolNode`, to build a guarded copy of it.

    Args:
        node: The ToolNode.

    Returns:
        Its wrappers, messages key and `handle_tool_errors` setting.
    """
    return ToolNodeSettings(
        wrap_tool_call=node._wrap_tool_call,
        awrap_tool_call=node._awrap_tool_call,
        messages_key=node._messages_key,
        handle_tool_errors=node._handle_tool_errors,
    )


def is_default_tool_error_handler(flag: Any) -> bool:
    """Whether `flag` is LangGraph's default `handle_tool_errors` callable.

    The default answers only `ToolInvocationError` (bad arguments); it is private, so it is
    recognised by name.
    """
    return callable(flag) and getattr(flag, "__name__", "") == "_default_handle_tool_errors"


def handled_error_types(flag: Callable[..., Any]) -> tuple[type[BaseException], ...]:
    """The exception types a `handle_tool_errors` callable answers (from its annotations).

    Falls back to every `Exception` when LangGraph no longer has its private helper.
    """
    from langgraph.prebuilt import tool_node as prebuilt

    infer = getattr(prebuilt, "_infer_handled_types", None)
    if infer is None:
        return (Exception,)
    handled = infer(flag)
    return handled if isinstance(handled, tuple) else (handled,)


def tool_error_content(error: Exception, flag: Any) -> str:
    """The ToolMessage text a `ToolNode` gives for a tool error under `handle_tool_errors=flag`."""
    from langgraph.prebuilt import tool_node as prebuilt

    content_for = getattr(prebuilt, "_handle_tool_error", None)
    if content_for is None:
        return f"Error: {error!r}\n Please fix your mistakes."
    return str(content_for(error, flag=flag))


def run_checkpointer(configurable: Mapping[str, Any]) -> Any:
    """The checkpointer of the running graph (from a node's `configurable`), or None."""
    return configurable.get("__pregel_checkpointer")


def run_durability(configurable: Mapping[str, Any]) -> str:
    """The durability mode of the running graph (`"sync"`, `"async"` or `"exit"`)."""
    durability = configurable.get("__pregel_durability")
    return durability if isinstance(durability, str) else "async"


def delegate_store(store: Any) -> Any:
    """The store a wrapping store delegates to, or None.

    `langgraph dev` hands nodes a batching wrapper that keeps the real store in `_store`;
    the guard needs the real one to make a claim atomic in its database.
    """
    inner = getattr(store, "_store", None)
    return None if inner is store else inner
