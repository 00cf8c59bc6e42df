"""`ToolCallBlockedError`: how the callback handler refuses a call, shaped for executors."""

from __future__ import annotations

from typing import Any

from langchain_core.exceptions import OutputParserException
from langgraph.prebuilt.tool_node import ToolInvocationError

from langgraph_replay_guard.errors import ReplayGuardError

__all__ = ["ToolCallBlockedError"]


class ToolCallBlockedError(ReplayGuardError, ToolInvocationError, OutputParserException):
    """Raised by the callback handler to refuse a tool call; its text is what the model reads.

    A callback cannot return a result in place of a tool, it can only raise. This error is
    shaped so that executors hand its text to the model instead of failing the run:

    - it is a LangGraph `ToolInvocationError`: `create_agent` and a `ToolNode` with the
      default `handle_tool_errors` answer the call with an error `ToolMessage` whose content
      is `message`;
    - it is an `OutputParserException` with `send_to_llm=True`: a `langchain_classic`
      `AgentExecutor(handle_parsing_errors=True)` turns it into an observation.

    Attributes:
        message: What the model is told.
        tool_name: The refused tool, or `""` for a whole executor step.
        metadata: The guard's decision, `{"replay_guard": {...}}` as in traced tool runs.
    """

    def __init__(self, message: str, *, tool_name: str = "") -> None:
        Exception.__init__(self, message)
        self.message = message
        self.tool_name = tool_name
        self.tool_kwargs: dict[str, Any] = {}
        self.source = None  # type: ignore[assignment]  # no validation error caused it
        self.filtered_errors = None
        self.observation = message
        self.llm_output = message
        self.send_to_llm = True
        self.metadata: dict[str, Any] = {}
