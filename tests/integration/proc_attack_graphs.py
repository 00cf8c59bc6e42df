"""Compositions the attack tests crash (`crashtest` imports them in each child process)."""

from __future__ import annotations

import uuid
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.tools import tool

from langgraph_replay_guard.crashtest import effect
from tests.integration.compositions import SEND, _agent, turns


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


def stamp_outside(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """A middleware outside the guard stamps each call with a fresh request id."""
    model = turns([SEND])
    return _agent(model, [stamped_send], checkpointer, store, guarded, before=[StampRequest()])
