"""Test helpers: a scripted chat model (no network, no key) and the crash test of a graph."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field, PrivateAttr

from langgraph_replay_guard.crashtest import CrashReport, CrashTestError, crashtest

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

    from langgraph_replay_guard.guard import ReplayGuard

__all__ = [
    "CrashReport",
    "CrashTestError",
    "ScriptedChatModel",
    "agent_graph",
    "crashtest",
    "tool_call",
]

Step = (
    str
    | AIMessage
    | Sequence[tuple[str, dict[str, Any]] | dict[str, Any]]
    | Callable[[list[BaseMessage]], Any]
)


def tool_call(name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """A tool call with a fresh unique id, as a model would emit it."""
    return {
        "name": name,
        "args": dict(args or {}),
        "id": f"call_{uuid.uuid4().hex[:12]}",
        "type": "tool_call",
    }


class ScriptedChatModel(BaseChatModel):
    """A chat model that plays a script, one step per model call.

    A step is a reply text, an `AIMessage`, a list of tool calls (`(name, args)` pairs or
    dicts), or a callable that receives the messages and returns one of those. When the
    script runs out the model answers `final`. Every AIMessage and tool call gets a unique
    id (LangGraph's `add_messages` replaces messages with an existing id). `bind_tools`
    returns the model itself, so it works with `create_agent`. Every call's input is
    recorded, so tests can check what the model saw. docs/testing.md documents every member
    with a runnable example.

    Example:
        ```python
        model = ScriptedChatModel.looping("get_details_by_id", {"id": "P1002"}, times=96)
        ```
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: list[Any] = Field(default_factory=list)
    final: str = "Done."
    _seen: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def looping(
        cls, name: str, args: dict[str, Any], *, times: int, final: str = "Done."
    ) -> ScriptedChatModel:
        """A model that makes the same tool call `times` times, then answers `final`."""
        return cls(script=[[(name, args)] for _ in range(times)], final=final)

    @property
    def _llm_type(self) -> str:
        return "scripted-chat-model"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        """Return the model itself: the script decides which tools it calls."""
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with self._lock:
            index = len(self._seen)
            self._seen.append(list(messages))
        step = self.script[index] if index < len(self.script) else self.final
        return ChatResult(generations=[ChatGeneration(message=_to_message(step, messages))])

    @property
    def calls(self) -> int:
        """How many times the model was called."""
        return len(self._seen)

    @property
    def seen(self) -> list[list[BaseMessage]]:
        """The messages of every call, in order."""
        return list(self._seen)

    @property
    def system_prompts(self) -> list[str | None]:
        """The system prompt text of every call (None when there was none)."""
        prompts: list[str | None] = []
        for messages in self._seen:
            system = next((m for m in messages if isinstance(m, SystemMessage)), None)
            prompts.append(system.text if system is not None else None)
        return prompts


def _to_message(step: Any, messages: list[BaseMessage]) -> AIMessage:
    if callable(step) and not isinstance(step, AIMessage):
        return _to_message(step(messages), messages)
    message_id = f"ai-{uuid.uuid4().hex}"
    if isinstance(step, str):
        return AIMessage(content=step, id=message_id)
    if isinstance(step, AIMessage):
        return step.model_copy(update={"id": message_id})
    calls = []
    for item in step:
        if isinstance(item, tuple):
            calls.append(tool_call(item[0], item[1]))
        else:
            calls.append({**tool_call(item["name"], item.get("args")), **item})
    return AIMessage(content="", tool_calls=calls, id=message_id)


def agent_graph(
    model: BaseChatModel,
    tools: Sequence[Any],
    *,
    guard: ReplayGuard | None = None,
    system_prompt: str | None = None,
    **compile_kwargs: Any,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The usual hand-written agent graph (model node, tools node, loop), guarded or not.

    With a guard, the tools node is `guard.tool_node(tools)`, the model node adds the loop
    reminder to the system prompt, and `guard.route_after_tools` ends the run on an abort.
    Without one it is the plain graph, for side-by-side comparisons.

    Args:
        model: The chat model (a `ScriptedChatModel` in tests and the demo).
        tools: The tools.
        guard: The guard, or None for the unguarded graph.
        system_prompt: The base system prompt.
        **compile_kwargs: Passed to `compile` (`checkpointer`, `interrupt_before`...).

    Returns:
        The compiled graph (sync and async).
    """
    from langchain_core.runnables import RunnableLambda
    from langgraph.graph import START, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from langgraph_replay_guard.integrations.graph_state import ReplayGuardState

    def prompt(state: ReplayGuardState) -> list[BaseMessage]:
        if guard is not None:
            return [guard.system_prompt(state, system_prompt), *state["messages"]]
        head = [SystemMessage(content=system_prompt)] if system_prompt else []
        return [*head, *state["messages"]]

    def agent(state: ReplayGuardState) -> dict[str, Any]:
        return {"messages": [model.invoke(prompt(state))]}

    async def aagent(state: ReplayGuardState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(prompt(state))]}

    builder = StateGraph(ReplayGuardState)
    builder.add_node("agent", RunnableLambda(agent, afunc=aagent))
    if guard is not None:
        builder.add_node("tools", guard.tool_node(tools, handle_tool_errors=True))
    else:
        builder.add_node("tools", ToolNode(tools, handle_tool_errors=True))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    if guard is not None:
        builder.add_conditional_edges("tools", guard.route_after_tools("agent"))
    else:
        builder.add_edge("tools", "agent")
    return builder.compile(**compile_kwargs)
