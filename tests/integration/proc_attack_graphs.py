"""Compositions the attack tests crash (`crashtest` imports them in each child process)."""

from __future__ import annotations

import uuid
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.tools import tool
from langgraph.prebuilt import ToolRuntime

from langgraph_replay_guard.crashtest import effect
from langgraph_replay_guard.integrations.ledger_gate import IDEMPOTENCY_KEY_CONFIG
from tests.integration.compositions import CHARGE, SEND, _agent, send, turns


class StampRequest(AgentMiddleware):  # type: ignore[type-arg]
    """Stamps every call with a fresh request id (what a tracing or audit middleware does)."""

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        call = request.tool_call
        stamped = {**call, "args": {**call["args"], "request_id": uuid.uuid4().hex}}
        return handler(request.override(tool_call=stamped))

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        call = request.tool_call
        stamped = {**call, "args": {**call["args"], "request_id": uuid.uuid4().hex}}
        return await handler(request.override(tool_call=stamped))


@tool("send")
def stamped_send(to: str, request_id: str = "") -> str:
    """Send an email (takes the request id a middleware adds)."""
    effect("send", {"to": to})
    return f"sent to {to}"


@tool("charge")
def stamped_charge(amount: int, runtime: ToolRuntime, request_id: str = "") -> str:
    """Charge the card (idempotent: the payment API deduplicates by the key)."""
    found = (runtime.config.get("configurable") or {}).get(IDEMPOTENCY_KEY_CONFIG)
    effect("charge", {"amount": amount}, None if found is None else str(found))
    return f"charged {amount}"


def stamp_outside(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """A middleware outside the guard stamps each call with a fresh request id."""
    model = turns([CHARGE, SEND])
    tools = [stamped_charge, stamped_send]
    return _agent(model, tools, checkpointer, store, guarded, before=[StampRequest()])


def agent_twice_in_a_node(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """A node that runs one guarded agent twice in one step; each run sends to ann."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    agent = _agent(turns([SEND], final="Mailed."), [send], None, store, guarded)

    def twice(state: MessagesState) -> dict[str, Any]:
        first = agent.invoke({"messages": [("user", "mail ann")]})
        second = agent.invoke({"messages": [("user", "mail ann again")]})
        return {"messages": [("ai", f"{first['messages'][-1].text}/{second['messages'][-1].text}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("twice", twice)
    graph.add_edge(START, "twice")
    graph.add_edge("twice", END)
    return graph.compile(checkpointer=checkpointer, store=store)
