"""Issue 34 items 1-3 attacked: what the fidelity fix promised, on inputs its tests did not try."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import Counter
from collections.abc import Callable
from functools import cache
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import InjectedState, ToolNode, ToolRuntime
from langgraph.store.memory import InMemoryStore
from langgraph.types import Send
from pydantic import ConfigDict, PrivateAttr

from langgraph_replay_guard import ReplayGuard, ReplayGuardMiddleware, ReplayGuardState
from langgraph_replay_guard.crashtest import POINTS, CrashReport, CrashTestError, crashtest
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.attack_fidelity_graphs import (
    fresh_trace_inside,
    normalized_fresh_trace_inside,
)

os.environ["LANGSMITH_TRACING"] = "false"

ORDERS = ["guard-first", "guard-last"]
MODES = ["sync", "async"]
CFG = {"configurable": {"thread_id": "t"}}


def _stack(order: str, guard: Any, other: Any) -> list[Any]:
    return [guard, other] if order == "guard-first" else [other, guard]


def _invoke(agent: Any, mode: str) -> Any:
    inputs = {"messages": [HumanMessage("help")]}
    return agent.invoke(inputs, CFG) if mode == "sync" else asyncio.run(agent.ainvoke(inputs, CFG))


def _stop_reason(out: dict[str, Any]) -> Any:
    return out["messages"][-1].response_metadata.get("replay_guard_stop")


# -- item 2: a tool middleware that changes the call between the guard and the tool -----------


class Decorate(AgentMiddleware):  # type: ignore[type-arg]
    """A tool middleware that rewrites every call's arguments with `change(args, n)`."""

    def __init__(self, change: Callable[[dict[str, Any], int], dict[str, Any]]) -> None:
        super().__init__()
        self.change = change
        self.n = 0

    def _changed(self, request: Any) -> Any:
        self.n += 1
        call = request.tool_call
        return request.override(tool_call={**call, "args": self.change(dict(call["args"]), self.n)})

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return handler(self._changed(request))

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await handler(self._changed(request))


def _fresh() -> str:
    return uuid.uuid4().hex


DECORATIONS: dict[str, tuple[Callable[[dict[str, Any], int], dict[str, Any]], dict[str, Any]]] = {
    # A trace id added inside an argument the model gave as a dict (request options).
    "trace_in_a_dict_argument": (
        lambda a, n: {**a, "options": {**a["options"], "trace": _fresh()}},
        {"id": "P1", "options": {"region": "eu"}},
    ),
    # Empty arguments dropped (a common clean-up) and a trace id added.
    "drop_empty_and_trace": (
        lambda a, n: {k: v for k, v in a.items() if v is not None} | {"trace_id": _fresh()},
        {"id": "P1", "n": None},
    ),
    # A value's type coerced (int -> str) and a trace id added.
    "coerce_and_trace": (
        lambda a, n: {**a, "n": str(a["n"]), "trace_id": _fresh()},
        {"id": "P1", "n": 1},
    ),
}

HELD_DECORATIONS: dict[
    str, tuple[Callable[[dict[str, Any], int], dict[str, Any]], dict[str, Any]]
] = {
    "trace_on_every_other_call": (
        lambda a, n: {**a, "trace_id": _fresh()} if n % 2 else a,
        {"id": "P1"},
    ),
    "reordered_and_traced": (
        lambda a, n: dict(reversed(list({**a, "trace_id": _fresh()}.items()))),
        {"id": "P1", "n": 2},
    ),
    "coerced_only": (lambda a, n: {**a, "n": str(a["n"])}, {"id": "P1", "n": 1}),
}


def _loose_lookup(runs: Counter[str]) -> BaseTool:
    @tool
    def lookup(
        id: str, n: Any = None, options: dict[str, Any] | None = None, trace_id: str = ""
    ) -> str:
        """Look a customer up."""
        runs["lookup"] += 1
        return f"{id}: premium plan"

    return lookup


def _loop_under(decoration: str, table: dict[str, Any], order: str, mode: str) -> tuple[Any, ...]:
    change, args = table[decoration]
    runs: Counter[str] = Counter()
    model = ScriptedChatModel.looping("lookup", args, times=20)
    agent = create_agent(
        model,
        [_loose_lookup(runs)],
        middleware=_stack(order, ReplayGuardMiddleware(), Decorate(change)),
        checkpointer=InMemorySaver(),
    )
    out = _invoke(agent, mode)
    return model.calls, _stop_reason(out), runs["lookup"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("decoration", list(DECORATIONS))
def test_a_decoration_beside_a_change_hides_no_loop(decoration: str, order: str, mode: str) -> None:
    # Twenty identical model calls; the middleware's added keys differ at every call. Counted
    # without what it added, the loop is stopped at the 4th model call as without it.
    calls, reason, _runs = _loop_under(decoration, DECORATIONS, order, mode)
    assert (calls, reason) == (4, "repeat_limit")


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("decoration", list(HELD_DECORATIONS))
def test_decorations_that_held(decoration: str, order: str) -> None:
    calls, reason, _runs = _loop_under(decoration, HELD_DECORATIONS, order, "sync")
    assert (calls, reason) == (4, "repeat_limit")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
def test_a_deterministic_coercion_keeps_dedup(order: str, mode: str) -> None:
    # A middleware changes an argument the model gave (int -> str): a new call, counted as
    # it runs. Its duplicates are answered with its result, found by the tool_call_id the
    # channel remembers for it (no message holds the call as it ran).
    calls, reason, runs = _loop_under("coerced_only", HELD_DECORATIONS, order, mode)
    assert (calls, reason, runs) == (4, "repeat_limit", 1)


@pytest.mark.xfail(
    strict=True,
    reason=(
        "Kept as documented (how-it-decides, 'Which call each layer looks at'): a middleware "
        "that overwrites an argument the model gave makes a new call, decided and counted as "
        "it runs, as a reviewer's edit does, so a fresh value there makes every call new. "
        "Counting it as the model asked (its AIMessage call, found by tool_call_id) needs "
        "the changed call recorded under the model's key (counters, cycles, stops) while "
        "dedup still compares the call as it runs: the result memo would name the key the "
        "earlier call ran under beside its tool_call_id, and a duplicate of the model's key "
        "would be answered only when this call runs as that one did (else it runs: a "
        "reviewer's new read). That moves every changed call (HITL edits, redactions, "
        "coercions) onto the model's counters, a behaviour change for the HITL and PII "
        "compositions, made in ToolCallWrapper._as_it_runs, the per-step path another "
        "change is cutting; not made here."
    ),
)
def test_a_trace_id_written_over_the_models_own_is_still_a_loop() -> None:
    table = {"collide": (lambda a, n: {**a, "trace_id": _fresh()}, {"id": "P1", "trace_id": "m"})}
    calls, reason, _runs = _loop_under("collide", table, "guard-first", "sync")
    assert (calls, reason) == (4, "repeat_limit")


def _injected_tool(kind: str, runs: Counter[str]) -> BaseTool:
    if kind == "tool_call_id":

        @tool
        def lookup(
            id: str, tool_call_id: Annotated[str, InjectedToolCallId], trace_id: str = ""
        ) -> str:
            """Look a customer up."""
            runs[tool_call_id] += 1
            return "ok"

    elif kind == "state":

        @tool
        def lookup(
            id: str, state: Annotated[dict[str, Any], InjectedState], trace_id: str = ""
        ) -> str:
            """Look a customer up."""
            runs[str(len(state["messages"]))] += 1
            return "ok"

    else:

        @tool
        def lookup(id: str, runtime: ToolRuntime, trace_id: str = "") -> str:
            """Look a customer up."""
            runs[str(runtime.tool_call_id)] += 1
            return "ok"

    return lookup


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", ["tool_call_id", "state", "runtime"])
def test_a_trace_id_beside_injected_arguments_hides_no_loop(kind: str, order: str) -> None:
    runs: Counter[str] = Counter()
    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=20)
    change, _ = DECORATIONS["drop_empty_and_trace"]
    agent = create_agent(
        model,
        [_injected_tool(kind, runs)],
        middleware=_stack(order, ReplayGuardMiddleware(), Decorate(change)),
        checkpointer=InMemorySaver(),
    )
    out = _invoke(agent, "sync")
    assert (model.calls, _stop_reason(out)) == (4, "repeat_limit")
    assert sum(runs.values()) == 1


# -- item 2: the ledger follows what runs, across a real SIGKILL ----------------------------------


@cache
def _crash_report(name: str, mode: str) -> CrashReport | CrashTestError:
    build = {"fresh_trace_inside": fresh_trace_inside}.get(name, normalized_fresh_trace_inside)
    try:
        return crashtest(
            build,
            compare_unguarded=mode == "sync",
            asynchronous=mode == "async",
            jobs=2,
            timeout=60,
        )
    except CrashTestError as exc:
        return exc


# One (stack, mode)'s cells on one xdist worker: its crash test (`_crash_report`, cached per
# worker) runs once per run; spread over both workers, each ran it again (8 crash tests, not 4).
CRASH_CELLS = [
    pytest.param(name, mode, point, marks=pytest.mark.xdist_group(f"fidelity-{name}-{mode}"))
    for name in ["fresh_trace_inside", "normalized_fresh_trace_inside"]
    for mode in MODES
    for point in POINTS
]


@pytest.mark.parametrize(("name", "mode", "point"), CRASH_CELLS)
def test_a_fresh_trace_id_below_the_guard_never_sends_twice(
    name: str, mode: str, point: str
) -> None:
    # Guard first, a middleware inside it adds a fresh trace id (new in every process) to the
    # unsafe `send`. Killed with SIGKILL at each crash point and resumed in a new process:
    # the body runs at most once per call, and an unknown outcome is refused, never rerun.
    report = _crash_report(name, mode)
    if isinstance(report, CrashTestError):
        raise report
    trials = [t for t in report.trials if t.point == point]
    assert trials
    problems = [f"{t.call.label}: {t.problem}" for t in trials if t.problem is not None]
    assert not problems, "\n".join(problems) + "\n\n" + report.render()


# -- item 3: the tool copy a middleware inside the guard gets -----------------------------------


class ReadsTheSchema(AgentMiddleware):  # type: ignore[type-arg]
    """A tool middleware that validates against the tool's schema, then compares tools by `==`."""

    def __init__(self, registered: BaseTool) -> None:
        super().__init__()
        self.registered = registered
        self.equal: list[bool] = []

    def _check(self, request: Any) -> None:
        request.tool.tool_call_schema.model_validate(request.tool_call["args"])
        self.registered.tool_call_schema  # noqa: B018  (the middleware's own view of it)
        self.equal.append(request.tool == self.registered)

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        self._check(request)
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        self._check(request)
        return await handler(request)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ledger", ["pure-no-store", "unsafe-with-store"])
def test_the_copy_stays_equal_after_a_middleware_reads_its_schema(ledger: str, mode: str) -> None:
    # Documented: compare tools by `name` or `==`. A schema built on the copy alone was the
    # copy's own (a pydantic private attribute), and `==` went False (pure calls).
    runs: Counter[str] = Counter()
    user_tool = _loose_lookup(runs)
    unsafe = ledger == "unsafe-with-store"
    reads = ReadsTheSchema(user_tool)
    model = ScriptedChatModel(script=[[("lookup", {"id": "P1"})], [("lookup", {"id": "P2"})]])
    agent = create_agent(
        model,
        [user_tool],
        middleware=[ReplayGuardMiddleware(tools={"lookup": "unsafe" if unsafe else "pure"}), reads],
        checkpointer=InMemorySaver(),
        store=InMemoryStore() if unsafe else None,
    )
    _invoke(agent, mode)
    assert runs["lookup"] == 2
    assert reads.equal == [True, True]


class FrozenLookup(BaseTool):
    """A pydantic-frozen tool class."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    name: str = "lookup"
    description: str = "Look a customer up."

    def _run(self, id: str, **kwargs: Any) -> str:
        return "ok"


class ClientLookup(BaseTool):
    """A tool class with a field of its own, a private attribute and assignment validation."""

    model_config = ConfigDict(validate_assignment=True)
    name: str = "lookup"
    description: str = "Look a customer up."
    client: dict[str, Any] = {}  # noqa: RUF012
    count: int = 0
    _private: int = PrivateAttr(default=0)

    def _run(self, id: str, **kwargs: Any) -> str:
        # State the tool keeps on itself: it must land on the user's object.
        self.count += 1
        self._private += 1
        return "ok"


def _held_tool(kind: str) -> BaseTool:
    if kind == "json_schema_dict":

        def body(id: str) -> str:
            return "ok"

        schema = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
        return StructuredTool.from_function(
            body, name="lookup", description="Look a customer up.", args_schema=schema
        )
    if kind == "injected":
        return _injected_tool("runtime", Counter())
    if kind == "frozen":
        return FrozenLookup()
    return ClientLookup(client={"url": "http://127.0.0.1:1"})


HELD_FIELDS = ["name", "description", "metadata", "tags", "return_direct", "response_format"]


@pytest.mark.parametrize("ledger", ["pure-no-store", "unsafe-with-store"])
@pytest.mark.parametrize("kind", ["json_schema_dict", "injected", "frozen", "client_fields"])
def test_tool_kinds_that_held(kind: str, ledger: str) -> None:
    seen: list[Any] = []
    equal: list[bool] = []
    user_tool = _held_tool(kind)

    class Sees(AgentMiddleware):  # type: ignore[type-arg]
        def wrap_tool_call(self, request: Any, handler: Any) -> Any:
            seen.append(request.tool)
            equal.append(request.tool == user_tool)  # when it sees it (the tool counts runs)
            return handler(request)

    unsafe = ledger == "unsafe-with-store"
    model = ScriptedChatModel(script=[[("lookup", {"id": "P1"})], [("lookup", {"id": "P2"})]])
    agent = create_agent(
        model,
        [user_tool],
        middleware=[
            ReplayGuardMiddleware(tools={"lookup": "unsafe" if unsafe else "pure"}),
            Sees(),
        ],
        checkpointer=InMemorySaver(),
        store=InMemoryStore() if unsafe else None,
    )
    out = _invoke(agent, "sync")
    answers = [m.text for m in out["messages"] if isinstance(m, ToolMessage)]
    assert answers == ["ok", "ok"]
    assert equal == [True, True]
    for copy in seen:
        assert type(copy) is type(user_tool)
        for name in [*HELD_FIELDS, "args_schema"]:
            assert getattr(copy, name) is getattr(user_tool, name), name
        assert copy.args == user_tool.args
    if isinstance(user_tool, ClientLookup):
        assert (user_tool.count, user_tool._private) == (2, 2)


# -- item 1: the system message arrives as it was, plus one block -------------------------------

SHAPES: dict[str, Any] = {
    "empty_block_list": [],
    "strings_in_a_list": ["You are support.", "Be brief."],
    "string_then_cached_block": [
        "You are support.",
        {"type": "text", "text": "Policies", "cache_control": {"type": "ephemeral"}},
    ],
    "text_and_image": [
        {"type": "text", "text": "You are support."},
        {"type": "image", "url": "https://example.invalid/logo.png"},
    ],
    "block_without_type": [{"text": "You are support."}],
    "empty_string": "",
}


def _tagged(blocks: list[Any]) -> list[Any]:
    """The blocks with the last one marked for caching (a string block is left as it is)."""
    if not blocks or not isinstance(blocks[-1], dict):
        return blocks
    return [*blocks[:-1], {**blocks[-1], "cache_control": {"type": "ephemeral", "ttl": "5m"}}]


class TagsLastBlock(AgentMiddleware):  # type: ignore[type-arg]
    """Marks the system message's last block for caching, as Anthropic's caching middleware does."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    def _tag(self, request: Any) -> Any:
        self.seen.append(request.system_message)
        message = request.system_message
        if message is None or not isinstance(message.content, list):
            return request
        tagged = message.model_copy(update={"content": _tagged(message.content)})
        return request.override(system_message=tagged)

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(self._tag(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(self._tag(request))


def _reminded(sent: SystemMessage) -> bool:
    return "LOOP WARNING" in sent.text


@pytest.mark.parametrize("mode", ["invoke", "astream-messages"])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_system_message_shape_gets_one_more_block(shape: str, order: str, mode: str) -> None:
    content = SHAPES[shape]
    prompt = SystemMessage(
        content=list(content) if isinstance(content, list) else content,
        id="system-1",
        name="support",
        additional_kwargs={"k": 1},
    )
    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=10)
    tags = TagsLastBlock()
    agent = create_agent(
        model,
        [_loose_lookup(Counter())],
        system_prompt=prompt,
        middleware=_stack(order, ReplayGuardMiddleware(), tags),
        checkpointer=InMemorySaver(),
    )
    if mode == "invoke":
        agent.invoke({"messages": [HumanMessage("help")]}, CFG)
    else:

        async def stream() -> None:
            async for _chunk in agent.astream(
                {"messages": [HumanMessage("help")]}, CFG, stream_mode="messages"
            ):
                pass

        asyncio.run(stream())
    assert model.calls == 4
    # What the guard handed on: the inner middleware's view (guard first) or the model's.
    handed = (
        tags.seen
        if order == "guard-first"
        else [next(m for m in seen if isinstance(m, SystemMessage)) for seen in model.seen]
    )
    assert [_reminded(m) for m in handed] == [False, False, True, True]
    for message in handed[2:]:
        assert (message.id, message.name, message.additional_kwargs) == (
            "system-1",
            "support",
            {"k": 1},
        )
        if isinstance(content, list):
            *before, extra = message.content
            # Guard last: the caching middleware outside it tagged the prompt's last block.
            assert before == (content if order == "guard-first" else _tagged(content))
            assert isinstance(extra, dict)
            assert extra["type"] == "text"
            assert "LOOP WARNING" in extra["text"]
        else:
            assert isinstance(message.content, str)
            assert message.content.startswith(content)
    assert prompt.content == content  # the user's prompt is never changed in place


@pytest.mark.parametrize("form", ["blocks", "string"])
def test_a_hand_written_graph_with_a_tool_wrapper_keeps_its_prompt(form: str) -> None:
    runs: Counter[str] = Counter()
    guard = ReplayGuard()
    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=20)
    cached = {"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}
    base: Any = SystemMessage(content=[dict(cached)], id="s") if form == "blocks" else "sys"

    def traced(request: Any, execute: Any) -> Any:
        call = request.tool_call
        args = {**call["args"], "trace_id": _fresh()}
        return execute(request.override(tool_call={**call, "args": args}))

    def agent(state: ReplayGuardState) -> dict[str, Any]:
        return {"messages": [model.invoke([guard.system_prompt(state, base), *state["messages"]])]}

    def fan_out(state: ReplayGuardState) -> Any:
        last = state["messages"][-1]
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return END
        return [Send("tools", [call]) for call in last.tool_calls]

    builder = StateGraph(ReplayGuardState)
    builder.add_node("agent", agent)
    builder.add_node("tools", guard.wrap(ToolNode([_loose_lookup(runs)], wrap_tool_call=traced)))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", fan_out, ["tools", END])
    builder.add_conditional_edges("tools", guard.route_after_tools("agent"))
    graph = builder.compile(checkpointer=InMemorySaver())
    out = graph.invoke({"messages": [HumanMessage("help")]}, CFG)
    assert (model.calls, runs["lookup"], _stop_reason(out)) == (4, 1, "repeat_limit")
    sent = [seen[0] for seen in model.seen]
    if form == "blocks":
        assert all(m.content[0] == cached for m in sent)
        assert [len(m.content) for m in sent] == [1, 1, 2, 2]
    else:
        assert [m.content.startswith("sys") for m in sent] == [True] * 4
