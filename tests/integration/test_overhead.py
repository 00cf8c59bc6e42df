"""A guarded create_agent step does its planning once: after_model and the tool calls share it."""

from __future__ import annotations

import copy
import cProfile
import gc
import inspect
import json
import pstats
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_replay_guard import ReplayGuardMiddleware
from langgraph_replay_guard.decisions import state
from langgraph_replay_guard.integrations import calls
from langgraph_replay_guard.testing import ScriptedChatModel


@tool
def lookup(id: str) -> str:
    """Look up a record."""
    return f"record {id}"


def _count_plans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    planned: list[int] = []
    original = calls.decide_batch

    def counting(*args: Any, **kwargs: Any) -> calls.BatchDecisions:
        planned.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(calls, "decide_batch", counting)
    return planned


@pytest.mark.parametrize("per_step", [1, 3])
def test_each_batch_is_planned_once(monkeypatch: pytest.MonkeyPatch, per_step: int) -> None:
    planned = _count_plans(monkeypatch)
    steps = 4
    script: list[Any] = [
        [("lookup", {"id": f"R{step}-{i}"}) for i in range(per_step)] for step in range(steps)
    ]
    agent = create_agent(
        ScriptedChatModel(script=script),
        [lookup],
        middleware=[ReplayGuardMiddleware()],
        checkpointer=InMemorySaver(),
    )
    result = agent.invoke(
        {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "plans"}}
    )
    answered = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert [m.content for m in answered] == [
        f"record R{step}-{i}" for step in range(steps) for i in range(per_step)
    ]
    assert len(planned) == steps  # after_model planned; every tool call reused that plan


def test_a_repeat_is_still_stopped_with_the_shared_plan() -> None:
    script: list[Any] = [[("lookup", {"id": "same"})] for _ in range(6)]
    agent = create_agent(
        ScriptedChatModel(script=script),
        [lookup],
        middleware=[ReplayGuardMiddleware(max_repeats=2, dedup=False)],
        checkpointer=InMemorySaver(),
    )
    result = agent.invoke(
        {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "repeat"}}
    )
    ran = [m for m in result["messages"] if isinstance(m, ToolMessage) and m.status != "error"]
    assert len(ran) == 2
    assert "stopped" in str(result["messages"][-1].content).lower()


def _guard_calls_per_step(steps: int, measured: set[int]) -> dict[int, int]:
    """The package's Python calls in some rounds (agent + tools) of a guarded thread.

    Counted with cProfile, as `benchmarks/bench_agent.py` counts a step: deterministic,
    unlike time on a shared machine.
    """
    package = str(Path(calls.__file__).parents[1])
    script: list[Any] = [[("lookup", {"id": f"R{step}"})] for step in range(steps)]
    agent = create_agent(
        ScriptedChatModel(script=script),
        [lookup],
        middleware=[ReplayGuardMiddleware()],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "long"}, "recursion_limit": 10 * steps + 10}
    stream = agent.stream(
        {"messages": [HumanMessage("go")]}, config, stream_mode="updates", durability="sync"
    )
    counts: dict[int, int] = {}
    rounds = 0
    profile: cProfile.Profile | None = None
    for update in stream:
        if "tools" not in update:
            continue
        if profile is not None:
            profile.disable()
            stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
            counts[rounds] = sum(
                row[1] for where, row in stats.items() if where[0].startswith(package)
            )
            profile = None
        rounds += 1
        if rounds in measured:
            profile = cProfile.Profile()
            profile.enable()
    return counts


def test_a_guarded_step_costs_the_same_late_in_a_long_thread() -> None:
    # The guard's state is bounded, so its work per step must not grow with the thread:
    # at b3e3935 dropping stale result previews read every message for every preview
    # (its calls a step grew from about 600 at step 10 to about 4,000 at step 150).
    counts = _guard_calls_per_step(160, {10, 11, 150, 151})
    early, late = max(counts[10], counts[11]), max(counts[150], counts[151])
    assert early > 0
    assert late <= early + 10, counts


def _objects_kept(middleware: list[Any], measured: tuple[int, int]) -> int:
    """Objects the collector tracks that a thread's steps `measured[0]` to `measured[1]` add."""
    steps = measured[1] + 2
    script: list[Any] = [[("lookup", {"id": f"R{step}"})] for step in range(steps)]
    agent = create_agent(
        ScriptedChatModel(script=script),
        [lookup],
        middleware=middleware,
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "kept"}, "recursion_limit": 10 * steps + 10}
    stream = agent.stream(
        {"messages": [HumanMessage("go")]}, config, stream_mode="updates", durability="sync"
    )
    counts: list[int] = []
    rounds = 0
    for update in stream:
        if "tools" not in update:
            continue
        rounds += 1
        if rounds in measured:
            gc.collect()
            counts.append(len(gc.get_objects()))
        if rounds == measured[1]:
            break
    return counts[1] - counts[0]


def test_a_guarded_thread_keeps_no_more_objects_per_step_than_an_unguarded_one() -> None:
    # What a step leaves alive for good is the thread's history (its messages, the saver's
    # checkpoints): the guard keeps nothing per step beyond it. Its memos of recent channel
    # values and writes are bounded, so past them a guarded thread grows like an unguarded
    # one; an object kept per step would be scanned by every later collection, and the
    # collector's full collections scan everything a server holds.
    # The count is of the whole process: under xdist the worker's message thread may queue the
    # next tests while a thread is measured (about as many objects as the margin). A guard
    # that keeps an object a step keeps it in every attempt; a queued message is gone by the
    # next one, so the test measures up to three times and passes on the first fair reading.
    readings: list[tuple[int, int]] = []
    for _ in range(3):
        plain = _objects_kept([], (30, 70))
        guarded = _objects_kept([ReplayGuardMiddleware()], (30, 70))
        assert plain > 0  # the history grows
        readings.append((guarded, plain))
        if guarded <= plain + 40:  # less than one object a step more
            break
    else:
        raise AssertionError(f"guarded and plain objects kept over 40 steps: {readings}")


def test_create_agent_reads_the_hooks_signature_without_rebuilding_it() -> None:
    # create_agent wraps `m.wrap_model_call` in langsmith's `traceable`, which calls
    # `inspect.signature` on it twice per call; a bound method's signature is rebuilt (its
    # `self` dropped) each time. The guard's hooks carry theirs, read as they are.
    middleware = ReplayGuardMiddleware()
    for name in ("wrap_model_call", "awrap_model_call", "wrap_tool_call", "awrap_tool_call"):
        hook = getattr(middleware, name)
        first, again = inspect.signature(hook), inspect.signature(hook)
        assert first is again, name
        assert list(first.parameters) == ["request", "handler"], name
        assert inspect.iscoroutinefunction(hook) == name.startswith("a"), name
        # A copy's hook is the copy's, as a bound method would be.
        assert getattr(copy.copy(middleware), name).args[0] is not middleware, name


def test_a_subclass_keeps_its_own_hook() -> None:
    calls_seen: list[str] = []

    class Counting(ReplayGuardMiddleware):
        def wrap_tool_call(self, request: Any, handler: Any) -> Any:
            calls_seen.append(request.tool_call["name"])
            return super().wrap_tool_call(request, handler)

    script: list[Any] = [[("lookup", {"id": "R1"})]]
    agent = create_agent(
        ScriptedChatModel(script=script),
        [lookup],
        middleware=[Counting()],
        checkpointer=InMemorySaver(),
    )
    agent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "sub"}})
    assert calls_seen == ["lookup"]


def test_the_model_call_reads_previews_without_copying_the_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each model call reads the channel's previews and digests (`_scrub`, `_show`): a value
    # the reducer returned is read as it is, in one pass, not copied for each read.
    copies: list[int] = []
    original = state._shallow

    def counting(value: Any) -> dict[str, Any]:
        copies.append(1)
        return original(value)

    value = state.merge_guard_state(None, state.show_update({}))
    monkeypatch.setattr(state, "_shallow", counting)
    assert state.preview_facts(value).held == set()
    assert state.preview_facts(value).unshown == set()
    assert state.preview_facts(value).recorded == set()
    assert copies == []


class _RewriteInPlace(AgentMiddleware):  # type: ignore[type-arg]
    """From the third model call on, changes the first result's text on its own message.

    The same message object at the same place, a new text: the model call must not trust
    where it last found that result's preview (`ReplayGuardMiddleware._scrub`).
    """

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def before_model(self, state: Any, runtime: Any) -> None:
        answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        if len(answers) >= 2:
            first = answers[0]
            if self.how == "text":
                first.content = "[redacted]"
            else:
                first.content = [{"type": "text", "text": "[redacted]"}]


@pytest.mark.parametrize("how", ["text", "blocks"])
def test_a_preview_whose_message_changed_in_place_is_dropped(how: str) -> None:
    # `_scrub` skips the search for a kept preview whose message is the same object at the
    # same place with the same text object; a text changed on that very message is not.
    script: list[Any] = [[("lookup", {"id": "A"})], [("lookup", {"id": "B"})], "done"]
    agent = create_agent(
        ScriptedChatModel(script=script),
        [lookup],
        middleware=[_RewriteInPlace(how), ReplayGuardMiddleware(store_previews=True)],
        checkpointer=InMemorySaver(),
    )
    cfg: Any = {"configurable": {"thread_id": "in-place"}}
    agent.invoke({"messages": [HumanMessage("go")]}, cfg)
    channel = json.dumps(agent.get_state(cfg).values["replay_guard"])
    assert "record A" not in channel, "the changed result keeps no preview"
    assert "record B" in channel, "the unchanged one keeps its preview"
