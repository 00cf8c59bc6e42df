"""Of N workers resuming one call at once, exactly one runs it; the others replay its outcome."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import ReplayGuard, ReplayInFlightError
from tests import warm_children

from .claim_graphs import POLICY, claim_graph, effect_tools, sends

pytestmark = pytest.mark.filterwarnings(
    "ignore:langgraph-replay-guard.*durable checkpointer:langgraph_replay_guard.ReplayGuardWarning"
)

ROOT = Path(__file__).resolve().parents[2]
MODES = ["wrap", "middleware"]
WORKERS = 4


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}


@asynccontextmanager
async def _async_backend(kind: str, tmp_path: Path, uri: str | None) -> AsyncIterator[Any]:
    if kind == "memory":
        yield InMemorySaver(), InMemoryStore()
    elif kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
        from langgraph.store.sqlite.aio import AsyncSqliteStore

        async with (
            AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver,
            AsyncSqliteStore.from_conn_string(str(tmp_path / "store.db")) as store,
        ):
            await store.setup()
            yield saver, store
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from langgraph.store.postgres.aio import AsyncPostgresStore

        assert uri is not None
        async with (
            AsyncPostgresSaver.from_conn_string(uri) as saver,
            AsyncPostgresStore.from_conn_string(uri) as store,
        ):
            await saver.setup()
            await store.setup()
            yield saver, store


BACKENDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def _outcome(result: Any) -> str:
    answers = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert answers, "the resumed run answered the tool call"
    meta = answers[-1].response_metadata.get("replay_guard")
    return "replayed" if meta == "replayed" else "ran"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", BACKENDS)
def test_gathered_resumers_send_exactly_once(kind, mode, tmp_path, request):
    uri = request.getfixturevalue("pg_uri") if kind == "postgres" else None
    effects = tmp_path / "effects.txt"

    async def scenario() -> list[str]:
        async with _async_backend(kind, tmp_path, uri) as (saver, store):
            guard = ReplayGuard(POLICY, store=store)
            graph = claim_graph(mode, guard, effect_tools(effects, seconds=0.3), saver, store)
            config = _config()
            await graph.ainvoke({"messages": [HumanMessage("email Ann")]}, config)
            assert sends(effects) == 0  # stopped before the tools node
            results = await asyncio.gather(
                *(graph.ainvoke(None, config, durability="sync") for _ in range(WORKERS))
            )
            return [_outcome(result) for result in results]

    outcomes = asyncio.run(scenario())
    assert sends(effects) == 1
    assert outcomes.count("ran") == 1, outcomes
    assert set(outcomes) <= {"ran", "replayed", "idle"}, outcomes
    assert "replayed" in outcomes, f"no worker overlapped the running one: {outcomes}"


def test_a_worker_still_running_after_the_wait_is_reported_in_flight(tmp_path):
    effects = tmp_path / "effects.txt"
    guard = ReplayGuard(POLICY.model_copy(update={"in_flight_wait": 0.2}), store=InMemoryStore())
    graph = claim_graph("wrap", guard, effect_tools(effects, seconds=1.5), InMemorySaver())
    config = _config()

    async def scenario() -> list[Any]:
        await graph.ainvoke({"messages": [HumanMessage("email Ann")]}, config)
        return await asyncio.gather(
            graph.ainvoke(None, config, durability="sync"),
            graph.ainvoke(None, config, durability="sync"),
            return_exceptions=True,
        )

    first, second = asyncio.run(scenario())
    errors = [r for r in (first, second) if isinstance(r, BaseException)]
    assert len(errors) == 1
    assert isinstance(errors[0], ReplayInFlightError)
    assert errors[0].facts["tool"] == "send_email"
    assert "another worker" in str(errors[0])
    assert sends(effects) == 1
    # Once the first worker is done, resuming again replays its outcome.
    again = graph.invoke(None, config, durability="sync")
    assert sends(effects) == 1
    assert again["messages"][-1].content == "All done."


def _setup_thread(mode: str, kind: str, target: str, store_target: str, effects: Path) -> str:
    """Run the first step in this process: the thread stops before its tools node."""
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.store.sqlite import SqliteStore

        saver = SqliteSaver(sqlite3.connect(target, check_same_thread=False))
        store = SqliteStore(
            sqlite3.connect(store_target, check_same_thread=False, isolation_level=None)
        )
        saver.setup()
        store.setup()
        thread = _first_step(mode, saver, store, effects)
        saver.conn.close()
        store.conn.close()
        return thread
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    with (
        PostgresSaver.from_conn_string(target) as saver,
        PostgresStore.from_conn_string(store_target) as store,
    ):
        saver.setup()
        store.setup()
        return _first_step(mode, saver, store, effects)


def _first_step(mode: str, saver: Any, store: Any, effects: Path) -> str:
    guard = ReplayGuard(POLICY, store=store)
    graph = claim_graph(mode, guard, effect_tools(effects), saver, store)
    config = _config()
    graph.invoke({"messages": [HumanMessage("email Ann")]}, config)
    return str(config["configurable"]["thread_id"])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_worker_processes_resuming_one_thread_send_exactly_once(kind, mode, tmp_path, request):
    if kind == "postgres":
        target = store_target = request.getfixturevalue("pg_uri")
    else:
        target, store_target = str(tmp_path / "cp.db"), str(tmp_path / "store.db")
    effects = tmp_path / "effects.txt"
    thread = _setup_thread(mode, kind, target, store_target, effects)
    barrier = tmp_path / "ready"
    barrier.mkdir()
    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(ROOT)}
    script = str(Path(__file__).with_name("proc_claim.py"))
    args = [mode, kind, target, store_target, thread, str(effects), str(barrier), str(WORKERS)]
    workers = [
        warm_children.popen(
            [sys.executable, script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        for _ in range(WORKERS)
    ]
    outcomes = []
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err.decode()[-2000:]
        outcomes.append(json.loads(out.decode().strip().splitlines()[-1])["outcome"])
    assert sends(effects) == 1
    assert outcomes.count("ran") == 1, outcomes
    assert set(outcomes) <= {"ran", "replayed", "idle"}, outcomes
    assert "replayed" in outcomes, f"no worker overlapped the running one: {outcomes}"
