"""Middlewares that change a tool call between the model and the tool (issue 34, item 2)."""

from __future__ import annotations

import uuid
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelResponse
from langchain_core.messages import AIMessage


class TraceIdArgs(AgentMiddleware):  # type: ignore[type-arg]
    """A tool middleware that adds a fresh trace id to every call's arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []

    def _traced(self, request: Any) -> Any:
        self.ids.append(uuid.uuid4().hex)
        call = request.tool_call
        return request.override(
            tool_call={**call, "args": {**call["args"], "trace_id": self.ids[-1]}}
        )

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return handler(self._traced(request))

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await handler(self._traced(request))


class UpperCaseIds(AgentMiddleware):  # type: ignore[type-arg]
    """A model middleware that rewrites the tool calls of the model's answer (ids upper-cased)."""

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        response = handler(request)
        messages = []
        for message in response.result:
            if isinstance(message, AIMessage) and message.tool_calls:
                calls = [
                    {**c, "args": {**c["args"], "id": str(c["args"]["id"]).upper()}}
                    for c in message.tool_calls
                ]
                message = message.model_copy(update={"tool_calls": calls})
            messages.append(message)
        return ModelResponse(result=messages, structured_response=response.structured_response)


class TaggedAnswer(AgentMiddleware):  # type: ignore[type-arg]
    """A model middleware that adds `"source": "agent"` to every tool call of the answer."""

    def _tagged(self, response: Any) -> Any:
        messages = []
        for message in response.result:
            if isinstance(message, AIMessage) and message.tool_calls:
                calls = [
                    {**c, "args": {**c["args"], "source": "agent"}} for c in message.tool_calls
                ]
                message = message.model_copy(update={"tool_calls": calls})
            messages.append(message)
        return ModelResponse(result=messages, structured_response=response.structured_response)

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return self._tagged(handler(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return self._tagged(await handler(request))
