"""Compositions the attack tests crash (`crashtest` imports them in each child process)."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent

from langgraph_replay_guard import ReplayGuard
from tests.integration.compositions import CHARGE, POLICY, SEND, charge, send, turns


def two_namespaces(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """Two named guards, each with its own namespace, stacked on one store."""
    model = turns([CHARGE, SEND])
    guards = (
        [
            ReplayGuard(tools=POLICY, store=store, namespace=("app",)).middleware(name="app"),
            ReplayGuard(tools=POLICY, store=store, namespace=("lib",)).middleware(name="lib"),
        ]
        if guarded
        else []
    )
    return create_agent(
        model, [charge, send], middleware=guards, checkpointer=checkpointer, store=store
    )
