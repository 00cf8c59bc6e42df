"""Unsafe calls a callback handler saw raise: their outcome is unknown until a human says."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

from langgraph_replay_guard.engine import CallFacts

__all__ = [
    "MAX_UNKNOWN",
    "RESOLUTIONS",
    "UNKNOWN_FIELD",
    "UNKNOWN_REASON",
    "Resolution",
    "find_mark",
    "marks_of",
    "new_mark",
    "unknown_message",
    "with_mark",
    "without_mark",
]

logger = logging.getLogger("langgraph_replay_guard")

UNKNOWN_FIELD = "unknown"
"""Field of the handler's per-thread state holding the marks (a list, oldest first)."""

UNKNOWN_REASON = "unknown_outcome"
"""Reason of the refusal of a call whose identical earlier call has an unknown outcome."""

MAX_UNKNOWN = 32
"""Most unknown outcomes kept per thread; beyond it the oldest mark is dropped (and logged)."""

_MAX_ERROR_CHARS = 300

Resolution = Literal["succeeded", "failed", "retry"]
RESOLUTIONS: tuple[str, ...] = ("succeeded", "failed", "retry")


def marks_of(state: Any) -> list[dict[str, Any]]:
    """The unknown-outcome marks of a per-thread state (a copy; empty when none)."""
    marks = state.get(UNKNOWN_FIELD) if isinstance(state, Mapping) else None
    if not isinstance(marks, list):
        return []
    return [dict(m) for m in marks if isinstance(m, Mapping) and isinstance(m.get("k"), str)]


def find_mark(marks: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """The mark of the call key, if its outcome is unknown."""
    for mark in marks:
        if mark["k"] == key:
            return mark
    return None


def new_mark(facts: CallFacts, error: BaseException) -> dict[str, Any]:
    """The JSON mark of a call whose tool raised `error` (the error text is bounded)."""
    text = f"{type(error).__name__}: {error}"
    if len(text) > _MAX_ERROR_CHARS:
        text = text[: _MAX_ERROR_CHARS - 3] + "..."
    return {"k": facts.key, "n": facts.tool, "a": facts.args_summary, "e": text}


def with_mark(marks: list[dict[str, Any]], mark: dict[str, Any]) -> list[dict[str, Any]]:
    """The marks with `mark` added as the newest, bounded by `MAX_UNKNOWN`."""
    kept = [*without_mark(marks, mark["k"]), mark]
    for dropped in kept[:-MAX_UNKNOWN]:
        # Bounded state wins over memory: say which call is no longer protected.
        logger.warning(
            "langgraph-replay-guard: more than %d unknown outcomes in one thread; forgetting "
            "the oldest, '%s' (%s): an identical call may run again",
            MAX_UNKNOWN,
            dropped["n"],
            dropped["a"],
        )
    return kept[-MAX_UNKNOWN:]


def without_mark(marks: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The marks without the call key's."""
    return [m for m in marks if m["k"] != key]


def unknown_message(mark: Mapping[str, Any], scope: tuple[str, str]) -> str:
    """What the model (and the log) is told when an identical call is refused.

    Args:
        mark: The mark of the earlier call.
        scope: The handler's scope key: `("thread", id)` or `("run", root run id)`.

    Returns:
        The refusal text.
    """
    where = repr(scope[1]) if scope[0] == "thread" else f"None, run_id={scope[1]!r}"
    return (
        f"Not executed: an earlier identical call of unsafe tool '{mark['n']}' ({mark['a']}) "
        f"raised {mark['e']}, so its outcome is unknown: it may have taken effect. Running it "
        "again could repeat its side effect, so the guard refuses it until someone checks "
        "upstream and settles it with handler.resolve("
        f"{where}, {mark['n']!r}, <args>, 'succeeded' | 'failed' | 'retry'). "
        "Do not call it again now; tell the user its outcome is unknown."
    )
