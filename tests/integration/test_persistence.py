"""The guard state lives in a checkpointed channel: it must survive real checkpointers.

No mocks: InMemorySaver, SqliteSaver (a file) and PostgresSaver (a real server, see
`conftest.py`), new saver objects on the same storage, new processes, time travel, two
workers on one thread, and the async savers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_replay_guard import GUARD_CHANNEL, GuardView, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel
from tests import warm_children
from tests.integration.graphs import (
    POLICY,
    ToolRuns,
    build_agent,
    build_custom_graph,
    contents,
    make_tools,
)

os.environ["LANGSMITH_TRACING"] = "false"

REPO_ROOT = Path(__file__).resolve().parents[2]
PROC_SCRIPT = Path(__file__).with_name("proc_resume.py")
TOOL = "get_details_by_id"
ARGS = {"id": "P1002"}
THREAD_POLICY = POLICY.model_copy(update={"scope": "thread"})

SYNC_BACKENDS = [
    "memory",
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
]
DURABLE_BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


# -- checkpointers ---------------------------------------------------------------------------


class Backend:
    """Opens savers on one storage: each `open()` is a new saver object (and connection)."""

    def __init__(self, kind: str, target: str | None) -> None:
        self.kind = kind
        self.target = target
        self._memory = InMemorySaver() if kind == "memory" else None

    @contextmanager
    def open(self) -> Iterator[Any]:
        if self.kind == "memory":
            yield self._memory  # nothing to re-open: the same in-process storage
        elif self.kind == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            with SqliteSaver.from_conn_string(str(self.target)) as saver:
                yield saver
        else:
            from langgraph.checkpoint.postgres import PostgresSaver

            with PostgresSaver.from_conn_string(str(self.target)) as saver:
                saver.setup()
                yield saver

    @asynccontextmanager
    async def aopen(self) -> AsyncIterator[Any]:
        if self.kind == "sqlite":
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            async with AsyncSqliteSaver.from_conn_string(str(self.target)) as saver:
                yield saver
        elif self.kind == "postgres":
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

            async with AsyncPostgresSaver.from_conn_string(str(self.target)) as saver:
                await saver.setup()
                yield saver
        else:
            msg = f"no async saver for {self.kind!r}"
            raise ValueError(msg)


@pytest.fixture
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    kind = request.param
    if kind == "sqlite":
        return Backend(kind, str(tmp_path / "checkpoints.sqlite"))
    if kind == "postgres":
        return Backend(kind, request.getfixturevalue("pg_uri"))
    return Backend(kind, None)


# -- helpers ---------------------------------------------------------------------------------


def cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def ask(text: str = "Show me plan P1002.") -> dict[str, Any]:
    return {"messages": [HumanMessage(content=text)]}


def looping(times: int = 10) -> ScriptedChatModel:
    return ScriptedChatModel.looping(TOOL, ARGS, times=times)


def assert_aborted_once(view: GuardView, runs: ToolRuns) -> None:
    """The default-config outcome of a model looping on one pure call."""
    assert view.stop_reason == "repeat_limit"
    assert view.totals.calls == 4
    assert view.totals.blocked == 3
    assert view.totals.aborts == 1
    assert [(c.tool, c.count) for c in view.counters] == [(TOOL, 4)]
    assert view.blocked == (
        (TOOL, "duplicate", 2),
        (TOOL, "duplicate", 3),
        (TOOL, "repeat_limit", 4),
    )
    assert view.notice is None
    assert runs[TOOL] == 1


def without_turn(view: GuardView) -> GuardView:
    """The view minus the turn id (the id of a user message, different in every run)."""
    return dataclasses.replace(view, turn=None)


# -- round trip ------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", SYNC_BACKENDS, indirect=True)
def test_guard_state_round_trips_through_the_checkpointer(backend: Backend, thread_id: str):
    guard = ReplayGuard(POLICY)
    runs = ToolRuns()
    model = looping()
    with backend.open() as saver:
        graph = build_custom_graph(guard, model, make_tools(runs), checkpointer=saver)
        out = graph.invoke(ask(), cfg(thread_id))
        view = guard.inspect(graph.get_state(cfg(thread_id)))

    assert_aborted_once(view, runs)
    assert model.calls == 4  # the abort ended the run: the model was not called again
    assert isinstance(out["messages"][-1], AIMessage)
    assert "stopped" in str(out["messages"][-1].content).lower()

    # A new saver object on the same storage and a newly compiled graph see the same state.
    with backend.open() as saver:
        reopened = build_custom_graph(
            ReplayGuard(POLICY), looping(), make_tools(ToolRuns()), checkpointer=saver
        )
        snapshot = reopened.get_state(cfg(thread_id))
        assert guard.inspect(snapshot) == view
        assert contents(snapshot.values["messages"]) == contents(out["messages"])


@pytest.mark.parametrize("backend", SYNC_BACKENDS, indirect=True)
def test_agent_channel_is_checkpointed_but_not_in_the_output(backend: Backend, thread_id: str):
    guard = ReplayGuard(POLICY)
    runs = ToolRuns()
    with backend.open() as saver:
        agent = build_agent(guard, looping(), make_tools(runs), checkpointer=saver)
        out = agent.invoke(ask(), cfg(thread_id))
        snapshot = agent.get_state(cfg(thread_id))

    assert GUARD_CHANNEL not in out  # private: not part of the agent's output schema
    assert "messages" in out
    assert GUARD_CHANNEL in snapshot.values  # ...but it is in the thread state
    view = guard.inspect(snapshot)
    assert_aborted_once(view, runs)

    with backend.open() as saver:
        reopened = build_agent(
            ReplayGuard(POLICY), looping(), make_tools(ToolRuns()), checkpointer=saver
        )
        assert guard.inspect(reopened.get_state(cfg(thread_id))) == view


# -- a new process resumes the thread ----------------------------------------------------------


def run_process(kind: str, target: str, thread_id: str, calls: int) -> dict[str, Any]:
    """One user turn in a fresh Python process (tests/integration/proc_resume.py)."""
    result = warm_children.run(
        [sys.executable, str(PROC_SCRIPT), kind, target, thread_id, str(calls)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "LANGSMITH_TRACING": "false"},
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no JSON line in the output:\n{result.stdout}\n{result.stderr}"
    report: dict[str, Any] = json.loads(lines[-1])
    return report


@pytest.mark.parametrize("backend", DURABLE_BACKENDS, indirect=True)
def test_a_new_process_continues_the_counts(backend: Backend, thread_id: str):
    assert backend.target is not None
    first = run_process(backend.kind, backend.target, thread_id, calls=2)
    assert first["runs"] == {TOOL: 1}  # the 1st call ran, the 2nd was a duplicate
    assert first["totals"]["calls"] == 2
    assert first["blocked"] == [[TOOL, "duplicate", 2]]
    assert first["stop_reason"] is None
    assert first["model_calls"] == 3  # two tool calls, then the answer

    second = run_process(backend.kind, backend.target, thread_id, calls=2)
    assert second["runs"] == {}  # the tool body never ran in process 2
    assert second["totals"]["calls"] == 4
    assert second["counters"] == [[TOOL, 4]]
    assert second["blocked"] == [
        [TOOL, "duplicate", 2],
        [TOOL, "duplicate", 3],  # 1st call of process 2: count 3, from the checkpoint
        [TOOL, "repeat_limit", 4],  # 2nd call: count 4 aborts the run
    ]
    assert second["stop_reason"] == "repeat_limit"
    assert second["model_calls"] == 2  # the abort ended the run before the model's answer


# -- time travel -----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", SYNC_BACKENDS, indirect=True)
def test_time_travel_restores_the_guard_state_of_the_checkpoint(backend: Backend, thread_id: str):
    guard = ReplayGuard(POLICY)
    runs = ToolRuns()
    model = looping()
    with backend.open() as saver:
        # Pause after every tools step to record the guard view as the run saw it then.
        graph = build_custom_graph(
            guard, model, make_tools(runs), checkpointer=saver, interrupt_after=["tools"]
        )
        graph.invoke(ask(), cfg(thread_id))
        seen = [guard.inspect(graph.get_state(cfg(thread_id)))]
        while graph.get_state(cfg(thread_id)).next:
            graph.invoke(None, cfg(thread_id))
            seen.append(guard.inspect(graph.get_state(cfg(thread_id))))
        assert [v.totals.calls for v in seen] == [1, 2, 3, 4]
        latest = graph.get_state(cfg(thread_id))
        assert_aborted_once(guard.inspect(latest), runs)

        # Oldest first: the first checkpoint with one recorded call is the one written by
        # the first tools step (next: the agent).
        history = list(graph.get_state_history(cfg(thread_id)))  # newest first
        after_first_tools = next(s for s in reversed(history) if guard.inspect(s).totals.calls)
        assert after_first_tools.next == ("agent",)
        early = guard.inspect(after_first_tools)
        assert early == seen[0]  # what it was at that step of the run
        assert early.totals.calls == 1
        assert early.calls == 1
        assert early.stop_reason is None
        assert early.blocked == ()
        assert [(c.tool, c.count) for c in early.counters] == [(TOOL, 1)]
        assert early != guard.inspect(latest)

        # Resume from that checkpoint (a fork): the counts restart from 1, not from 4.
        model_calls = model.calls
        out = graph.invoke(None, after_first_tools.config)
        while graph.get_state(cfg(thread_id)).next:
            out = graph.invoke(None, cfg(thread_id))
        fork = guard.inspect(graph.get_state(cfg(thread_id)))
        assert model.calls == model_calls + 3  # counts 2 and 3 denied, count 4 aborts
        assert runs[TOOL] == 1  # the tool body never ran again
        assert fork.totals.calls == 4
        assert fork.blocked == (
            (TOOL, "duplicate", 2),
            (TOOL, "duplicate", 3),
            (TOOL, "repeat_limit", 4),
        )
        assert fork.stop_reason == "repeat_limit"
        assert isinstance(out["messages"][-1], AIMessage)

        # The old branch is untouched, and the fork point still shows the early state.
        assert guard.inspect(graph.get_state(latest.config)) == seen[-1]
        assert guard.inspect(graph.get_state(after_first_tools.config)) == early


@pytest.mark.parametrize("backend", SYNC_BACKENDS, indirect=True)
def test_update_state_fork_keeps_the_guard_state(backend: Backend, thread_id: str):
    guard = ReplayGuard(POLICY)
    runs = ToolRuns()
    with backend.open() as saver:
        graph = build_custom_graph(guard, looping(), make_tools(runs), checkpointer=saver)
        graph.invoke(ask(), cfg(thread_id))
        early = next(
            s
            for s in reversed(list(graph.get_state_history(cfg(thread_id))))
            if guard.inspect(s).totals.calls == 1
        )
        # Fork by editing the history at that checkpoint (messages only).
        forked = graph.update_state(
            early.config, {"messages": [AIMessage(content="A note.", id="note-1")]}
        )
        view = guard.inspect(graph.get_state(forked))
        assert view == guard.inspect(early)
        assert view.totals.calls == 1
        assert view.stop_reason is None


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_inspect_reads_a_state_dict_and_the_channel_value(backend: Backend, thread_id: str):
    guard = ReplayGuard(POLICY)
    with backend.open() as saver:
        graph = build_custom_graph(guard, looping(), make_tools(ToolRuns()), checkpointer=saver)
        out = graph.invoke(ask(), cfg(thread_id))
        snapshot = graph.get_state(cfg(thread_id))
    assert guard.inspect(snapshot).totals.calls == 4
    # The docstring promises "a `StateSnapshot`, a state dict, or the channel value itself"
    # (a dict has a `.values` method: it must not be mistaken for a snapshot).
    assert guard.inspect(snapshot.values) == guard.inspect(snapshot)
    assert guard.inspect(out).totals.calls == 4
    assert guard.inspect(out[GUARD_CHANNEL]).stop_reason == "repeat_limit"


# -- two workers on one thread -----------------------------------------------------------------


@pytest.mark.postgres
def test_two_workers_share_one_thread_through_postgres(pg_uri: str, thread_id: str):
    from langgraph.checkpoint.postgres import PostgresSaver

    runs_a, runs_b = ToolRuns(), ToolRuns()
    guard_a, guard_b = ReplayGuard(THREAD_POLICY), ReplayGuard(THREAD_POLICY)
    with (
        PostgresSaver.from_conn_string(pg_uri) as saver_a,
        PostgresSaver.from_conn_string(pg_uri) as saver_b,
    ):
        saver_a.setup()
        saver_b.setup()
        assert saver_a.conn is not saver_b.conn
        worker_a = build_custom_graph(
            guard_a, looping(times=1), make_tools(runs_a), checkpointer=saver_a
        )
        worker_b = build_custom_graph(
            guard_b, looping(times=1), make_tools(runs_b), checkpointer=saver_b
        )

        worker_a.invoke(ask("Turn 1: show me plan P1002."), cfg(thread_id))
        assert runs_a[TOOL] == 1
        assert guard_a.inspect(worker_a.get_state(cfg(thread_id))).totals.calls == 1

        out = worker_b.invoke(ask("Turn 2: show me plan P1002 again."), cfg(thread_id))
        assert runs_b[TOOL] == 0  # denied as a duplicate: worker B never ran the tool
        assert "Not executed" in str(out["messages"][-2].content)

        view = guard_a.inspect(worker_a.get_state(cfg(thread_id)))
        assert view.totals.calls == 2
        assert view.blocked == ((TOOL, "duplicate", 2),)
        assert view.stop_reason is None
        assert guard_b.inspect(worker_b.get_state(cfg(thread_id))) == view


# -- async -----------------------------------------------------------------------------------


def run_sync_reference(thread_id: str) -> tuple[GuardView, list[tuple[str, str]]]:
    guard = ReplayGuard(POLICY)
    runs = ToolRuns()
    graph = build_custom_graph(guard, looping(), make_tools(runs), checkpointer=InMemorySaver())
    out = graph.invoke(ask(), cfg(thread_id))
    return without_turn(guard.inspect(graph.get_state(cfg(thread_id)))), contents(out["messages"])


@pytest.mark.parametrize("backend", DURABLE_BACKENDS, indirect=True)
def test_async_savers_give_the_same_outcome_as_sync(backend: Backend, thread_id: str):
    guard = ReplayGuard(POLICY)
    runs = ToolRuns()
    model = looping()

    async def scenario() -> tuple[GuardView, GuardView, list[Any]]:
        async with backend.aopen() as saver:
            graph = build_custom_graph(guard, model, make_tools(runs), checkpointer=saver)
            out = await graph.ainvoke(ask(), cfg(thread_id))
            view = guard.inspect(await graph.aget_state(cfg(thread_id)))
        async with backend.aopen() as saver:
            graph = build_custom_graph(
                ReplayGuard(POLICY), looping(), make_tools(ToolRuns()), checkpointer=saver
            )
            reopened = guard.inspect(await graph.aget_state(cfg(thread_id)))
        return view, reopened, out["messages"]

    view, reopened, messages = asyncio.run(scenario())
    assert_aborted_once(view, runs)
    assert reopened == view
    assert model.calls == 4

    # The sync saver reads what the async one wrote.
    with backend.open() as saver:
        graph = build_custom_graph(
            ReplayGuard(POLICY), looping(), make_tools(ToolRuns()), checkpointer=saver
        )
        assert guard.inspect(graph.get_state(cfg(thread_id))) == view

    sync_view, sync_messages = run_sync_reference(f"{thread_id}-sync")
    assert without_turn(view) == sync_view
    assert contents(messages) == sync_messages
