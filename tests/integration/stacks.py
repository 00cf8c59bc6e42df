"""Shared pieces of the agent-stack tests (Deep Agents, supervisor, swarm, MCP, shell)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from langchain_core.decisions import BaseDecisionModel, ClassifierResponse, NoulAnswer
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from pydantic import Field

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


class ScriptedClassifier(BaseDecisionModel):
    """A decision model for `AutoModeMiddleware`: a call to a tool in `risky` is risky (0.9),
    any other call is not (0.1). Every call it classified is kept in `seen`."""

    model: str = "scripted-classifier"
    risky: frozenset[str] = frozenset()
    seen: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _provider(self) -> str:
        return "scripted"

    def _classify(self, state: Any, questions: Any) -> ClassifierResponse:
        call = state["tool_call"]
        self.seen.append(call)
        noul = 0.9 if call["name"] in self.risky else 0.1
        answers = {key: NoulAnswer(type="noul", noul=noul) for key in questions}
        return ClassifierResponse(model=self.model, answers=answers)


def selector_model(*tools: str, times: int = 40) -> ScriptedChatModel:
    """A selection model for `LLMToolSelectorMiddleware` that selects `tools` every time.

    The selector asks for its answer with `with_structured_output(<json schema>)`, which a
    chat model answers with a call to a tool named after the schema's title.
    """
    return ScriptedChatModel(
        script=[[("ToolSelectionResponse", {"tools": list(tools)})] for _ in range(times)]
    )
