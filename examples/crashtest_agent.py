"""A guarded agent with an unsafe, an idempotent and a pure tool, to crash-test.

Run: replay-guard crashtest examples/crashtest_agent.py:build_graph
"""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.prebuilt import ToolRuntime

from langgraph_replay_guard import ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel


@tool
def lookup(id: str) -> str:
    """Read a customer's record."""
    return f"{id}: ann@example.com, premium plan"


@tool
def charge_card(amount: int, runtime: ToolRuntime) -> str:
    """Charge the customer's card (the payment API deduplicates by the idempotency key)."""
    key = runtime.config["configurable"]["replay_guard_idempotency_key"]
    return f"charged {amount} (idempotency key {key})"


@tool
def send_email(to: str, body: str) -> str:
    """Send an email."""
    return f"sent to {to}"


def step(messages: list[BaseMessage]) -> Any:
    """Look the customer up, then charge and email at once, then answer (same in every run)."""
    answered = sum(isinstance(m, ToolMessage) for m in messages)
    if answered == 0:
        return [("lookup", {"id": "C1"})]
    if answered == 1:
        return [
            ("charge_card", {"amount": 30}),
            ("send_email", {"to": "ann@example.com", "body": "Your receipt: 30."}),
        ]
    return "Charged and emailed."


def build_graph(*, checkpointer: Any, store: Any) -> Any:
    """The compiled, guarded agent on the given checkpointer and store."""
    guard = ReplayGuard(
        tools={"lookup": "pure", "charge_card": "idempotent", "send_email": "unsafe"},
        store=store,
    )
    return create_agent(
        ScriptedChatModel(script=[step] * 4),
        [lookup, charge_card, send_email],
        middleware=[guard.middleware()],
        checkpointer=checkpointer,
    )


if __name__ == "__main__":
    from langgraph_replay_guard.testing import crashtest

    print(crashtest("examples/crashtest_agent.py:build_graph", allow_rerun=["lookup"]).render())
