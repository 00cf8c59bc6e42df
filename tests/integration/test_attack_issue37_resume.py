"""A real create_agent thread resumed from a checkpoint holding a hostile guard channel value.

The channel value is replaced in a SqliteSaver checkpoint (`Overwrite`: stored as it is, as a
corrupt or hand-edited checkpoint holds it), the file is reopened as a new process would, and
the looping model goes on: the run never crashes, the reset names the problem, and the repeated
lookup is still stopped by the repeat limit. A value nested past the recursion limit is
written by a node of a graph without a checkpointer (the reducer merges it).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NotRequired, TypedDict

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Overwrite

from langgraph_replay_guard import GUARD_CHANNEL, ReplayGuard
from langgraph_replay_guard.decisions.state import merge_guard_state, new_state
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.channel_formats import as_v2
from tests.integration.graphs import POLICY, ToolRuns
from tests.integration.test_state_migration import agent

TOOL = "get_details_by_id"
ARGS = {"id": "P1002"}


def _count(value: dict[str, Any], count: int) -> dict[str, Any]:
    (key,) = value["counters"]
    return {**value, "counters": {key: [count, TOOL]}}


def _short_memo(value: dict[str, Any]) -> dict[str, Any]:
    (key,) = value["results"]
    return {**value, "results": {key: value["results"][key][:3]}}


HOSTILE: dict[str, tuple[Callable[[dict[str, Any]], Any], str | None]] = {
    # name: (the stored value made from the paused thread's, what the reset names; None: read)
    "a repeat count of -100": (lambda v: _count(v, -100), "counters["),
    "a repeat count of 0": (lambda v: _count(v, 0), "counters["),
    "a result memo a position short": (_short_memo, "results["),
    "format 2, pending of another shape": (
        lambda v: {**as_v2(v), "pending": {"batch": 5, "events": []}},
        "pending",
    ),
    "version '3'": (lambda v: {**v, "v": "3"}, "format version"),
    "a window of 0": (lambda v: {**v, "cfg": {"w": 0}}, "cfg.w"),
    "a huge repeat count": (lambda v: _count(v, 10**15), None),
}


def paused_thread(graph: Any, config: dict[str, Any]) -> dict[str, Any]:
    """Two identical lookups (one ran, one a duplicate), paused before the third's tools step."""
    graph.invoke({"messages": [HumanMessage("Show me plan P1002.")]}, config)
    for _ in range(2):
        graph.invoke(None, config)
    value: dict[str, Any] = graph.get_state(config).values[GUARD_CHANNEL]
    assert [list(entry) for entry in value["counters"].values()] == [[2, TOOL]]
    return value


def run_on(graph: Any, config: dict[str, Any]) -> None:
    steps = 0
    while graph.get_state(config).next:
        graph.invoke(None, config)
        steps += 1
        assert steps < 30


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_value_in_a_sqlite_checkpoint_resets_and_the_loop_still_stops(case, tmp_path):
    hostile, named = HOSTILE[case]
    runs = ToolRuns()
    guard = ReplayGuard(POLICY)  # max_repeats=3: the 4th identical call stops the run
    model = ScriptedChatModel.looping(TOOL, ARGS, times=12, final="Done.")
    config = {"configurable": {"thread_id": "hostile"}}
    path: Path = tmp_path / "checkpoints.sqlite"

    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        graph = agent(guard, model, runs, SqliteSaver(conn))
        value = paused_thread(graph, config)
        graph.update_state(config, {GUARD_CHANNEL: Overwrite(hostile(value))})
    finally:
        conn.close()

    conn = sqlite3.connect(path, check_same_thread=False)  # as a new process opens it
    try:
        graph = agent(guard, model, runs, SqliteSaver(conn))
        view = guard.inspect(graph.get_state(config))
        if named is None:
            assert view.reset is None
        else:
            assert view.reset is not None, "a value the fold never writes resets"
            assert named in view.reset["reason"]
            assert view.notice is not None
        run_on(graph, config)
        view = guard.inspect(graph.get_state(config))
    finally:
        conn.close()

    assert view.stop_reason == "repeat_limit", "the repeated lookup is still stopped"
    assert runs[TOOL] <= 2, "at most one run after a reset (its counts start from zero)"
    assert len(model._seen) <= 1 + POLICY.max_repeats + 2


class DeepState(TypedDict):
    step: int
    replay_guard: NotRequired[Annotated[dict[str, Any] | None, merge_guard_state]]


def test_a_node_writing_a_value_nested_past_the_recursion_limit_resets_the_channel():
    """A checkpointer refuses such a value (its serializer's own recursion limit), but a graph
    without one merges a node's write with the reducer: that raised RecursionError (the notice
    showed the value with `repr`); now the channel resets, naming the field."""
    nested: list[Any] = []
    for _ in range(sys.getrecursionlimit() + 100):
        nested = [nested]
    guard = ReplayGuard(POLICY)

    def corrupt(state: DeepState) -> dict[str, Any]:
        return {GUARD_CHANNEL: {**new_state(), "epoch": nested}}

    builder = StateGraph(DeepState)
    builder.add_node("corrupt", corrupt)
    builder.add_edge(START, "corrupt")
    builder.add_edge("corrupt", END)
    result = builder.compile().invoke({"step": 0})
    view = guard.inspect(result)
    assert view.reset is not None
    assert "epoch should be a whole number >= 0, not [[[[" in view.reset["reason"]
