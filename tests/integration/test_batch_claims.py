"""A batch of parallel unsafe calls is claimed in one transaction (issue 36 item 3).

ToolNode runs each call of an AIMessage in a thread of its own; their claims are written
together (`storage.batch_claims`): one immediate transaction on SQLite, one locking round trip
on PostgreSQL, instead of one per call. The ledger's rules hold: every call is claimed before
its body runs, a call answered without running is never claimed, a crash after the claim
leaves every row of the batch "outcome unknown", and workers resuming one batch at once run
each call once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.types import Command

from langgraph_replay_guard import ReplayGuardWarning
from langgraph_replay_guard.storage.ledger_io import ReplayLedger
from tests import warm_children

from .batch_graphs import SENDS, backend, batch_graph, batch_tools, effects_of, fan_out_agent

KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(Path(__file__).with_name("proc_batch.py"))


def _counting_cursors(conn: Any) -> list[str]:
    """Note every statement a psycopg connection's cursors send (test-only), and return them."""
    import psycopg

    statements: list[str] = []

    class CountingCursor(psycopg.Cursor):  # type: ignore[type-arg]
        def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
            as_string = getattr(query, "as_string", None)
            statements.append(as_string(self.connection) if as_string else str(query))
            return super().execute(query, *args, **kwargs)

    conn.cursor_factory = CountingCursor
    return statements


def _target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue("pg_uri") if kind == "postgres" else str(tmp_path)


def _claims(kind: str, store: Any) -> Any:
    """A function returning how many claim transactions the store ran since this call."""
    if kind == "sqlite":
        statements: list[str] = []
        store.conn.set_trace_callback(statements.append)
        return lambda: sum(s.startswith("BEGIN IMMEDIATE") for s in statements)
    statements = _counting_cursors(store.conn)
    # One claim transaction takes its rows' advisory locks in one round trip.
    return lambda: sum("pg_advisory_xact_lock" in s for s in statements)


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}


def _rows(store: Any, config: dict[str, Any]) -> list[Any]:
    rows = ReplayLedger(store).rows(config["configurable"]["thread_id"])
    return [row for row in rows if row.tool]


@pytest.mark.usefixtures("patient_batch_window")
@pytest.mark.parametrize("graph_of", [batch_graph, fan_out_agent], ids=["toolnode", "send"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_batch_of_four_unsafe_calls_is_claimed_in_one_transaction(
    kind, graph_of, tmp_path, request
):
    effects = tmp_path / "effects.txt"
    with backend(kind, _target(kind, tmp_path, request)) as (saver, store):
        graph = graph_of(batch_tools(effects), saver, store)
        claims = _claims(kind, store)
        config = _config()
        graph.invoke({"messages": [HumanMessage("email them")]}, config, durability="sync")
        assert claims() == 1  # 4 before: one per call
        assert sorted(effects_of(effects)) == sorted(args["to"] for _, args in SENDS)
        rows = _rows(store, config)
        assert len(rows) == 4
        assert {row.status for row in rows} == {"completed"}


@pytest.mark.usefixtures("patient_batch_window")
@pytest.mark.parametrize("kind", KINDS)
def test_a_duplicate_in_the_batch_is_answered_and_only_the_new_calls_are_claimed(
    kind, tmp_path, request
):
    effects = tmp_path / "effects.txt"
    lookup = ("lookup", {"q": "ann"})
    steps = [[lookup], [lookup, *SENDS[:3]], "done"]
    with backend(kind, _target(kind, tmp_path, request)) as (saver, store):
        graph = batch_graph(batch_tools(effects), saver, store, steps=steps)
        claims = _claims(kind, store)
        config = _config()
        out = graph.invoke({"messages": [HumanMessage("email them")]}, config, durability="sync")
        assert claims() == 1
        assert effects_of(effects, "lookup") == ["ann"]  # the duplicate was answered
        assert len(effects_of(effects)) == 3
        answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        assert len(answers) == 5
        rows = _rows(store, config)
        assert sorted(row.tool for row in rows) == [
            "lookup",
            "send_email",
            "send_email",
            "send_email",
        ]


@pytest.mark.parametrize("kind", KINDS)
def test_a_kill_after_the_batch_claim_leaves_every_call_unknown(kind, tmp_path, request):
    target = _target(kind, tmp_path, request)
    effects, started = tmp_path / "effects.txt", tmp_path / "started"
    thread = f"t-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(ROOT)}
    args = [kind, target, thread, str(effects), str(started), "60"]
    child = warm_children.popen([sys.executable, SCRIPT, *args], env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not started.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    child.send_signal(signal.SIGKILL)  # the first body started: no outcome recorded yet
    assert child.wait(timeout=30) == -signal.SIGKILL
    config = {"configurable": {"thread_id": thread}}
    with backend(kind, target) as (saver, store):
        rows = _rows(store, config)
        assert len(rows) == 4, rows  # all four claimed before the first body started
        assert all(row.outcome_unknown for row in rows)
        graph = batch_graph(batch_tools(effects), saver, store)
        out = graph.invoke(None, config, durability="sync")
        unknown: list[str] = []
        for _ in range(8):  # each resume answers one more call's unknown outcome
            asked = out.get("__interrupt__", ())
            if not asked:
                break
            unknown += [i.value["tool_call_id"] for i in asked]
            failed = {"outcome": "failed", "result": "not sent"}
            resume = Command(resume={i.id: failed for i in asked})
            out = graph.invoke(resume, config, durability="sync")
        # Each interrupt was answered "failed" (LangGraph hands a node's resume values to its
        # interrupts in call order, so which call gets which is the threads' order): every
        # row ends resolved from its unknown outcome, none ran.
        assert unknown
        assert set(unknown) <= {row.tool_call_id for row in rows}
        assert {row.status for row in _rows(store, config)} == {"failed"}
    assert effects_of(effects) == []  # none ran again


@pytest.mark.parametrize("kind", KINDS)
def test_eight_workers_resuming_one_batch_run_each_call_once(kind, tmp_path, request):
    target = _target(kind, tmp_path, request)
    effects, started = tmp_path / "effects.txt", tmp_path / "started"
    config = _config()
    with backend(kind, target) as (saver, store):
        graph = batch_graph(batch_tools(effects), saver, store, interrupt_before=["tools"])
        graph.invoke({"messages": [HumanMessage("email them")]}, config, durability="sync")
    barrier = tmp_path / "ready"
    barrier.mkdir()
    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(ROOT)}
    thread = config["configurable"]["thread_id"]
    args = [kind, target, thread, str(effects), str(started), "0.5", str(barrier), "8"]
    workers = [
        warm_children.popen(
            [sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        for _ in range(8)
    ]
    results = []
    for worker in workers:
        out, err = worker.communicate(timeout=180)
        assert worker.returncode == 0, err.decode()[-2000:]
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    assert sorted(effects_of(effects)) == sorted(args["to"] for _, args in SENDS)
    assert sum(r["ran"] for r in results) == 4, results
    assert {r["outcome"] for r in results} == {"ok"}, results


@pytest.mark.usefixtures("patient_batch_window")
@pytest.mark.parametrize("kind", KINDS)
def test_an_async_run_claims_its_batch_in_one_transaction(kind, tmp_path, request):
    from langgraph.checkpoint.memory import InMemorySaver

    effects = tmp_path / "effects.txt"
    with backend(kind, _target(kind, tmp_path, request)) as (_saver, store):
        graph = batch_graph(batch_tools(effects), InMemorySaver(), store)
        claims = _claims(kind, store)
        config = _config()
        with pytest.warns(ReplayGuardWarning, match="no durable checkpointer"):
            asyncio.run(
                graph.ainvoke({"messages": [HumanMessage("go")]}, config, durability="sync")
            )
        assert claims() == 1
        assert len(effects_of(effects)) == 4


def test_compare_and_set_many_decides_each_row_as_if_alone_in_order(any_store):
    from langgraph_replay_guard.replay.ledger import Update
    from langgraph_replay_guard.storage import store_cas

    ns = ("replay_guard", "ledger", f"t-{uuid.uuid4().hex[:8]}")
    store_cas.compare_and_set(any_store, Update(ns, "b", {"rev": "r1", "v": 1}, False, None))
    ops = [
        Update(ns, "a", {"rev": "a1"}, False, None, also=((ns, "idx", {"key": "a"}),)),
        Update(ns, "b", {"rev": "r2"}, True, "r0"),  # an old revision: not written
        Update(ns, "a", {"rev": "a2"}, False, None),  # absent no more: the first wrote it
        Update(ns, "b", {"rev": "r2", "v": 2}, True, "r1"),
    ]
    answers = store_cas.compare_and_set_many(any_store, ops)
    assert answers == [
        (True, {"rev": "a1"}),
        (False, {"rev": "r1", "v": 1}),
        (False, {"rev": "a1"}),
        (True, {"rev": "r2", "v": 2}),
    ]
    got = {key: any_store.get(ns, key) for key in ("a", "b", "idx")}
    assert {key: item.value for key, item in got.items() if item} == {
        "a": {"rev": "a1"},
        "b": {"rev": "r2", "v": 2},
        "idx": {"key": "a"},
    }


def _sqlite(tmp_path: Path) -> Any:
    from langgraph.store.sqlite import SqliteStore

    conn = sqlite3.connect(tmp_path / "store.db", check_same_thread=False, isolation_level=None)
    store = SqliteStore(conn)
    store.setup()
    return store


def test_a_sibling_that_never_arrives_costs_at_most_the_window(tmp_path):
    from langgraph_replay_guard.replay.ledger import Update
    from langgraph_replay_guard.storage import batch_claims

    store = _sqlite(tmp_path)
    ns = ("replay_guard", "ledger", "t")
    member = batch_claims.join(store, (ns, "ai-1"), 3)
    assert member is not None
    start = time.monotonic()
    assert member.claim(store, Update(ns, "a", {"rev": "1"}, False, None)) == (True, {"rev": "1"})
    waited = time.monotonic() - start
    member.leave()
    assert batch_claims.WINDOW * 0.9 <= waited < batch_claims.WINDOW + 2.0
    assert store.get(ns, "a").value == {"rev": "1"}


def test_an_error_writing_a_round_reaches_every_claim_of_it(tmp_path):
    import threading

    from langgraph_replay_guard.replay.ledger import Update
    from langgraph_replay_guard.storage import batch_claims, store_cas

    store = _sqlite(tmp_path)
    store_cas.prepare(store)
    store.conn.close()  # every write now fails
    ns = ("replay_guard", "ledger", "t")
    errors: list[BaseException] = []

    def claim(key: str) -> None:
        member = batch_claims.join(store, (ns, "ai-2"), 2)
        assert member is not None
        try:
            member.claim(store, Update(ns, key, {"rev": "1"}, False, None))
        except sqlite3.ProgrammingError as exc:
            errors.append(exc)
        finally:
            member.leave()

    threads = [threading.Thread(target=claim, args=(key,)) for key in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(errors) == 2


@pytest.mark.postgres
def test_compare_and_set_many_in_pipeline_mode_takes_the_transaction_path(pg_uri):
    from langgraph.store.postgres import PostgresStore

    from langgraph_replay_guard.replay.ledger import Update
    from langgraph_replay_guard.storage import store_cas

    with PostgresStore.from_conn_string(pg_uri) as plain:
        plain.setup()  # its migrations cannot run in a pipeline
    with PostgresStore.from_conn_string(pg_uri, pipeline=True) as store:
        ns = ("replay_guard", "ledger", f"t-{uuid.uuid4().hex[:8]}")
        ops = [Update(ns, key, {"rev": key}, False, None) for key in ("b", "a", "b")]
        answers = store_cas.compare_and_set_many(store, ops)
        assert answers == [(True, {"rev": "b"}), (True, {"rev": "a"}), (False, {"rev": "b"})]
        assert store.get(ns, "a").value == {"rev": "a"}
