"""MCP tool annotations as replay classes, and the policies one guard learned from them."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from langgraph_replay_guard.decisions.call_class import ReplayClass
from langgraph_replay_guard.policy.config import GuardConfig, ToolPolicy

__all__ = [
    "MCP_HINTS",
    "LearnedPolicies",
    "policy_from_hints",
    "replay_class_from_hints",
    "tool_hints",
]

MCP_HINTS = ("readOnlyHint", "idempotentHint", "destructiveHint", "openWorldHint")
"""The behaviour hints of an MCP tool's `annotations`.

langchain-mcp-adapters puts a tool's annotations into `BaseTool.metadata`, all of them
(unset ones as None) whenever the server gave any: a tool has annotations when its metadata
holds one of these keys.
"""

_POLICIES: dict[ReplayClass, ToolPolicy] = {
    replay: ToolPolicy(replay=replay) for replay in ("pure", "idempotent", "unsafe")
}


def replay_class_from_hints(hints: Mapping[str, Any] | None) -> ReplayClass | None:
    """The replay class a tool's MCP annotations give.

    `readOnlyHint: true` is `"pure"`; else `idempotentHint: true` is `"idempotent"`; else
    `"unsafe"` (the MCP defaults: a tool is not read-only, may be destructive and is not
    idempotent unless it says otherwise). Only a JSON `true` counts as true.

    Args:
        hints: The tool's annotations (or its whole metadata), or None.

    Returns:
        The class, or None when the mapping holds no MCP hint (the tool has no annotations).
    """
    if not hints or not any(key in hints for key in MCP_HINTS):
        return None
    if hints.get("readOnlyHint") is True:
        return "pure"
    if hints.get("idempotentHint") is True:
        return "idempotent"
    return "unsafe"


def policy_from_hints(hints: Mapping[str, Any] | None) -> ToolPolicy | None:
    """The policy a tool's MCP annotations give: its class, every other field at its default.

    Args:
        hints: The tool's annotations (or its whole metadata), or None.

    Returns:
        A shared, frozen `ToolPolicy`, or None when the tool has no annotations.
    """
    replay = replay_class_from_hints(hints)
    return None if replay is None else _POLICIES[replay]


def tool_hints(tool: object) -> tuple[str, Mapping[str, Any]] | None:
    """The name and metadata of a tool object (a LangChain `BaseTool`), read by attribute.

    Args:
        tool: A tool, or anything else a model may be offered (a provider tool's dict).

    Returns:
        `(name, metadata)`, or None when the object has no name or no metadata mapping.
    """
    name = getattr(tool, "name", None)
    metadata = getattr(tool, "metadata", None)
    if isinstance(name, str) and isinstance(metadata, Mapping):
        return name, metadata
    return None


class LearnedPolicies:
    """The policies one guard learned from the MCP annotations of the tools it saw.

    Each guard (and callback handler) has its own: guards that share a `GuardConfig` learn
    apart, and the shared configuration is never changed. `config` is what the guard decides
    with: its configuration until a tool's annotations give it a class, then a copy that
    gives it (`GuardConfig.with_annotations`). Every change makes a new copy, so the engine's
    per-configuration caches never serve a class learned before.

    Args:
        config: The guard's configuration.
    """

    __slots__ = ("_base", "_lock", "_policies", "config")

    def __init__(self, config: GuardConfig) -> None:
        """Start with nothing learned."""
        self._base = config
        self._policies: dict[str, ToolPolicy] = {}
        self._lock = threading.Lock()
        self.config = config
        """The configuration the guard decides with (read it at each use: it is replaced)."""

    def learn(self, tools: Iterable[tuple[str, Mapping[str, Any] | None]]) -> bool:
        """Learn the class each tool's annotations give; tools without annotations are skipped.

        A tool the configuration names (`tools`, a toolkit) keeps that policy: `policy_for`
        reads the learned one only for tools it names nowhere.

        Args:
            tools: `(name, metadata)` pairs (`tool_hints` of each tool).

        Returns:
            True when something new was learned (`config` is then a new object).
        """
        found: dict[str, ToolPolicy] = {}
        for name, hints in tools:
            policy = policy_from_hints(hints)
            if policy is not None and self._policies.get(name) is not policy:
                found[name] = policy
        if not found:
            return False
        with self._lock:
            self._policies = {**self._policies, **found}
            self.config = self._base.with_annotations(self._policies)
        return True

    def learn_tools(self, tools: Iterable[object]) -> bool:
        """`learn` from tool objects (`BaseTool`s: their `name` and `metadata`).

        Args:
            tools: The tools.

        Returns:
            True when something new was learned.
        """
        return self.learn(found for found in map(tool_hints, tools) if found is not None)
