"""Attacks on issue 36's PostgreSQL ledger paths: the wake-up, 2-round-trip claims, plain reads."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.store.base import BaseStore

from langgraph_replay_guard import ReplayGuard

from .claim_graphs import POLICY, claim_graph, effect_tools, sends

pytestmark = pytest.mark.postgres


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}


def _outcome(result: Any) -> str:
    if isinstance(result, BaseException):
        return type(result).__name__
    answers = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    meta = answers[-1].response_metadata.get("replay_guard")
    return "replayed" if meta == "replayed" else "ran"


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_fifty_gathered_async_waiters_answer_soon_after_the_holder(pg_uri, tmp_path, kind):
    # Held on 39a49a7 (0.8 s for 50, sync and async stores): kept as a guard.
    effects = tmp_path / "effects.txt"
    hold = 0.3

    async def scenario() -> tuple[list[str], float]:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from langgraph.store.postgres import PostgresStore
        from langgraph.store.postgres.aio import AsyncPostgresStore

        async with AsyncPostgresSaver.from_conn_string(pg_uri) as saver:
            await saver.setup()
            if kind == "async":
                cm: Any = AsyncPostgresStore.from_conn_string(pg_uri)
                store = await cm.__aenter__()
                await store.setup()
            else:
                cm = PostgresStore.from_conn_string(pg_uri)
                store = cm.__enter__()
                store.setup()
            try:
                guard = ReplayGuard(POLICY, store=store)
                graph = claim_graph("wrap", guard, effect_tools(effects, seconds=hold), saver)
                config = _config()
                await graph.ainvoke({"messages": [HumanMessage("email Ann")]}, config)
                started = time.monotonic()
                results = await asyncio.gather(
                    *(graph.ainvoke(None, config, durability="sync") for _ in range(50)),
                    return_exceptions=True,
                )
                took = time.monotonic() - started
            finally:
                if kind == "async":
                    await cm.__aexit__(None, None, None)
                else:
                    cm.__exit__(None, None, None)
            return [_outcome(r) for r in results], took

    # The async waits run `pause` in threads of the loop's default executor (6 on 2 cores),
    # which the holder's sync tool also needs: they must not starve it.
    outcomes, took = asyncio.run(scenario())
    assert sends(effects) == 1
    assert outcomes.count("ran") == 1, outcomes
    assert took < 10.0, took  # (0.8 s here alone; a loose bound on a shared machine)


def _nul_tools(effects: Path) -> list[Any]:
    from langchain_core.tools import tool

    @tool
    def send_email(to: str) -> str:
        """Send an email (unsafe)."""
        with effects.open("a") as file:
            file.write(f"{to!r}\n")
        return "sent\x00 to " + to

    return [send_email]


def test_a_nul_in_the_result_is_recorded_and_replayed(pg_uri, tmp_path):
    # Held on 39a49a7: jsonb refuses \u0000, the result codec escapes it before the upsert.
    from .wake_graphs import pool_backend

    effects = tmp_path / "effects.txt"
    with pool_backend(pg_uri) as (saver, store):
        graph = claim_graph("wrap", ReplayGuard(POLICY, store=store), _nul_tools(effects), saver)
        config = _config()
        graph.invoke({"messages": [HumanMessage("email Ann")]}, config)
        result = graph.invoke(None, config, durability="sync")
        assert [m.content for m in result["messages"] if isinstance(m, ToolMessage)] == [
            "sent\x00 to ann@example.com"
        ]
        (row,) = _ledger_rows(pg_uri, config["configurable"]["thread_id"])
        assert row["status"] == "completed"
    assert sends(effects) == 1


def test_an_outcome_on_a_pipelined_store_is_committed_when_recorded(pg_uri, tmp_path):
    # PostgresStore(pipeline=True): a statement sent in pipeline mode commits at the
    # pipeline's next sync, not when it returns. The holder's outcome must be visible (and
    # durable) once its run returned, though its process lives on with the store open.
    import signal

    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    from tests import warm_children

    effects, done = tmp_path / "effects.txt", tmp_path / "done"
    with (
        PostgresSaver.from_conn_string(pg_uri) as saver,
        PostgresStore.from_conn_string(pg_uri) as store,
    ):
        saver.setup()
        store.setup()
        graph = claim_graph("wrap", ReplayGuard(POLICY, store=store), effect_tools(effects), saver)
        config = _config()
        graph.invoke({"messages": [HumanMessage("email Ann")]}, config)
        script = str(Path(__file__).with_name("proc_pipeline_holder.py"))
        args = [pg_uri, config["configurable"]["thread_id"], str(effects), str(done)]
        holder = warm_children.popen([sys.executable, script, *args], stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while not done.exists():
                assert holder.poll() is None, holder.communicate()[1].decode()[-2000:]
                assert time.monotonic() < deadline, "the holder never finished its run"
                time.sleep(0.02)
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=30)
        assert sends(effects) == 1
        # The holder recorded its outcome before it stalled: the row holds it, not a claim.
        (row,) = _ledger_rows(pg_uri, config["configurable"]["thread_id"])
        assert row["status"] == "completed", row
        assert "Email sent to ann@example.com" in json.dumps(row["result"])
        # Resuming replays it (no second send, no "outcome unknown").
        graph = claim_graph("wrap", ReplayGuard(POLICY, store=store), effect_tools(effects), saver)
        result = graph.invoke(None, config, durability="sync")
        answer = [m for m in result["messages"] if isinstance(m, ToolMessage)][-1]
        assert answer.content == "Email sent to ann@example.com"
        assert sends(effects) == 1


def _ledger_rows(uri: str, thread: str) -> list[dict[str, Any]]:
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT value FROM store WHERE prefix = %s", (f"replay_guard.ledger.{thread}",)
        ).fetchall()
    return [row[0] for row in rows]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_row_written_on_a_pipelined_store_is_seen_by_another_connection(pg_uri, kind):
    # The outcome's statement itself: committed (and its waiters notified) when it returns.
    from langgraph.store.postgres import PostgresStore
    from langgraph.store.postgres.aio import AsyncPostgresStore

    from langgraph_replay_guard.storage import store_cas

    ns = ("replay_guard", "ledger", f"t-{uuid.uuid4().hex[:8]}")
    with PostgresStore.from_conn_string(pg_uri) as plain:
        plain.setup()  # (its CREATE INDEX CONCURRENTLY cannot run in a pipeline)

    async def write_async() -> None:
        async with AsyncPostgresStore.from_conn_string(pg_uri, pipeline=True) as store:
            assert await store_cas.awrite_rows(store, [(ns, "k", {"status": "completed"})])
            assert _ledger_rows(pg_uri, ns[-1]) == [{"status": "completed"}]

    if kind == "async":
        asyncio.run(write_async())
    else:
        with PostgresStore.from_conn_string(pg_uri, pipeline=True) as store:
            assert store_cas.write_rows(store, [(ns, "k", {"status": "completed"})])
            assert _ledger_rows(pg_uri, ns[-1]) == [{"status": "completed"}]
            assert store_cas.read_rows(store, [(ns, "k")]) == [{"status": "completed"}]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_read_of_ten_thousand_rows_answers_as_the_store_does(pg_uri, kind):
    # A ToolNode batch of many calls reads their rows in one Read: a UNION ALL of 10,000
    # point lookups exceeded the server's stack depth (StatementTooComplex) on 39a49a7.
    from langgraph.store.base import GetOp
    from langgraph.store.postgres import PostgresStore
    from langgraph.store.postgres.aio import AsyncPostgresStore

    from langgraph_replay_guard.storage import store_cas

    ns = ("replay_guard", "ledger", f"t-{uuid.uuid4().hex[:8]}")
    keys = [(ns, f"k{i}") for i in range(10_000)]
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        assert store_cas.write_rows(store, [(ns, f"k{i}", {"i": i}) for i in range(0, 10_000, 3)])
        expected = [
            None if item is None else item.value
            for item in store.batch([GetOp(n, k) for n, k in keys])
        ]
        if kind == "sync":
            assert store_cas.read_rows(store, keys) == expected

    async def read_async() -> list[Any] | None:
        async with AsyncPostgresStore.from_conn_string(pg_uri) as astore:
            return await store_cas.aread_rows(astore, keys)

    if kind == "async":
        assert asyncio.run(read_async()) == expected
    assert expected[3] == {"i": 3}
    assert expected[4] is None


def test_a_child_forked_while_a_listen_connection_opens_can_wait(pg_uri, tmp_path):
    # A worker forks (a process pool, a pre-fork server) while another of its threads opens
    # a LISTEN connection: that thread holds the module's lock for its connect (up to 5 s).
    # The child inherits the lock held, by a thread it does not have: its first wait must
    # not block on it for good.
    import socket
    import threading

    from langgraph.store.postgres import PostgresStore
    from psycopg_pool import ConnectionPool

    from langgraph_replay_guard.replay.ledger import Sleep
    from langgraph_replay_guard.storage import wake

    with socket.socket() as silent:  # accepts a connection, never answers: a slow connect
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        conninfo = f"host=127.0.0.1 port={port} dbname=x"
        pool = ConnectionPool(conninfo, kwargs={"connect_timeout": 2}, open=False)
        slow = PostgresStore(pool)  # type: ignore[arg-type]
        opening = threading.Thread(target=wake._listener, args=(slow,), daemon=True)
        opening.start()
        deadline = time.monotonic() + 10
        while not wake._guard.locked():
            assert time.monotonic() < deadline, "the listener never started to connect"
            time.sleep(0.005)
        pid = os.fork()
        if pid == 0:  # the child: its own store, one short wait on a row nobody writes
            code = 1
            try:
                with PostgresStore.from_conn_string(pg_uri) as store:
                    op = Sleep(0.05, wake=(("replay_guard", "ledger", "t-fork"), "k"))
                    wake.pause(store, op, time.monotonic())
                code = 0
            finally:
                os._exit(code)
        deadline = time.monotonic() + 15
        status = None
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.02)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = None
        opening.join(timeout=10)
    assert status is not None
    assert os.waitstatus_to_exitcode(status) == 0, "the forked child's wait never returned"


def test_fifty_waiting_threads_replay_the_one_run(pg_uri, tmp_path):
    # Held on 39a49a7: 50 threads on one pooled store (4 connections), one LISTEN connection.
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from .wake_graphs import pool_backend

    effects = tmp_path / "effects.txt"
    with pool_backend(pg_uri) as (saver, store):
        guard = ReplayGuard(POLICY, store=store)
        # The holder's call lasts 2 s and the 50 threads start together (a barrier): on a
        # loaded machine a thread that started after the run ended would read the finished
        # thread, whose answer is the holder's own, and be counted as a second "ran".
        graph = claim_graph("wrap", guard, effect_tools(effects, seconds=2.0), saver)
        config = _config()
        graph.invoke({"messages": [HumanMessage("email Ann")]}, config)
        barrier = threading.Barrier(50)

        def resume() -> Any:
            barrier.wait()
            return graph.invoke(None, config, durability="sync")

        started = time.monotonic()
        with ThreadPoolExecutor(50) as pool:
            futures = [pool.submit(resume) for _ in range(50)]
            outcomes = [_outcome(f.result()) for f in futures]
        took = time.monotonic() - started
    assert sends(effects) == 1
    assert outcomes.count("ran") == 1, outcomes
    assert took < 10.0, took


@pytest.mark.parametrize("damaged", ["not json", None, 42])
def test_a_damaged_row_is_an_unknown_outcome_not_a_crash_or_a_new_call(pg_uri, tmp_path, damaged):
    # A call's row holding a JSON string or JSON null (a hand edit, a bad migration): read
    # and claimed as the damaged row it is. On 39a49a7 the string raised JSONDecodeError
    # and null read as no row at all: the unsafe call ran (42 held: unknown).
    import psycopg
    from langchain_core.messages import AIMessage
    from psycopg.types.json import Jsonb

    from langgraph_replay_guard import ReplayUnsafeError

    from .wake_graphs import pool_backend

    effects = tmp_path / "effects.txt"
    with pool_backend(pg_uri) as (saver, store):
        guard = ReplayGuard(POLICY, store=store)
        graph = claim_graph("wrap", guard, effect_tools(effects, seconds=0), saver)
        config = _config()
        first = graph.invoke({"messages": [HumanMessage("email Ann")]}, config)
        ai = [m for m in first["messages"] if isinstance(m, AIMessage)][-1]
        thread = config["configurable"]["thread_id"]
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO store (prefix, key, value) VALUES (%s, %s, %s)",
                (
                    f"replay_guard.ledger.{thread}",
                    f"tools/{ai.id}/{ai.tool_calls[0]['id']}",
                    Jsonb(damaged),
                ),
            )
        with pytest.raises(ReplayUnsafeError, match="outcome is unknown"):
            graph.invoke(None, config, durability="sync")
    assert sends(effects) == 0


class _LateFirstRead(BaseStore):
    """Wraps a store: its first read answers only once `effects` has a line (and then some).

    It stands for a waiter thread that read a claim and lost the CPU until the holder, in
    this process, had written its outcome and released its claim.
    """

    def __init__(self, store: Any, effects: Path) -> None:
        self._store = store  # the claims go to it directly
        self._effects = effects
        self._first = True

    def batch(self, ops: Any) -> Any:
        results = self._store.batch(list(ops))
        if self._first:
            self._first = False
            deadline = time.monotonic() + 30
            while not sends(self._effects) and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)  # the holder writes its outcome and releases its claim meanwhile
        return results

    async def abatch(self, ops: Any) -> Any:
        return self.batch(ops)


def test_a_holder_of_this_process_finishing_during_a_read_is_replayed_not_lost(pg_uri, tmp_path):
    # Two threads of one worker on one call: the waiter reads the claim, the holder writes
    # its outcome and releases the claim, then the waiter checks the holder: gone. It must
    # read the row again (the outcome is there) before calling the outcome unknown. On
    # 39a49a7 it raised ReplayUnsafeError (50 threads on one call hit it under load).
    import threading

    from .wake_graphs import pool_backend

    effects = tmp_path / "effects.txt"
    with pool_backend(pg_uri) as (saver, store):
        holder = claim_graph(
            "wrap", ReplayGuard(POLICY, store=store), effect_tools(effects, seconds=0.5), saver
        )
        config = _config()
        holder.invoke({"messages": [HumanMessage("email Ann")]}, config)
        late = _LateFirstRead(store, effects)
        waiter = claim_graph("wrap", ReplayGuard(POLICY, store=late), effect_tools(effects), saver)
        done: list[Any] = []
        thread = threading.Thread(
            target=lambda: done.append(holder.invoke(None, config, durability="sync"))
        )
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while not _ledger_rows(pg_uri, config["configurable"]["thread_id"]):
                assert time.monotonic() < deadline, "the holder never claimed the call"
                time.sleep(0.01)
            result = waiter.invoke(None, config, durability="sync")
        finally:
            thread.join(timeout=60)
    assert _outcome(done[0]) == "ran"
    assert _outcome(result) == "replayed"
    assert sends(effects) == 1
