"""The guard changes only what it must: the system prompt, the call identity, the tool (issue 34)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_replay_guard import ReplayGuardMiddleware
from langgraph_replay_guard.testing import ScriptedChatModel

os.environ["LANGSMITH_TRACING"] = "false"

ORDERS = ["guard-first", "guard-last"]


def _lookup(runs: Counter[str]) -> Any:
    @tool
    def lookup(id: str) -> str:
        """Look a customer up."""
        runs["lookup"] += 1
        return f"{id}: premium plan"

    return lookup


class SeesModelRequests(AgentMiddleware):  # type: ignore[type-arg]
    """A model middleware that hands the request on and keeps the system messages it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.system: list[SystemMessage | None] = []

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        self.system.append(request.system_message)
        return handler(request)


def _stack(order: str, guard: Any, other: Any) -> list[Any]:
    return [guard, other] if order == "guard-first" else [other, guard]


# -- item 1: the reminder keeps the system message as it was ----------------------------------

CACHED_BLOCKS: list[Any] = [
    {"type": "text", "text": "You are a support agent."},
    {"type": "text", "text": "Policies: ...", "cache_control": {"type": "ephemeral"}},
]


def _system_messages(model: ScriptedChatModel) -> list[SystemMessage]:
    found = []
    for messages in model.seen:
        system = [m for m in messages if isinstance(m, SystemMessage)]
        assert len(system) == 1
        found.append(system[0])
    return found


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("form", ["blocks", "string"])
def test_the_reminder_keeps_every_field_of_the_system_message(order: str, form: str) -> None:
    runs: Counter[str] = Counter()
    content: Any = [dict(b) for b in CACHED_BLOCKS] if form == "blocks" else "You are support."
    prompt = SystemMessage(
        content=content,
        id="system-1",
        additional_kwargs={"provider_flag": {"x": 1}},
        response_metadata={"origin": "test"},
    )
    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=10)
    seen = SeesModelRequests()
    agent = create_agent(
        model,
        [_lookup(runs)],
        system_prompt=prompt,
        middleware=_stack(order, ReplayGuardMiddleware(), seen),
        checkpointer=InMemorySaver(),
    )
    agent.invoke({"messages": [HumanMessage("help")]}, {"configurable": {"thread_id": "t"}})
    assert model.calls == 4  # the repeated read is stopped at the 4th model call
    sent = _system_messages(model)
    assert sent[0] == prompt and sent[1] == prompt  # no reminder yet: the message itself
    for message in sent[2:]:  # the calls that carry the reminder
        assert message.id == "system-1"
        assert message.additional_kwargs == {"provider_flag": {"x": 1}}
        assert message.response_metadata == {"origin": "test"}
        if form == "blocks":
            assert isinstance(message.content, list)
            assert message.content[:2] == CACHED_BLOCKS  # cache_control kept on its block
            assert len(message.content) == 3
            extra = message.content[2]
            assert isinstance(extra, dict) and extra["type"] == "text"
            assert "LOOP WARNING" in extra["text"]
        else:
            assert isinstance(message.content, str)
            assert message.content.startswith("You are support.\n\n")
            assert "LOOP WARNING" in message.content
    # The caller's prompt object is never changed in place.
    assert prompt.content == (CACHED_BLOCKS if form == "blocks" else "You are support.")
    # The middleware on the other side of the guard sees the same message as the model
    # (guard first) or the one without the reminder (guard last).
    if order == "guard-first":
        assert [m.content if m else None for m in seen.system] == [m.content for m in sent]
    else:
        assert all(m == prompt for m in seen.system)


def test_a_hand_written_graph_keeps_the_blocks_of_its_prompt() -> None:
    from langgraph_replay_guard.integrations.prompt import system_prompt_with_reminder

    prompt = SystemMessage(content=[dict(b) for b in CACHED_BLOCKS], additional_kwargs={"k": 1})
    message = system_prompt_with_reminder(prompt, "LOOP WARNING: stop")
    assert message is not None and message is not prompt
    assert message.content == [*CACHED_BLOCKS, {"type": "text", "text": "LOOP WARNING: stop"}]
    assert message.additional_kwargs == {"k": 1}
    assert system_prompt_with_reminder("base", "R") == SystemMessage(content="base\n\nR")
    assert system_prompt_with_reminder(prompt, None) is prompt
