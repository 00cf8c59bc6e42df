"""Graphs for the concurrent-resume tests: a slow unsafe tool, stopped before the tools node."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from langchain_core.tools import tool

from langgraph_replay_guard import GuardConfig, ReplayGuard

from .replay_graphs import asking_model, replay_graph

CALL = ("send_email", {"to": "ann@example.com"})
POLICY = GuardConfig(tools={"send_email": "unsafe"})


def effect_tools(effects: Path, *, seconds: float = 2.0, release: Path | None = None) -> list[Any]:
    """`send_email` appends one line per real send to `effects` (shared by processes).

    Its body takes `seconds`, or less once the file `release` exists (a test that checked
    what it checks while the body runs lets it finish).
    """

    @tool
    def send_email(to: str) -> str:
        """Send an email (unsafe)."""
        if release is None:
            time.sleep(seconds)  # long enough for the other workers to arrive while it runs
        else:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not release.exists():
                time.sleep(0.01)
        with effects.open("a") as file:
            file.write(f"{os.getpid()} {to}\n")
        return f"Email sent to {to}"

    return [send_email]


def sends(effects: Path) -> int:
    """How many emails really went out."""
    return len(effects.read_text().splitlines()) if effects.exists() else 0


def claim_graph(
    mode: str,
    guard: ReplayGuard,
    tools: list[Any],
    checkpointer: Any,
    store: Any = None,
    *,
    turns: int = 20,
) -> Any:
    """The guarded graph, stopped before its tools node: `guard.wrap` or the middleware.

    Its model asks for CALL once per turn, for `turns` model calls in all.
    """
    model = asking_model([CALL], turns=turns)
    if mode == "wrap":
        return replay_graph(
            guard, model, tools, checkpointer=checkpointer, interrupt_before=["tools"]
        )
    from langchain.agents import create_agent

    return create_agent(
        model,
        tools,
        middleware=[guard.middleware()],
        checkpointer=checkpointer,
        store=store,
        interrupt_before=["tools"],
    )
