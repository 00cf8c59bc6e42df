"""The guard changes only what it must: the system prompt, call identity, the tool (issue 34)."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import BaseModel, Field

from langgraph_replay_guard import ReplayGuardMiddleware
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.decorating import TraceIdArgs, UpperCaseIds

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
    assert sent[0] == prompt
    assert sent[1] == prompt
    for message in sent[2:]:  # the calls that carry the reminder
        assert message.id == "system-1"
        assert message.additional_kwargs == {"provider_flag": {"x": 1}}
        assert message.response_metadata == {"origin": "test"}
        if form == "blocks":
            assert isinstance(message.content, list)
            assert message.content[:2] == CACHED_BLOCKS  # cache_control kept on its block
            assert len(message.content) == 3
            extra = message.content[2]
            assert isinstance(extra, dict)
            assert extra["type"] == "text"
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
    assert message is not None
    assert message is not prompt
    assert message.content == [*CACHED_BLOCKS, {"type": "text", "text": "LOOP WARNING: stop"}]
    assert message.additional_kwargs == {"k": 1}
    assert system_prompt_with_reminder("base", "R") == SystemMessage(content="base\n\nR")
    assert system_prompt_with_reminder(prompt, None) is prompt


# -- item 2: counting follows what the model asked, the ledger what runs ---------------------


def _traced_tools(runs: Counter[str], seen: list[dict[str, Any]]) -> list[Any]:
    @tool
    def lookup(id: str, trace_id: str = "") -> str:
        """Look a customer up."""
        runs["lookup"] += 1
        seen.append({"id": id, "trace_id": trace_id})
        return f"{id}: premium plan"

    @tool
    def send(to: str, trace_id: str = "") -> str:
        """Send an email."""
        runs["send"] += 1
        return f"sent to {to}"

    return [lookup, send]


def _warned(model: ScriptedChatModel) -> list[bool]:
    return [p is not None and "LOOP WARNING" in p for p in model.system_prompts]


def _stop_reason(out: dict[str, Any]) -> Any:
    return out["messages"][-1].response_metadata.get("replay_guard_stop")


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("order", ORDERS)
def test_a_trace_id_added_to_the_arguments_hides_no_loop(order: str, mode: str) -> None:
    runs: Counter[str] = Counter()
    seen: list[dict[str, Any]] = []
    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=20)
    tracer = TraceIdArgs()
    agent = create_agent(
        model,
        _traced_tools(runs, seen),
        middleware=_stack(order, ReplayGuardMiddleware(), tracer),
        checkpointer=InMemorySaver(),
    )
    inputs = {"messages": [HumanMessage("who is P1?")]}
    cfg = {"configurable": {"thread_id": "t"}}
    out = agent.invoke(inputs, cfg) if mode == "sync" else asyncio.run(agent.ainvoke(inputs, cfg))
    # Exactly as without the tracer: one run, the repeats answered, stopped at the 4th call.
    assert runs["lookup"] == 1
    assert model.calls == 4
    assert _warned(model) == [False, False, True, True]
    assert _stop_reason(out) == "repeat_limit"
    # The tool ran with the trace id the middleware added (what runs is what the tool got).
    assert len(seen) == 1
    assert seen[0]["trace_id"] in tracer.ids


@pytest.mark.parametrize("order", ORDERS)
def test_a_trace_id_on_a_side_effect_loop_stops_it_like_the_plain_agent(order: str) -> None:
    from langgraph.store.memory import InMemoryStore

    def run(stack: list[Any]) -> tuple[Counter[str], int, Any]:
        runs: Counter[str] = Counter()
        model = ScriptedChatModel.looping("send", {"to": "ann"}, times=20)
        agent = create_agent(
            model,
            _traced_tools(runs, []),
            middleware=stack,
            checkpointer=InMemorySaver(),
            store=InMemoryStore(),
        )
        out = agent.invoke(
            {"messages": [HumanMessage("mail")]}, {"configurable": {"thread_id": "t"}}
        )
        return runs, model.calls, _stop_reason(out)

    def guard() -> ReplayGuardMiddleware:
        return ReplayGuardMiddleware(tools={"send": "unsafe"})

    plain = run([guard()])
    traced = run(_stack(order, guard(), TraceIdArgs()))
    assert traced == plain
    assert plain[1] == 4
    assert plain[2] is not None


@pytest.mark.parametrize("order", ORDERS)
def test_a_middleware_that_rewrites_the_models_answer_rewrites_what_it_asked(order: str) -> None:
    # The AIMessage in the state is what the model asked: the model writes "p1", a model
    # middleware makes it "P1" in the answer, and "P1" is what is counted, run and stopped.
    runs: Counter[str] = Counter()
    seen: list[dict[str, Any]] = []
    model = ScriptedChatModel.looping("lookup", {"id": "p1"}, times=20)
    agent = create_agent(
        model,
        _traced_tools(runs, seen),
        middleware=_stack(order, ReplayGuardMiddleware(), UpperCaseIds()),
        checkpointer=InMemorySaver(),
    )
    out = agent.invoke({"messages": [HumanMessage("who?")]}, {"configurable": {"thread_id": "t"}})
    assert [s["id"] for s in seen] == ["P1"]
    assert model.calls == 4
    assert _stop_reason(out) == "repeat_limit"


# -- item 3: what a middleware inside the guard sees of the tool -------------------------------


class _LookupArgs(BaseModel):
    id: str


class LookupTool(BaseTool):
    """A tool class with its own `_run`."""

    name: str = "lookup"
    description: str = "Look a customer up."
    args_schema: type[BaseModel] = _LookupArgs
    runs: list[str] = Field(default_factory=list)

    def _run(self, id: str, **kwargs: Any) -> str:
        self.runs.append(id)
        return f"{id}: premium plan"


def _tool_of_kind(kind: str, runs: list[str]) -> BaseTool:
    """One tool named `lookup` of each kind a user gives `create_agent`."""

    def body(id: str) -> str:
        """Look a customer up."""
        runs.append(id)
        return f"{id}: premium plan"

    made: BaseTool
    if kind == "tool_function":
        made = tool("lookup")(body)
    elif kind == "structured_tool":
        made = StructuredTool.from_function(
            body, name="lookup", handle_tool_error=True, handle_validation_error="bad id"
        )
    elif kind == "base_tool_subclass":
        made = LookupTool(runs=runs)  # its own list: `runs` is read back below
    elif kind == "return_direct":
        made = tool("lookup", return_direct=True)(body)
    else:

        def with_artifact(id: str) -> tuple[str, dict[str, str]]:
            """Look a customer up (the record as an artifact)."""
            runs.append(id)
            return f"{id}: premium plan", {"id": id, "plan": "premium"}

        made = tool("lookup", response_format="content_and_artifact")(with_artifact)
    made.metadata = {"owner": "crm", "readOnlyHint": True}
    made.tags = ["crm"]
    return made


TOOL_KINDS = [
    "tool_function",
    "structured_tool",
    "base_tool_subclass",
    "return_direct",
    "content_and_artifact",
]
TOOL_FIELDS = [
    "name",
    "description",
    "metadata",
    "tags",
    "return_direct",
    "response_format",
    "args_schema",
    "handle_tool_error",
    "handle_validation_error",
    "verbose",
    "callbacks",
    "extras",
]


class SeesTools(AgentMiddleware):  # type: ignore[type-arg]
    """A tool middleware that keeps the tool of every request it hands on."""

    def __init__(self) -> None:
        super().__init__()
        self.tools: list[Any] = []

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        self.tools.append(request.tool)
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        self.tools.append(request.tool)
        return await handler(request)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("ledger", ["pure-no-store", "unsafe-with-store"])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", TOOL_KINDS)
def test_a_middleware_on_either_side_sees_the_tool_as_the_user_made_it(
    kind: str, order: str, ledger: str, mode: str
) -> None:
    from langgraph.store.memory import InMemoryStore

    runs: list[str] = []
    user_tool = _tool_of_kind(kind, runs)
    ran = user_tool.runs if isinstance(user_tool, LookupTool) else runs
    unsafe = ledger == "unsafe-with-store"
    guard = ReplayGuardMiddleware(tools={"lookup": "unsafe" if unsafe else "pure"})
    sees = SeesTools()
    model = ScriptedChatModel(script=[[("lookup", {"id": "P1"})], "done"])
    agent = create_agent(
        model,
        [user_tool],
        middleware=_stack(order, guard, sees),
        checkpointer=InMemorySaver(),
        store=InMemoryStore() if unsafe else None,
    )
    inputs = {"messages": [HumanMessage("who?")]}
    cfg = {"configurable": {"thread_id": "t"}}
    out = agent.invoke(inputs, cfg) if mode == "sync" else asyncio.run(agent.ainvoke(inputs, cfg))
    assert ran == ["P1"]
    (seen,) = sees.tools
    if order == "guard-last":
        assert seen is user_tool  # outside the guard: the user's own object
    else:
        # Inside the guard: the documented copy, whose `invoke`/`ainvoke` run the guard's
        # plan where the tool runs. Everything a middleware reads of a tool is the user's.
        assert type(seen) is type(user_tool)
        assert seen == user_tool
        for name in TOOL_FIELDS:
            assert getattr(seen, name) is getattr(user_tool, name), name
        assert seen.tool_call_schema.model_json_schema() == (
            user_tool.tool_call_schema.model_json_schema()
        )
    answer = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert answer.text == "P1: premium plan"
    if kind == "return_direct":
        assert isinstance(out["messages"][-1], ToolMessage)  # the run ended on the answer
        assert model.calls == 1
    if kind == "content_and_artifact":
        assert answer.artifact == {"id": "P1", "plan": "premium"}
