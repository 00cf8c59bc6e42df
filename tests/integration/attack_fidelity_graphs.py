"""Crash-trial compositions for issue 34 item 2: a middleware changes calls below the guard."""

from __future__ import annotations

import uuid
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.tools import tool
from langgraph.prebuilt import ToolRuntime

from langgraph_replay_guard import ReplayGuard
from langgraph_replay_guard.crashtest import effect
from langgraph_replay_guard.integrations.ledger_gate import IDEMPOTENCY_KEY_CONFIG
from tests.integration.compositions import turns


class FreshTrace(AgentMiddleware):  # type: ignore[type-arg]
    """Adds a fresh trace id (new in every process) to every call; may also lower-case `to`."""

    def __init__(self, *, normalize: bool = False) -> None:
        super().__init__()
        self.normalize = normalize

    def _traced(self, request: Any) -> Any:
        call = request.tool_call
        args = {**call["args"], "trace_id": uuid.uuid4().hex}
        if self.normalize and "to" in args:
            args["to"] = str(args["to"]).lower()
        return request.override(tool_call={**call, "args": args})

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return handler(self._traced(request))

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await handler(self._traced(request))


@tool("send")
def traced_send(to: str, trace_id: str = "") -> str:
    """Send an email (unsafe: a second send is a second email)."""
    effect("send", {"to": to})
    return f"sent to {to}"


@tool("charge")
def traced_charge(amount: int, runtime: ToolRuntime, trace_id: str = "") -> str:
    """Charge the card (idempotent: the payment API deduplicates by the key)."""
    found = (runtime.config.get("configurable") or {}).get(IDEMPOTENCY_KEY_CONFIG)
    effect("charge", {"amount": amount}, None if found is None else str(found))
    return f"charged {amount}"


def _agent(normalize: bool, checkpointer: Any, store: Any, guarded: bool) -> Any:
    model = turns(
        [("charge", {"amount": 30})],
        [("send", {"to": "Ann@Example.com"})],
        [("send", {"to": "bob@example.com"})],
    )
    policy = {"send": "unsafe", "charge": "idempotent"}
    guard = [ReplayGuard(tools=policy, store=store).middleware()] if guarded else []
    return create_agent(
        model,
        [traced_charge, traced_send],
        middleware=[*guard, FreshTrace(normalize=normalize)],
        checkpointer=checkpointer,
        store=store,
    )


def fresh_trace_inside(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """Guard first; a middleware inside it adds a fresh trace id to every call."""
    return _agent(False, checkpointer, store, guarded)


def normalized_fresh_trace_inside(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """Guard first; a middleware inside it lower-cases the address and adds a fresh trace id."""
    return _agent(True, checkpointer, store, guarded)
