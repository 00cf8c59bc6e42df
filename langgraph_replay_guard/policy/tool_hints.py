"""MCP tool annotations as replay classes: the policies a guard learns from its tools."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from langgraph_replay_guard.decisions.call_class import ReplayClass
from langgraph_replay_guard.policy.config import ToolPolicy

__all__ = [
    "MCP_HINTS",
    "hinted",
    "hinted_tools",
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


def hinted(tools: Iterable[tuple[str, Mapping[str, Any] | None]]) -> dict[str, ToolPolicy]:
    """The policies tools' MCP annotations give, by name; tools without annotations are left out.

    What a guard learns (`PolicyResolver.learn`): it reads them for tools its configuration
    names nowhere.

    Args:
        tools: `(name, metadata)` pairs (`tool_hints` of each tool).

    Returns:
        Shared, frozen policies by tool name.
    """
    found: dict[str, ToolPolicy] = {}
    for name, hints in tools:
        policy = policy_from_hints(hints)
        if policy is not None:
            found[name] = policy
    return found


def hinted_tools(tools: Iterable[object]) -> dict[str, ToolPolicy]:
    """`hinted` for tool objects (`BaseTool`s: their `name` and `metadata`).

    Args:
        tools: The tools (anything else a model may be offered is skipped).

    Returns:
        Shared, frozen policies by tool name.
    """
    return hinted(found for found in map(tool_hints, tools) if found is not None)
