"""A thread checkpointed by the previous release (guard channel format 2) resumes with its counters.

The previous release kept the batch in progress as `pending` (`{"batch", "events"}`). Such a
value, in a real checkpoint (InMemorySaver, a SqliteSaver file reopened as a new process would)
or in the callback handler's store, is read as format 3: the next repeat is blocked as if the
thread had never changed release.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.memory import InMemoryStore
from langgraph.types import Overwrite

from langgraph_replay_guard import GUARD_CHANNEL, ReplayGuard, ReplayGuardCallbackHandler
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.channel_formats import as_v2
from tests.integration.graphs import POLICY, SYSTEM, ToolRuns, build_custom_graph, make_tools

TOOL = "get_details_by_id"
ARGS = {"id": "P1002"}


def custom(guard: ReplayGuard, model: ScriptedChatModel, runs: ToolRuns, saver: Any) -> Any:
    return build_custom_graph(
        guard, model, make_tools(runs), checkpointer=saver, interrupt_before=["tools"]
    )


def agent(guard: ReplayGuard, model: ScriptedChatModel, runs: ToolRuns, saver: Any) -> Any:
    return create_agent(
        model,
        make_tools(runs),
        system_prompt=SYSTEM,
        middleware=[guard.middleware()],
        checkpointer=saver,
        interrupt_before=["tools"],
    )


BUILDERS: dict[str, Callable[..., Any]] = {"custom": custom, "create_agent": agent}


def saver_opener(kind: str, path: Path) -> Callable[[], Any]:
    """Opens the thread's checkpointer: one InMemorySaver, or a new connection to one SQLite
    file each time (as a new process would open it)."""
    memory = InMemorySaver()

    @contextmanager
    def open_saver() -> Iterator[BaseCheckpointSaver[Any]]:
        if kind == "memory":
            yield memory
            return
        conn = sqlite3.connect(path, check_same_thread=False)
        try:
            yield SqliteSaver(conn)
        finally:
            conn.close()

    return open_saver


SAVERS = ["memory", "sqlite"]


@pytest.mark.parametrize("way", ["overwrite", "update_state"])
@pytest.mark.parametrize("saver_kind", SAVERS)
@pytest.mark.parametrize("kind", list(BUILDERS))
def test_a_format_2_checkpoint_resumes_with_its_counters(kind, saver_kind, way, tmp_path):
    runs = ToolRuns()
    guard = ReplayGuard(POLICY)  # max_repeats=3: the 4th identical call aborts
    model = ScriptedChatModel.looping(TOOL, ARGS, times=4, final="Done.")
    config = {"configurable": {"thread_id": f"{kind}-{saver_kind}-{way}"}}
    open_saver = saver_opener(saver_kind, tmp_path / "checkpoints.sqlite")

    # Two identical lookups (one run, one duplicate); paused before the tools step of the
    # 3rd. (create_agent's middleware decides an aborting batch in the model call: the 4th
    # call's abort happens before its tools step.)
    with open_saver() as saver:
        graph = BUILDERS[kind](guard, model, runs, saver)
        graph.invoke({"messages": [HumanMessage("Show me plan P1002.")]}, config)
        for _ in range(2):
            graph.invoke(None, config)
        current = graph.get_state(config).values[GUARD_CHANNEL]
        assert current["v"] == 3
        assert [list(entry) for entry in current["counters"].values()] == [[2, TOOL]]
        # The checkpoint as the previous release wrote it: `Overwrite` stores the raw value
        # (what an old checkpoint holds); `update_state` goes through the reducer.
        old = as_v2(current)
        graph.update_state(config, {GUARD_CHANNEL: Overwrite(old) if way == "overwrite" else old})
        stored = graph.get_state(config).values[GUARD_CHANNEL]
        if way == "overwrite":
            assert stored["v"] == 2, "the checkpoint holds format 2"
            assert "pending" in stored
        else:
            assert stored["v"] == 3, "the reducer read it as format 3"

    with open_saver() as saver:  # a fresh connection, as after a restart
        graph = BUILDERS[kind](guard, model, runs, saver)
        view = guard.inspect(graph.get_state(config))
        assert view.reset is None, "read, not reset"
        assert view.notice is None
        assert [(c.tool, c.count) for c in view.counters] == [(TOOL, 2)]
        assert (view.totals.calls, view.totals.blocked) == (2, 1)
        while graph.get_state(config).next:
            graph.invoke(None, config)
        view = guard.inspect(graph.get_state(config))
        assert graph.get_state(config).values[GUARD_CHANNEL]["v"] == 3, "written as format 3"

    assert runs[TOOL] == 1, "the repeats never ran the tool"
    assert view.stop_reason == "repeat_limit", "the 4th identical call stops the run"
    assert [(c.tool, c.count) for c in view.counters] == [(TOOL, 4)]
    assert (view.totals.calls, view.totals.blocked, view.totals.aborts) == (4, 3, 1)
    assert view.reset is None


def test_a_callback_handlers_format_2_state_resumes_with_its_counters():
    store = InMemoryStore()
    runs = ToolRuns()
    thread = "callbacks-v2"

    def run(handler: ReplayGuardCallbackHandler, times: int) -> None:
        model = ScriptedChatModel.looping(TOOL, ARGS, times=times, final="Done.")
        graph = create_agent(model, make_tools(runs))
        config = {"configurable": {"thread_id": thread}, "callbacks": [handler]}
        graph.invoke({"messages": [HumanMessage("Show me plan P1002.")]}, config)

    scope = POLICY.model_copy(update={"scope": "thread"})
    run(ReplayGuardCallbackHandler(scope, store=store), times=3)
    namespace = ("replay_guard", "callbacks")
    item = store.get(namespace, thread)
    assert item is not None
    store.put(namespace, thread, as_v2(item.value))  # as the previous release stored it

    handler = ReplayGuardCallbackHandler(scope, store=store)  # a new process
    view = handler.inspect(thread)
    assert view.reset is None
    assert [(c.tool, c.count) for c in view.counters] == [(TOOL, 3)]
    run(handler, times=1)
    view = handler.inspect(thread)
    assert runs[TOOL] == 1
    assert view.stop_reason == "repeat_limit"
    assert (view.totals.calls, view.totals.aborts) == (4, 1)
