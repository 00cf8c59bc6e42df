"""Each LangChain middleware that touches tools or history, with the guard first and last.

Two promises per middleware, both orders, sync (`invoke`) and async (`ainvoke`, `astream`): a
healthy run is exactly the unguarded run (the messages a user sees), and a model repeating one
read is stopped with the read run once. The same two promises hold with a provider-native
structured answer (`ProviderStrategy`), `structured_response` included.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import (
    AutoModeMiddleware,
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    HumanInTheLoopMiddleware,
    LLMToolEmulator,
    LLMToolSelectorMiddleware,
    ModelCallLimitMiddleware,
    ModelFallbackMiddleware,
    ModelRetryMiddleware,
    PIIMiddleware,
    SummarizationMiddleware,
    TodoListMiddleware,
    ToolCallLimitMiddleware,
    ToolErrorMiddleware,
    ToolRetryMiddleware,
)
from langchain.agents.structured_output import ProviderStrategy
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import BaseModel

from langgraph_replay_guard import GUARD_CHANNEL, ReplayGuardMiddleware
from langgraph_replay_guard.testing import ScriptedChatModel
from tests import async_run
from tests.integration.decision_models import ScriptedClassifier
from tests.integration.decorating import TaggedAnswer, TraceIdArgs
from tests.integration.stacks import selector_model

os.environ["LANGSMITH_TRACING"] = "false"


MIDDLEWARES: dict[str, Callable[[], Any]] = {
    "context_editing": lambda: ContextEditingMiddleware(
        edits=[ClearToolUsesEdit(trigger=10_000, keep=2)]
    ),
    "summarization": lambda: SummarizationMiddleware(
        ScriptedChatModel(script=["summary"] * 10), trigger=("messages", 200)
    ),
    "tool_retry": lambda: ToolRetryMiddleware(max_retries=2, initial_delay=0, jitter=False),
    "tool_error": lambda: ToolErrorMiddleware(lambda error: f"failed: {type(error).__name__}"),
    "model_retry": lambda: ModelRetryMiddleware(max_retries=2, initial_delay=0, jitter=False),
    "model_fallback": lambda: ModelFallbackMiddleware(ScriptedChatModel(script=["fallback"])),
    "tool_call_limit_end": lambda: ToolCallLimitMiddleware(run_limit=50, exit_behavior="end"),
    "tool_call_limit_continue": lambda: ToolCallLimitMiddleware(
        run_limit=50, exit_behavior="continue"
    ),
    "model_call_limit": lambda: ModelCallLimitMiddleware(run_limit=50),
    "pii": lambda: PIIMiddleware("email", strategy="redact", apply_to_tool_results=True),
    "todo_list": lambda: TodoListMiddleware(),
    "hitl_per_call_unreached": lambda: HumanInTheLoopMiddleware(
        interrupt_on={"never_called": True}, interrupt_mode="per_call"
    ),
    # `quote` is emulated by a model: the tool body never runs, another piece answers it.
    "tool_emulator": lambda: LLMToolEmulator(
        tools=["quote"], model=ScriptedChatModel(script=["emulated: 3 EUR"] * 20)
    ),
    # A selection model narrows the tools offered to the main model at every model call.
    "tool_selector": lambda: LLMToolSelectorMiddleware(model=selector_model("lookup", "quote")),
    # Every call to `lookup` and `quote` is classified first; none is risky here.
    "auto_mode": lambda: AutoModeMiddleware(
        tools=["lookup", "quote"], classifier=ScriptedClassifier()
    ),
    # A fresh trace id added to every tool call's arguments (counted as the model asked).
    "trace_id_args": TraceIdArgs,
    # The model's answer rewritten: a tag added to every tool call's arguments in it.
    "tagged_answer": TaggedAnswer,
}

ORDERS = ["guard-first", "guard-last"]
MODES = ["sync", "async", "astream"]
# One middleware's cases on one xdist worker: its compositions are compiled (`_agent_for`) and
# its unguarded references run (`_plain`...) once per run, not once on each worker that drew
# one of its cases (4 s of the file's 25 s of CPU with two workers).
NAMES = [
    pytest.param(name, marks=pytest.mark.xdist_group(f"composition-matrix-{name}"))
    for name in MIDDLEWARES
]


# The run whose tool calls the tools below count (a worker runs one test at a time).
_RUNS: list[Counter[str]] = [Counter()]


@tool
def lookup(id: str) -> str:
    """Look a customer up."""
    _RUNS[0]["lookup"] += 1
    return f"{id}: premium plan, contact ann@example.com"


@tool
def quote(item: str) -> str:
    """Price an item."""
    _RUNS[0]["quote"] += 1
    return f"{item} costs 3 EUR"


@tool
def never_called(x: str) -> str:
    """A tool the scripts never call."""
    return x


# Built once per worker (a tool's schema costs more to build than a run of the agent): each
# run counts its own tool bodies' runs in a fresh Counter (`_RUNS`).
TOOLS = [lookup, quote, never_called]


def _invoke(agent: Any, inputs: dict[str, Any], cfg: dict[str, Any], mode: str) -> Any:
    """Run the agent with `invoke`, `ainvoke`, or `astream` (the last streamed state)."""
    if mode == "sync":
        return agent.invoke(inputs, cfg)
    if mode == "async":
        return async_run.run(agent.ainvoke(inputs, cfg))

    async def stream() -> Any:
        last = None
        async for state in agent.astream(inputs, cfg, stream_mode="values"):
            last = state
        return last

    return async_run.run(stream())


@dataclass
class _Agent:
    """A compiled agent kept for the runs of one composition, and what each run resets."""

    agent: Any
    model: ScriptedChatModel
    middleware: Any
    guard: ReplayGuardMiddleware
    scripted: list[tuple[ScriptedChatModel, list[Any]]]  # the middleware's own models


_AGENTS: dict[tuple[Any, ...], _Agent] = {}


def _scripted_parts(middleware: Any) -> list[tuple[ScriptedChatModel, list[Any]]]:
    """The scripted models a middleware holds (the selector's, the emulator's...), with their
    scripts: each run starts them from their first step, as a fresh middleware would."""
    found = []
    for value in vars(middleware).values():
        for part in value if isinstance(value, list | tuple) else [value]:
            if isinstance(part, ScriptedChatModel):
                found.append((part, list(part.script)))
    return found


def _agent_for(
    name: str, order: str | None, guard_mode: str, agent_options: dict[str, Any]
) -> _Agent:
    """The compiled agent of a composition, built once per worker (create_agent and the
    middlewares' set-up cost as much as a run); each run gets a fresh thread, model script and
    middleware state (`_run`)."""
    key = (name, order, guard_mode, *sorted((k, repr(v)) for k, v in agent_options.items()))
    if key not in _AGENTS:
        model = ScriptedChatModel(script=[])
        middleware = [MIDDLEWARES[name]()]
        guard = ReplayGuardMiddleware(mode=guard_mode)
        if order == "guard-first":
            middleware.insert(0, guard)
        elif order == "guard-last":
            middleware.append(guard)
        agent = create_agent(
            model, TOOLS, middleware=middleware, checkpointer=InMemorySaver(), **agent_options
        )
        own = middleware[1] if order == "guard-first" else middleware[0]
        _AGENTS[key] = _Agent(agent, model, own, guard, _scripted_parts(own))
    return _AGENTS[key]


def _fresh(built: _Agent, script: list[Any]) -> None:
    """Reset what a run of the kept agent changes outside its thread's checkpoints."""
    built.model.script = list(script)
    built.model._seen.clear()
    for model, steps in built.scripted:
        model.script = list(steps)
        model._seen.clear()
    for attribute in ("classifier", "ids"):  # AutoModeMiddleware's classifier, TraceIdArgs
        kept = getattr(built.middleware, attribute, None)
        if isinstance(kept, list):
            kept.clear()
        elif kept is not None and isinstance(getattr(kept, "seen", None), list):
            kept.seen.clear()


def _run(
    name: str,
    order: str | None,
    mode: str,
    script: list[Any],
    built: list[Any] | None = None,
    guard_mode: str = "enforce",
    views: list[Any] | None = None,
    **agent_options: Any,
) -> tuple[Any, Any, Counter]:
    """Run an agent with the named middleware (and the guard in `order`, or none).

    `built`, when given, receives the middleware instance the run used; `views`, the
    guard's view of the thread once the run ended. Each run is a new thread of the
    composition's agent, with the model's script from its first step and nothing counted yet.
    """
    kept = _agent_for(name, order, guard_mode, agent_options)
    _fresh(kept, script)
    runs: Counter[str] = Counter()
    _RUNS[0] = runs
    if built is not None:
        built.append(kept.middleware)
    cfg = {"configurable": {"thread_id": f"{name}-{order}-{mode}-{uuid.uuid4().hex}"}}
    inputs = {"messages": [HumanMessage("help with P1")]}
    out = _invoke(kept.agent, inputs, cfg, mode)
    if views is not None:
        views.append(kept.guard.guard.inspect(kept.agent.get_state(cfg)))
    return kept.model, out, runs


def _assert_stopped_at_the_4th_call(
    model: Any, out: dict[str, Any], *, repeats_answered_by: str = "guard"
) -> None:
    """The documented stop of a repeated read: run once, two duplicates, the 4th call stops.

    Exact, not a bound: a guard that stopped at the 5th call would make 5 model calls.
    `repeats_answered_by="emulator"`: the 2nd and 3rd calls are answered by a middleware
    (never cached as the tool's result, so no duplicate), and count towards the limit.
    """
    assert model.calls == 4
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    if repeats_answered_by == "guard":
        assert [m.status for m in answers] == ["success", "error", "error", "error"]
        assert [m.text.split(":")[0] for m in answers[1:]] == ["Not executed"] * 2 + ["Stopped"]
    else:
        assert [m.status for m in answers] == ["success"] * 3 + ["error"]
        assert answers[-1].text.startswith("Stopped")
    last = out["messages"][-1]
    assert isinstance(last, AIMessage)
    assert last.response_metadata.get("replay_guard_stop") == "repeat_limit"
    assert "'lookup' 4 times" in last.text or "'quote' 4 times" in last.text


def _keys(out: dict[str, Any], mode: str) -> set[str]:
    """The state keys a user gets back. `astream(stream_mode="values")` streams every channel
    that has a value, private ones included (LangChain's own call counters too), so there the
    guard's channel is left out; `invoke` and `ainvoke` return the output schema only."""
    keys = set(out)
    if mode == "astream":
        keys.discard(GUARD_CHANNEL)
    return keys


def _shape(messages: list[Any]) -> list[tuple[Any, ...]]:
    shape = []
    for m in messages:
        calls = (
            tuple((c["name"], tuple(sorted(c["args"].items()))) for c in m.tool_calls)
            if isinstance(m, AIMessage)
            else ()
        )
        status = m.status if isinstance(m, ToolMessage) else None
        shape.append((type(m).__name__, m.text, calls, status))
    return shape


HEALTHY = [
    [("lookup", {"id": "P1"}), ("quote", {"item": "tea"})],
    [("lookup", {"id": "P2"})],
    [("quote", {"item": "cake"})],
    "All done.",
]


@cache
def _plain(name: str, mode: str, provider: bool) -> tuple[Any, Counter]:
    """The unguarded run both orders compare with (run once per worker; only read after)."""
    if provider:
        script = [*HEALTHY[:-1], PLAN_JSON]
        _, out, runs = _run(name, None, mode, script, response_format=ProviderStrategy(Plan))
    else:
        _, out, runs = _run(name, None, mode, HEALTHY)
    return out, runs


# Shadow mode's repeated read: 8 reads, so 4 run after the stop enforcing would make (each
# counted as one more stop). No middleware of the matrix acts within 8 reads or 20 (their
# triggers and limits are at 50 calls or more), so a longer loop checks nothing more: 20
# reads took twice the time of the whole healthy-run column (102 cases x 21 model calls).
SHADOW_LOOP = [[("lookup", {"id": "P1"})] for _ in range(8)]


@cache
def _plain_loop(name: str, mode: str) -> tuple[Any, Counter]:
    """The unguarded repeated read both orders of shadow mode compare with (run once per
    worker; only read after)."""
    _, out, runs = _run(name, None, mode, SHADOW_LOOP)
    return out, runs


@cache
def _plain_prompts(name: str) -> list[Any]:
    """The system message of each of the first 4 model calls of the unguarded repeated read
    with the cached prompt (run once per worker; only read after). Four reads: the first 4
    calls see the same history whatever the script holds after them."""
    loop = [[("lookup", {"id": "P1"})] for _ in range(4)]
    model, _, _ = _run(name, None, "sync", loop, system_prompt=_cached_prompt())
    return [messages[0] for messages in model.seen[:4]]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("name", NAMES)
def test_a_healthy_run_is_the_unguarded_run(name, order, mode):
    plain, plain_runs = _plain(name, mode, provider=False)
    _, guarded, guarded_runs = _run(name, order, mode, HEALTHY)
    assert _shape(guarded["messages"]) == _shape(plain["messages"])
    assert guarded_runs == plain_runs
    assert _keys(guarded, mode) == _keys(plain, mode)


@pytest.mark.parametrize("name", NAMES)
def test_without_the_guard_a_repeated_read_runs_to_the_end_of_the_script(name):
    loop = [[("lookup", {"id": "P1"})] for _ in range(20)]
    built: list[Any] = []
    model, out, runs = _run(name, None, "sync", loop, built)
    assert runs["lookup"] == 20
    assert model.calls == 21
    assert out["messages"][-1].text == "Done."
    # The middlewares that call a model of their own did (they are part of the run).
    (middleware,) = built
    if isinstance(middleware, LLMToolSelectorMiddleware):
        assert middleware.model.calls == 21  # one selection per model call
    if isinstance(middleware, AutoModeMiddleware):
        assert len(middleware.classifier.seen) == 20  # every lookup was classified


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("name", NAMES)
def test_a_repeated_read_is_stopped(name, order, mode):
    loop = [[("lookup", {"id": "P1"})] for _ in range(20)]
    model, out, runs = _run(name, order, mode, loop)
    assert runs["lookup"] == 1
    _assert_stopped_at_the_4th_call(model, out)


# A prompt as deep agents send it to Anthropic: content blocks, the first cached.
CACHED_PROMPT = [
    {"type": "text", "text": "You are support.", "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "Answer briefly."},
]


def _cached_prompt() -> SystemMessage:
    """The system prompt of CACHED_PROMPT's blocks, with an id and additional_kwargs."""
    return SystemMessage(
        content=[dict(block) for block in CACHED_PROMPT],
        id="system-1",
        additional_kwargs={"provider_flag": True},
    )


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("name", NAMES)
def test_a_cached_system_prompt_reaches_the_model_with_only_the_reminder_added(name, order):
    # Issue 34 item 1, in every stack: the reminder is one more text block; the cached
    # blocks, the message's id and additional_kwargs reach the model as the user wrote them.
    loop = [[("lookup", {"id": "P1"})] for _ in range(20)]
    model, out, _runs = _run(name, order, "sync", loop, system_prompt=_cached_prompt())
    _assert_stopped_at_the_4th_call(model, out)
    # What the stack sends without the guard (a middleware may add blocks of its own).
    plain = _plain_prompts(name)
    sent = [messages[0] for messages in model.seen]
    assert all(isinstance(message, SystemMessage) for message in sent)
    assert plain[0].content[:2] == CACHED_PROMPT
    assert [message.content for message in sent[:2]] == [m.content for m in plain[:2]]
    for message, without in zip(sent[2:], plain[2:], strict=True):  # carrying the reminder
        # (TodoListMiddleware itself rebuilds the message without id and additional_kwargs.)
        assert message.id == without.id
        assert message.additional_kwargs == without.additional_kwargs
        if name != "todo_list":
            assert message.id == "system-1"
            assert message.additional_kwargs == {"provider_flag": True}
        # One text block more (guard first: before the blocks inner middlewares append).
        added = [block for block in message.content if block not in without.content]
        assert len(added) == 1
        assert len(message.content) == len(without.content) + 1
        assert added[0]["type"] == "text"
        assert "LOOP WARNING" in added[0]["text"]
        assert [block for block in message.content if block is not added[0]] == without.content


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("name", NAMES)
def test_a_repeated_read_in_shadow_mode_runs_unguarded_and_counts_the_stop(name, order, mode):
    # Shadow mode acts on nothing: the loop runs as without the guard. It counts what
    # enforcing decides: the 2nd and 3rd reads are duplicates, the 4th is the stop, and
    # each of the 4 reads after it one more stop that did not happen.
    plain, plain_runs = _plain_loop(name, mode)
    views: list[Any] = []
    model, out, runs = _run(name, order, mode, SHADOW_LOOP, guard_mode="shadow", views=views)
    assert runs == plain_runs
    assert runs["lookup"] == 8
    assert model.calls == 9
    assert _shape(out["messages"]) == _shape(plain["messages"])
    (view,) = views
    assert view.shadow == (("duplicate", 2, 0), ("repeat_limit", 5, 5))
    assert view.stop is None
    assert view.totals.blocked == 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
def test_an_emulated_tool_repeated_is_stopped_and_never_ran(order, mode):
    loop = [[("quote", {"item": "tea"})] for _ in range(20)]
    model, out, runs = _run("tool_emulator", order, mode, loop)
    assert runs["quote"] == 0  # emulated: the body never runs
    _assert_stopped_at_the_4th_call(model, out, repeats_answered_by="emulator")


class Plan(BaseModel):
    """The structured answer of the provider-strategy runs."""

    customer: str
    plan: str


PLAN_JSON = '{"customer": "P1", "plan": "premium"}'  # the provider's native JSON answer


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("name", NAMES)
def test_a_healthy_provider_strategy_run_is_the_unguarded_run(name, order, mode):
    script = [*HEALTHY[:-1], PLAN_JSON]
    strategy = {"response_format": ProviderStrategy(Plan)}
    plain, plain_runs = _plain(name, mode, provider=True)
    _, guarded, guarded_runs = _run(name, order, mode, script, **strategy)
    assert plain["structured_response"] == Plan(customer="P1", plan="premium")
    assert guarded["structured_response"] == plain["structured_response"]
    assert _shape(guarded["messages"]) == _shape(plain["messages"])
    assert guarded_runs == plain_runs
    assert _keys(guarded, mode) == _keys(plain, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("name", NAMES)
def test_a_repeated_read_under_provider_strategy_is_stopped(name, order, mode):
    loop = [[("lookup", {"id": "P1"})] for _ in range(20)]
    strategy = {"response_format": ProviderStrategy(Plan)}
    model, out, runs = _run(name, order, mode, [*loop, PLAN_JSON], **strategy)
    assert runs["lookup"] == 1
    _assert_stopped_at_the_4th_call(model, out)
    assert out.get("structured_response") is None  # stopped before the model gave its answer


def test_without_the_guard_a_provider_strategy_loop_runs_to_the_end_of_the_script():
    loop = [[("lookup", {"id": "P1"})] for _ in range(20)]
    strategy = {"response_format": ProviderStrategy(Plan)}
    model, out, runs = _run("tool_retry", None, "sync", [*loop, PLAN_JSON], **strategy)
    assert runs["lookup"] == 20
    assert model.calls == 21
    assert out["structured_response"] == Plan(customer="P1", plan="premium")
