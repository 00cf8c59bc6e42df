"""A scripted tool-calling chat model for tests, the demo and notebooks (no network, no key)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field, PrivateAttr

__all__ = ["ScriptedChatModel", "tool_call"]

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
    recorded, so tests can check what the model saw.

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
