"""Attacks on issue 36's ledger paths: a read that claims, a batch's one statement, async stores."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from langgraph_replay_guard import ReplayGuard

from .batch_graphs import SENDS, batch_graph, batch_tools, effects_of, fan_out_agent
from .claim_graphs import POLICY, claim_graph, effect_tools, sends
from .replay_graphs import ask_once

pytestmark = pytest.mark.postgres


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}


def _committed_rows(uri: str) -> list[tuple[str, str, str]]:
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT prefix, key, value->>'status' FROM store WHERE prefix LIKE '%.ledger.%'"
        ).fetchall()
    return [(str(p), str(k), str(s)) for p, k, s in rows]


@pytest.mark.parametrize("streak", [0, 2], ids=["read-claims", "shipped"])
@pytest.mark.parametrize(
    ("autocommit", "pipeline"),
    [(False, False), (True, False), (True, True)],
    ids=["transactions", "autocommit", "autocommit-pipeline"],
)
def test_a_store_on_any_connection_commits_claims_and_outcomes(
    pg_uri, tmp_path, monkeypatch, autocommit, pipeline, streak
):
    # A non-autocommit connection opens a transaction at its first statement (a read) and
    # keeps it open: the claim's `conn.transaction()` was then only a savepoint, never
    # committed (13a8829): no other worker saw the claim or the outcome, the claim's
    # advisory lock stayed held, and the rows were gone when the process ended. (A
    # non-autocommit connection in pipeline mode is not covered: the store's own writes
    # are never committed there either.)
    import psycopg
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.postgres import PostgresStore
    from psycopg.rows import dict_row

    from langgraph_replay_guard.storage import ledger_io

    monkeypatch.setattr(ledger_io.MISSES, "STREAK", streak)
    with psycopg.connect(pg_uri, autocommit=True) as setup:
        PostgresStore(setup).setup()
    effects = tmp_path / "effects.txt"
    conn = psycopg.connect(pg_uri, autocommit=autocommit, prepare_threshold=0, row_factory=dict_row)
    piped = conn.pipeline() if pipeline else None
    pipe = piped.__enter__() if piped is not None else None
    try:
        guard = ReplayGuard(POLICY, store=PostgresStore(conn, pipe=pipe))
        graph = claim_graph("wrap", guard, effect_tools(effects, seconds=0), InMemorySaver())
        for _ in range(3):  # three threads: the shipped streak's third claims with its read
            config = _config()
            graph.invoke({"messages": [HumanMessage("email Ann")]}, config)
            graph.invoke(None, config)
        assert sends(effects) == 3
        rows = _committed_rows(pg_uri)
        assert [s for _, _, s in rows if s != "None"] == ["completed"] * 3, rows
    finally:
        if piped is not None:
            piped.__exit__(None, None, None)
        conn.close()


def _waiting_advisory_locks(admin: Any) -> int:
    row = admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    ).fetchone()
    return int(row[0])


def _claiming_together(
    store: Any, batch: Any, ops: dict[str, Any]
) -> tuple[list[threading.Thread], dict[str, Any]]:
    """One started thread per op, each claiming it as a member of `batch`.

    Returns the threads and the answers they fill in, by key: `member.claim`'s answer, or
    the exception it raised.
    """
    from langgraph_replay_guard.storage import batch_claims

    answers: dict[str, Any] = {}

    def claim(key: str) -> None:
        member = batch_claims.join(store, batch, len(ops))
        assert member is not None
        try:
            answers[key] = member.claim(store, ops[key])
        except Exception as exc:
            answers[key] = exc
        finally:
            member.leave()

    threads = [threading.Thread(target=claim, args=(key,)) for key in ops]
    for thread in threads:
        thread.start()
    return threads, answers


def _until(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.usefixtures("patient_batch_window")
def test_a_batch_whose_second_statement_fails_answers_the_claims_it_committed(pg_uri):
    # A batch of two new claims: `a`'s row is absent, `b`'s appeared after its read (another
    # worker's claim). The one statement writes `a` and finds `b`; `b` then takes the locked
    # path, in a second transaction, which fails (here its lock wait times out). `a`'s claim
    # is committed: its call must be answered so (it runs), not handed the error (then its
    # row reads as a dead holder's claim: an "outcome unknown" that never ran).
    import psycopg
    from langgraph.store.postgres import PostgresStore

    from langgraph_replay_guard.replay.ledger import Update
    from langgraph_replay_guard.storage import store_cas

    ns = ("replay_guard", "ledger", f"t-{uuid.uuid4().hex[:8]}")
    lock = f"{'.'.join(ns)}/b"
    take = "SELECT pg_advisory_lock(hashtextextended(%s, 0))"
    with (
        PostgresStore.from_conn_string(pg_uri) as store,
        psycopg.connect(pg_uri, autocommit=True) as admin,
        psycopg.connect(pg_uri, autocommit=True) as first,
        psycopg.connect(pg_uri, autocommit=True) as second,
    ):
        store.setup()
        store_cas.compare_and_set(store, Update(ns, "b", {"rev": "b1"}, False, None))
        store.conn.execute("SET lock_timeout = '2s'")
        first.execute(take, (lock,))  # `b`'s lock is busy: the batch's statement waits for it
        ops = {key: Update(ns, key, {"rev": f"{key}2"}, False, None) for key in ("a", "b")}
        claims, answers = _claiming_together(store, (ns, "ai-half"), ops)
        _until(lambda: _waiting_advisory_locks(admin) == 1)
        # A second worker queues for `b`'s lock behind the batch: it gets it as the batch's
        # statement commits, so the batch's second transaction waits for it, and times out.
        later = threading.Thread(target=lambda: second.execute(take, (lock,)))
        later.start()
        _until(lambda: _waiting_advisory_locks(admin) == 2)
        first.execute("SELECT pg_advisory_unlock_all()")
        for thread in claims:
            thread.join(timeout=30)
        second.execute("SELECT pg_advisory_unlock_all()")
        later.join(timeout=10)
        _nothing_half_written(answers, store.get(ns, "a"), store.get(ns, "b"))


def _nothing_half_written(answers: dict[str, Any], row_a: Any, row_b: Any) -> None:
    """b's row was found and never overwritten; a's claim is answered as it was written."""
    import psycopg

    assert isinstance(answers["b"], psycopg.errors.LockNotAvailable), answers
    assert row_b.value == {"rev": "b1"}  # the row found is never overwritten
    # Nothing half-written: a claim committed is answered as written; one answered an error
    # was not written.
    if isinstance(answers["a"], BaseException):
        assert row_a is None, f"a's claim was committed, its call told {answers['a']!r}"
    else:
        assert answers["a"] == (True, {"rev": "a2"})
        assert row_a is not None
        assert row_a.value == {"rev": "a2"}


SIXTEEN = [("send_email", {"to": f"u{i}@example.com"}) for i in range(16)]


async def _agathered(
    uri: str,
    effects: Path,
    calls: list[Any],
    threads: int,
    same: bool,
    pooled: bool = False,
    send: bool = False,
) -> float:
    """`threads` graphs gathered on one `AsyncPostgresStore`, each asking `calls` at once.

    `same`: the graphs resume one thread stopped before its tools node (one batch, raced).
    `pooled`: the store's connections come from a pool of two. `send`: `create_agent`, each
    call a `Send` (the four `SENDS`).
    """
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.store.postgres.aio import AsyncPostgresStore

    async with (
        AsyncPostgresSaver.from_conn_string(uri) as saver,
        AsyncPostgresStore.from_conn_string(
            uri, pool_config={"min_size": 1, "max_size": 2} if pooled else None
        ) as store,
    ):
        await saver.setup()
        await store.setup()
        tools = batch_tools(effects, seconds=0.2)
        kw = {"interrupt_before": ["tools"]} if same else {}
        if send:
            graph = fan_out_agent(tools, saver, store)
        else:
            graph = batch_graph(tools, saver, store, steps=[ask_once(calls)] * 10, **kw)
        go = {"messages": [HumanMessage("go")]}
        if same:
            config = _config()
            await graph.ainvoke(go, config, durability="sync")
            runs = [graph.ainvoke(None, config, durability="sync") for _ in range(threads)]
        else:
            runs = [graph.ainvoke(go, _config(), durability="sync") for _ in range(threads)]
        started = time.monotonic()
        # A deadlock (the loop waiting on a batch's writer thread that waits on the loop, a
        # pool too small for the batch) fails here instead of hanging the suite.
        await asyncio.wait_for(asyncio.gather(*runs), timeout=120)
        return time.monotonic() - started


@pytest.mark.parametrize(
    ("calls", "threads", "same", "pooled", "send"),
    [
        (SENDS, 3, False, False, False),
        (SIXTEEN, 1, False, False, False),
        (SIXTEEN, 2, False, False, False),
        (SENDS, 4, True, False, False),
        (SIXTEEN, 2, False, True, False),
        (SENDS, 3, False, False, True),
    ],
    ids=[
        "three-graphs-of-four",
        "sixteen-over-a-pool-of-six",
        "two-graphs-of-sixteen",
        "raced",
        "two-graphs-of-sixteen-on-two-connections",
        "three-send-fan-outs-of-four",
    ],
)
def test_gathered_async_batches_on_one_async_store_run_each_call_once(
    pg_uri, tmp_path, calls, threads, same, pooled, send
):
    # Each batch's writer thread runs its round on the store's event loop (`_on_loop`),
    # while the loop's default executor (6 threads here) also runs the members' waits and
    # the tools' bodies: more members than threads, two graphs sharing the store and the
    # pool, two runs of one batch racing in one group. Held on 13a8829: kept as a guard.
    effects = tmp_path / "effects.txt"
    took = asyncio.run(_agathered(pg_uri, effects, calls, threads, same, pooled, send))
    sent = Counter(effects_of(effects))
    want = 1 if same else threads
    assert sent == {args["to"]: want for _, args in calls}
    assert took < 60


async def _sync_invoke_over_async_store(uri: str, effects: Path) -> BaseException | None:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.postgres.aio import AsyncPostgresStore

    async with AsyncPostgresStore.from_conn_string(uri) as store:
        await store.setup()
        graph = batch_graph(batch_tools(effects), InMemorySaver(), store)
        go = {"messages": [HumanMessage("go")]}

        def invoke() -> BaseException | None:
            try:
                graph.invoke(go, _config())
            except Exception as exc:
                return exc
            return None

        # The sync run in a thread, the store's loop free: a batch's claim on the sync path
        # (no `_on_loop` writer) must fail fast, not wait on a loop it never reaches.
        return await asyncio.wait_for(asyncio.to_thread(invoke), timeout=60)


def test_a_sync_batch_over_an_async_store_fails_fast_and_runs_nothing(pg_uri, tmp_path):
    # Held on 13a8829: the claims of the round fail with the async-only error, every member.
    effects = tmp_path / "effects.txt"
    error = asyncio.run(_sync_invoke_over_async_store(pg_uri, effects))
    assert isinstance(error, TypeError), error
    assert "ainvoke" in str(error)
    assert effects_of(effects) == []


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_first_read_that_claims_after_the_streak_decides_as_a_plain_read(
    pg_uri, monkeypatch, api
):
    # The shipped streak: after two misses a thread's first reads claim with them
    # (`ClaimIfAbsent`). What such a read finds must decide as a plain read's would: a
    # dead holder's claim (outcome unknown, never run again), a lookup row whose row was
    # never written (it never ran: run), a finished call (replay); another tenant's rows
    # are not this one's. Held on 13a8829: kept as a guard.
    import dataclasses

    from langgraph.store.postgres import PostgresStore
    from langgraph.store.postgres.aio import AsyncPostgresStore

    from langgraph_replay_guard.replay import owners
    from langgraph_replay_guard.replay.ledger import (
        Write,
        admit,
        finished_entry,
        index_namespace,
        row_namespace,
    )
    from langgraph_replay_guard.storage import ledger_io
    from langgraph_replay_guard.storage.ledger_io import arun_plan, run_plan

    from .proc_one_trip import context

    thread = f"t-{uuid.uuid4().hex[:8]}"
    rows_ns = row_namespace(("replay_guard",), thread)

    def tenant_b(ctx: Any) -> Any:
        prefix = ("replay_guard", "tenant-b")
        return dataclasses.replace(
            ctx, rows_ns=row_namespace(prefix, thread), index_ns=index_namespace(prefix, thread)
        )

    def put(namespace: Any, key: str, value: Any) -> Any:
        yield Write(((namespace, key, value),))

    def record(ctx: Any, admission: Any) -> Any:
        done = finished_entry(admission.entry, "sent", None, "success")
        yield Write(((ctx.rows_ns, done.key, done.to_value()),))

    async def scenario() -> list[str]:
        if api == "sync":
            cm: Any = PostgresStore.from_conn_string(pg_uri)
            store = cm.__enter__()
            store.setup()
        else:
            cm = AsyncPostgresStore.from_conn_string(pg_uri)
            store = await cm.__aenter__()
            await store.setup()

        async def run(plan: Any) -> Any:
            if api == "sync":
                return await asyncio.to_thread(run_plan, store, plan)
            return await arun_plan(store, plan)

        kinds: list[str] = []
        try:
            dead = await run(admit(context(thread, 0)))  # a miss
            owners.REGISTRY.release(dead.entry.owner)  # its holder died: no outcome
            one = context(thread, 1)
            ran = await run(admit(one))  # a second miss: the streak
            await run(record(one, ran))
            owners.REGISTRY.release(ran.entry.owner)
            assert ledger_io.MISSES.expected(ledger_io.Read(((rows_ns, "k"),)))
            ghost = context(thread, 2)
            await run(put(ghost.index_ns, ghost.call_index_key, {"key": "tools/gone", "ai": "x"}))
            # From here every first read claims with it (after the streak, as shipped; a hit
            # would reset it, so the rest are made to claim too).
            monkeypatch.setattr(ledger_io.MISSES, "STREAK", 0)
            calls = [context(thread, 0), ghost, context(thread, 1), tenant_b(context(thread, 0))]
            for ctx in calls:
                admission = await run(admit(ctx))
                kinds.append(admission.kind)
                if admission.kind == "run":
                    await run(record(ctx, admission))
                    owners.REGISTRY.release(admission.entry.owner)
        finally:
            if api == "sync":
                cm.__exit__(None, None, None)
            else:
                await cm.__aexit__(None, None, None)
        return kinds

    assert asyncio.run(scenario()) == ["unknown", "run", "replay", "run"]


@pytest.mark.parametrize("streak", [0, 2], ids=["read-claims", "shipped"])
def test_an_async_store_on_a_non_autocommit_connection_commits_claims_and_outcomes(
    pg_uri, tmp_path, monkeypatch, streak
):
    # As above, on `AsyncPostgresStore` (the async driver of the same statements).
    import psycopg
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.postgres import PostgresStore
    from langgraph.store.postgres.aio import AsyncPostgresStore
    from psycopg.rows import dict_row

    from langgraph_replay_guard.storage import ledger_io

    monkeypatch.setattr(ledger_io.MISSES, "STREAK", streak)
    with psycopg.connect(pg_uri, autocommit=True) as setup:
        PostgresStore(setup).setup()
    effects = tmp_path / "effects.txt"

    async def scenario() -> None:
        conn = await psycopg.AsyncConnection.connect(
            pg_uri, autocommit=False, prepare_threshold=0, row_factory=dict_row
        )
        try:
            guard = ReplayGuard(POLICY, store=AsyncPostgresStore(conn))
            tools = effect_tools(effects, seconds=0)
            graph = claim_graph("wrap", guard, tools, InMemorySaver())
            for _ in range(3):
                config = _config()
                await graph.ainvoke({"messages": [HumanMessage("email Ann")]}, config)
                await graph.ainvoke(None, config)
        finally:
            await conn.close()

    asyncio.run(scenario())
    assert sends(effects) == 3
    rows = _committed_rows(pg_uri)
    assert [s for _, _, s in rows if s != "None"] == ["completed"] * 3, rows


def test_a_kill_after_an_async_stores_batch_claim_leaves_every_call_unknown(pg_uri, tmp_path):
    # The batch's claims, written on the store's loop by the round's writer thread, then a
    # SIGKILL as the first body starts: every call is claimed (none half-written), each
    # an unknown outcome a resume stops on, none runs again. Held on 13a8829: a guard.
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.store.postgres import PostgresStore
    from langgraph.store.postgres.aio import AsyncPostgresStore

    from langgraph_replay_guard.storage.ledger_io import ReplayLedger
    from tests import warm_children

    effects, started = tmp_path / "effects.txt", tmp_path / "started"
    thread = f"t-{uuid.uuid4().hex[:8]}"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(root)}
    script = str(Path(__file__).with_name("proc_attack_i36_ledger.py"))
    args = [sys.executable, script, pg_uri, thread, str(effects), str(started)]
    child = warm_children.popen(args, env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not started.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL, child.stderr.read() if child.stderr else ""
    with PostgresStore.from_conn_string(pg_uri) as store:
        rows = ReplayLedger(store).rows(thread)
    assert len(rows) == 4, rows
    assert all(row.outcome_unknown for row in rows)

    async def resume() -> Any:
        async with (
            AsyncPostgresSaver.from_conn_string(pg_uri) as saver,
            AsyncPostgresStore.from_conn_string(pg_uri) as astore,
        ):
            graph = batch_graph(batch_tools(effects), saver, astore)
            config = {"configurable": {"thread_id": thread}}
            return await graph.ainvoke(None, config, durability="sync")

    out = asyncio.run(resume())
    assert out.get("__interrupt__")  # stopped on an unknown outcome
    assert effects_of(effects) == []  # none ran again


@pytest.mark.usefixtures("patient_batch_window")
def test_a_batch_statement_that_fails_writes_none_of_its_claims(pg_uri):
    # The one statement of a batch's new claims fails while it waits for a row's lock (here
    # a lock timeout, after it took `a`'s): nothing of it is written, every member gets the
    # error. Held on 13a8829: kept as a guard.
    import psycopg
    from langgraph.store.postgres import PostgresStore

    from langgraph_replay_guard.replay.ledger import Update

    ns = ("replay_guard", "ledger", f"t-{uuid.uuid4().hex[:8]}")
    index = ("replay_guard", "ledger_index", ns[-1])
    with (
        PostgresStore.from_conn_string(pg_uri) as store,
        psycopg.connect(pg_uri, autocommit=True) as holder,
    ):
        store.setup()
        store.conn.execute("SET lock_timeout = '300ms'")
        holder.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (f"{'.'.join(ns)}/b",))
        ops = {
            key: Update(ns, key, {"rev": "1"}, False, None, also=((index, f"tc/{key}", {}),))
            for key in ("a", "b")
        }
        threads, answers = _claiming_together(store, (ns, "ai-fail"), ops)
        for thread in threads:
            thread.join(timeout=30)
        assert all(isinstance(a, psycopg.errors.LockNotAvailable) for a in answers.values())
        assert len(answers) == 2
        assert [store.get(ns, k) for k in ("a", "b")] == [None, None]
        assert [store.get(index, f"tc/{k}") for k in ("a", "b")] == [None, None]


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_batch_on_a_closed_connection_fails_fast_and_runs_nothing(pg_uri, tmp_path, api):
    # Every member of the round gets the connection's error; none waits for another, none
    # runs. Held on 13a8829: kept as a guard.
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.postgres import PostgresStore
    from langgraph.store.postgres.aio import AsyncPostgresStore

    effects = tmp_path / "effects.txt"
    go = {"messages": [HumanMessage("go")]}

    async def scenario() -> BaseException | None:
        try:
            if api == "sync":
                with PostgresStore.from_conn_string(pg_uri) as store:
                    store.setup()
                    store.conn.close()
                    graph = batch_graph(batch_tools(effects), InMemorySaver(), store)
                    await asyncio.wait_for(asyncio.to_thread(graph.invoke, go, _config()), 60)
            else:
                async with AsyncPostgresStore.from_conn_string(pg_uri) as astore:
                    await astore.setup()
                    await astore.conn.close()
                    graph = batch_graph(batch_tools(effects), InMemorySaver(), astore)
                    await asyncio.wait_for(graph.ainvoke(go, _config()), 60)
        except TimeoutError:
            raise
        except Exception as exc:
            return exc
        return None

    error = asyncio.run(scenario())
    assert error is not None
    assert effects_of(effects) == []


@pytest.mark.usefixtures("patient_batch_window")
def test_an_async_stores_batch_whose_second_statement_fails_answers_its_committed_claims(pg_uri):
    # As above on `AsyncPostgresStore`: the round is written on the store's loop by the
    # batch's writer thread (`ledger_io._on_loop`), the error crosses back to the thread.
    import psycopg
    from langgraph.store.postgres.aio import AsyncPostgresStore

    from langgraph_replay_guard.replay.ledger import Update
    from langgraph_replay_guard.storage import batch_claims, ledger_io, store_cas

    ns = ("replay_guard", "ledger", f"t-{uuid.uuid4().hex[:8]}")
    lock = f"{'.'.join(ns)}/b"
    take = "SELECT pg_advisory_lock(hashtextextended(%s, 0))"
    answers: dict[str, Any] = {}

    async def scenario() -> tuple[Any, Any]:
        with (
            psycopg.connect(pg_uri, autocommit=True) as admin,
            psycopg.connect(pg_uri, autocommit=True) as first,
            psycopg.connect(pg_uri, autocommit=True) as second,
        ):
            async with AsyncPostgresStore.from_conn_string(pg_uri) as store:
                await store.setup()
                await store_cas.acompare_and_set(store, Update(ns, "b", {"rev": "b1"}, False, None))
                await store.conn.execute("SET lock_timeout = '2s'")
                first.execute(take, (lock,))
                write = ledger_io._on_loop(store)

                async def claim(key: str) -> None:
                    member = batch_claims.join(store, (ns, "ai-half-async"), 2)
                    assert member is not None
                    op = Update(ns, key, {"rev": f"{key}2"}, False, None)
                    try:
                        answers[key] = await asyncio.to_thread(member.claim, store, op, write)
                    except Exception as exc:
                        answers[key] = exc
                    finally:
                        member.leave()

                claims = [asyncio.create_task(claim(key)) for key in ("a", "b")]
                await asyncio.to_thread(_until, lambda: _waiting_advisory_locks(admin) == 1)
                later = threading.Thread(target=lambda: second.execute(take, (lock,)))
                later.start()
                await asyncio.to_thread(_until, lambda: _waiting_advisory_locks(admin) == 2)
                first.execute("SELECT pg_advisory_unlock_all()")
                await asyncio.wait_for(asyncio.gather(*claims), timeout=30)
                second.execute("SELECT pg_advisory_unlock_all()")
                later.join(timeout=10)
                return await store.aget(ns, "a"), await store.aget(ns, "b")

    _nothing_half_written(answers, *asyncio.run(scenario()))
