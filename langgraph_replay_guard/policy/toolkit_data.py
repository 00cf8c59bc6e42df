"""Named tool policies for well-known agent stacks: the data files in `toolkits/`, read."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

__all__ = ["known_toolkits", "load_toolkit", "toolkit_policies"]

_DIRECTORY = "toolkits"


@functools.cache
def known_toolkits() -> tuple[str, ...]:
    """The names of the shipped toolkits (one data file each), sorted.

    Returns:
        The names, e.g. `("deepagents", "langchain", ...)`.
    """
    folder = resources.files("langgraph_replay_guard.policy") / _DIRECTORY
    return tuple(
        sorted(
            item.name.removesuffix(".json")
            for item in folder.iterdir()
            if item.name.endswith(".json")
        )
    )


@functools.cache
def load_toolkit(name: str) -> dict[str, Any]:
    """Load a toolkit's data file (`langgraph_replay_guard/policy/toolkits/<name>.json`).

    Args:
        name: A toolkit name, one of `known_toolkits()`.

    Returns:
        The data: `toolkit`, `description`, `source` and `tools` (per tool: the
        `ToolPolicy` fields and a one-line `reason`). Shared: do not modify it.

    Raises:
        ValueError: If no toolkit has that name; the message lists the known ones.
    """
    if name not in known_toolkits():
        msg = (
            f"unknown toolkit {name!r}. Known toolkits: {', '.join(known_toolkits())}; or give "
            "the tool policies yourself in tools={...}."
        )
        raise ValueError(msg)
    path = resources.files("langgraph_replay_guard.policy") / _DIRECTORY / f"{name}.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def toolkit_policies(name: str, prefix: str = "") -> dict[str, dict[str, Any]]:
    """A toolkit's tool policies as `ToolPolicy` fields, by tool name (without the reasons).

    Args:
        name: A toolkit name.
        prefix: Put in front of every tool name (an MCP adapter's `<server>_`).

    Returns:
        A new dict: tool name to the fields of its `ToolPolicy`.

    Raises:
        ValueError: If no toolkit has that name.
    """
    tools: dict[str, dict[str, Any]] = load_toolkit(name)["tools"]
    return {
        f"{prefix}{tool}": {key: value for key, value in entry.items() if key != "reason"}
        for tool, entry in tools.items()
    }
