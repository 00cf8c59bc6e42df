"""Load the user's `FILE_OR_MODULE:FUNCTION` and build its graph, with clear errors."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph_replay_guard.errors import ReplayGuardError

__all__ = ["CrashTestError", "build_graph", "load_function", "split_target"]


class CrashTestError(ReplayGuardError):
    """The crash test cannot run: a bad target, a graph it cannot test, a child that failed."""


def split_target(target: str) -> tuple[str, str]:
    """Split `FILE_OR_MODULE:FUNCTION` into its two parts.

    Raises:
        CrashTestError: The target is not of that form.
    """
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name.isidentifier():
        msg = f"{target!r} is not FILE_OR_MODULE:FUNCTION (e.g. my_agent.py:build_graph)"
        raise CrashTestError(msg)
    return where, name


def load_function(target: str) -> Callable[..., Any]:
    """The function named by `FILE_OR_MODULE:FUNCTION`.

    Args:
        target: `path/to/file.py:build` or `package.module:build`.

    Returns:
        The function.

    Raises:
        CrashTestError: The target is malformed, or its module or function is missing.
    """
    where, name = split_target(target)
    module = _load_module(where)
    function: Callable[..., Any] | None = getattr(module, name, None)
    if not callable(function):
        msg = f"{where!r} has no function {name!r}"
        raise CrashTestError(msg)
    return function


def _load_module(where: str) -> Any:
    path = Path(where)
    if where.endswith(".py") or path.is_file():
        if not path.is_file():
            msg = f"no file {where!r}"
            raise CrashTestError(msg)
        sys.path.insert(0, str(path.resolve().parent))  # its sibling modules import
        name = f"replay_guard_crashtest_{uuid.uuid4().hex}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            msg = f"cannot load {where!r} as a Python file"
            raise CrashTestError(msg)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        msg = f"no module {where!r} ({exc})"
        raise CrashTestError(msg) from exc


def build_graph(target: str, *, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """Call the target function and check that it returned a compiled graph.

    Args:
        target: `FILE_OR_MODULE:FUNCTION`.
        checkpointer: The checkpointer to give it.
        store: The store to give it.
        guarded: False to ask for the same graph without the guard (`guarded=False`: only
            passed then, so a target that never compares with its unguarded run need not
            take it).

    Returns:
        The compiled graph.

    Raises:
        CrashTestError: The function failed or returned something else.
    """
    from langgraph.pregel import Pregel

    function = load_function(target)
    extra: dict[str, Any] = {} if guarded else {"guarded": False}
    try:
        graph = function(checkpointer=checkpointer, store=store, **extra)
    except TypeError as exc:
        wanted = "checkpointer=, store= and guarded=" if extra else "checkpointer= and store="
        msg = f"{target} must take {wanted} keyword arguments: {exc}"
        raise CrashTestError(msg) from exc
    if not isinstance(graph, Pregel):
        msg = (
            f"{target} returned {type(graph).__name__}, not a compiled graph: return "
            "builder.compile(checkpointer=checkpointer, store=store) or create_agent(...)"
        )
        raise CrashTestError(msg)
    return graph
