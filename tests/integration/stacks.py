"""Shared pieces of the agent-stack tests (Deep Agents, supervisor, swarm, MCP, shell)."""

from __future__ import annotations

from collections import Counter

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, tool

from langgraph_replay_guard.testing import ScriptedChatModel


def counted_tools(runs: Counter[str]) -> dict[str, BaseTool]:
    """A read (`lookup`), a quote and a side effect (`send_email`); each run is counted."""

    @tool
    def lookup(id: str) -> str:
        """Look up a customer record by id."""
        runs["lookup"] += 1
        return f"record {id}: premium plan"

    @tool
    def quote(item: str) -> str:
        """Price an item."""
        runs["quote"] += 1
        return f"{item} costs 3 EUR"

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email (a side effect)."""
        runs["send_email"] += 1
        return f"sent to {to}"

    return {t.name: t for t in (lookup, quote, send_email)}


def tool_texts(messages: list[BaseMessage], name: str | None = None) -> list[str]:
    """The text of every ToolMessage (of one tool when `name` is given), in order."""
    return [
        m.text for m in messages if isinstance(m, ToolMessage) and (name is None or m.name == name)
    ]


def last_ai(messages: list[BaseMessage]) -> AIMessage:
    """The last AIMessage of a run."""
    return next(m for m in reversed(messages) if isinstance(m, AIMessage))


def stop_of(message: BaseMessage) -> str | None:
    """The guard's stop reason stamped on its final message, or None."""
    return message.response_metadata.get("replay_guard_stop")


def selector_model(*tools: str, times: int = 40) -> ScriptedChatModel:
    """A selection model for `LLMToolSelectorMiddleware` that selects `tools` every time.

    The selector asks for its answer with `with_structured_output(<json schema>)`, which a
    chat model answers with a call to a tool named after the schema's title.
    """
    return ScriptedChatModel(
        script=[[("ToolSelectionResponse", {"tools": list(tools)})] for _ in range(times)]
    )
