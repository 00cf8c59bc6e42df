"""A first run on PostgreSQL: a one-statement claim, and an outcome that notifies only waiters.

Issue 36's distinct-calls goal: the claim of a row that is not there is one prepared statement
(its advisory lock, then `INSERT ... ON CONFLICT DO NOTHING`), and an outcome sends a
notification only when a worker waits for it (the waiter marks the claim after it listens).
The ledger's rules hold: one worker of many runs each call, and a waiter is never left
sleeping on an outcome written without a notification.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from langgraph_replay_guard.replay import owners
from langgraph_replay_guard.replay.ledger import (
    Sleep,
    Update,
    finished_entry,
    row_namespace,
    started_entry,
)
from langgraph_replay_guard.storage import store_cas, wake
from langgraph_replay_guard.storage.wake_names import channel, payload
from tests import warm_children

from .batch_graphs import SENDS, backend, batch_graph, batch_tools, effects_of
from .proc_one_trip import context, race
from .test_batch_claims import _counting_cursors

pytestmark = pytest.mark.postgres


def _listening(uri: str, namespace: tuple[str, ...]) -> Any:
    """A connection of the test's own, listening on a ledger namespace's channel."""
    import psycopg

    conn = psycopg.connect(uri, autocommit=True)
    conn.execute(f'LISTEN "{channel(namespace)}"')
    return conn


def _heard(conn: Any, seconds: float = 0.3) -> list[str]:
    return [note.payload for note in conn.notifies(timeout=seconds)]


def _thread() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def _claim(store: Any, thread: str, i: int = 0) -> tuple[Any, Any]:
    """Claim call `i` of a thread as this process (a live holder); its context and row."""
    ctx = context(thread, i)
    row = started_entry(ctx, args=ctx.args, idempotency_key=None, owner=ctx.new_owner())
    written, _ = store_cas.compare_and_set(
        store, Update(ctx.rows_ns, ctx.identity.key, row.to_value(), False, None)
    )
    assert written
    return ctx, row


def _outcome(ctx: Any, row: Any) -> list[tuple[tuple[str, ...], str, Any]]:
    done = finished_entry(row, "sent", None, "success")
    return [(ctx.rows_ns, row.key, done.to_value())]


def test_a_new_unsafe_call_is_claimed_in_one_statement(pg_uri, tmp_path):
    effects = tmp_path / "effects.txt"
    with backend("postgres", pg_uri) as (saver, store):
        graph = batch_graph(batch_tools(effects), saver, store, steps=[[SENDS[0]], "done"])
        statements = _counting_cursors(store.conn)
        config = {"configurable": {"thread_id": _thread()}}
        graph.invoke({"messages": [HumanMessage("email Ann")]}, config, durability="sync")
    assert effects_of(effects) == ["ann@example.com"]
    claims = [s for s in statements if "pg_advisory_xact_lock" in s]
    assert len(claims) == 1, statements
    # One round trip: no transaction spread over several statements (two before: BEGIN, the
    # lock and the read; the rows and COMMIT).
    assert not [s for s in statements if s.lstrip().upper().startswith(("BEGIN", "COMMIT"))]
    # The read, the claim, the outcome: three statements for the call (four before).
    ledger = [s for s in statements if "store" in s]
    assert len(ledger) == 3, ledger


def test_an_outcome_nobody_waits_for_sends_no_notification(pg_uri, tmp_path):
    effects = tmp_path / "effects.txt"
    thread = _thread()
    listener = _listening(pg_uri, row_namespace(("replay_guard",), thread))
    try:
        with backend("postgres", pg_uri) as (saver, store):
            graph = batch_graph(batch_tools(effects), saver, store, steps=[[SENDS[0]], "done"])
            config = {"configurable": {"thread_id": thread}}
            graph.invoke({"messages": [HumanMessage("email Ann")]}, config, durability="sync")
        assert effects_of(effects) == ["ann@example.com"]
        assert _heard(listener) == []  # one before: every outcome notified
    finally:
        listener.close()


def test_a_marked_claim_notifies_its_outcome(pg_uri):
    from langgraph.store.postgres import PostgresStore

    thread = _thread()
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        ctx, row = _claim(store, thread)
        listener = _listening(pg_uri, ctx.rows_ns)
        try:
            assert store_cas.mark_waiting(store, ctx.rows_ns, row.key)
            assert store_cas.mark_waiting(store, ctx.rows_ns, row.key)  # a second waiter
            item = store.get(ctx.rows_ns, row.key)
            assert item is not None
            assert item.value[store_cas.WAITING] is True
            assert item.value["rev"] == row.rev  # the claim's revision is unchanged
            assert store_cas.write_rows(store, _outcome(ctx, row))
            assert _heard(listener) == [payload(ctx.rows_ns, row.key)]
            # The outcome is the holder's row as written, without the mark.
            item = store.get(ctx.rows_ns, row.key)
            assert item is not None
            assert item.value["status"] == "completed"
            assert store_cas.WAITING not in item.value
            # A row no longer in flight (or absent) is not marked: the waiter reads it again.
            assert not store_cas.mark_waiting(store, ctx.rows_ns, row.key)
            assert not store_cas.mark_waiting(store, ctx.rows_ns, "no-such-row")
        finally:
            listener.close()


def _subscribed(store: Any, namespace: tuple[str, ...]) -> None:
    """Have this process listen on the namespace's channel (a first, short wait)."""
    wake.pause(store, Sleep(0.05, wake=(namespace, "no-such-row")), time.monotonic())


def test_a_waiter_whose_holder_finished_before_it_marked_the_row_does_not_sleep(pg_uri):
    from langgraph.store.postgres import PostgresStore

    thread = _thread()
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        ctx, row = _claim(store, thread)
        _subscribed(store, ctx.rows_ns)
        since = time.monotonic()  # the waiter read the claim in flight here
        # The holder records its outcome before the waiter marks the row: nobody had marked
        # it, so it sends no notification. The mark finds the row settled: no 3 s sleep.
        assert store_cas.write_rows(store, _outcome(ctx, row))
        started = time.monotonic()
        wake.pause(store, Sleep(3.0, wake=(ctx.rows_ns, row.key)), since)
        assert time.monotonic() - started < 1.0


async def _arace(uri: str, rounds: int) -> list[float]:
    from langgraph.store.postgres.aio import AsyncPostgresStore

    thread, late = _thread(), []
    async with AsyncPostgresStore.from_conn_string(uri) as store:
        await store.setup()
        await wake.apause(
            store, Sleep(0.05, wake=(row_namespace(("replay_guard",), thread), "x")), 0
        )
        for i in range(rounds):
            ctx = context(thread, i)
            row = started_entry(ctx, args=ctx.args, idempotency_key=None, owner=ctx.new_owner())
            claim = Update(ctx.rows_ns, row.key, row.to_value(), False, None)
            assert (await store_cas.acompare_and_set(store, claim))[0]

            async def holder(ctx: Any = ctx, row: Any = row) -> None:
                await asyncio.sleep(random.uniform(0, 0.004))
                await store_cas.awrite_rows(store, _outcome(ctx, row))

            since = time.monotonic()
            task = asyncio.create_task(holder())
            started = time.monotonic()
            await wake.apause(store, Sleep(5.0, wake=(ctx.rows_ns, row.key)), since)
            late.append(time.monotonic() - started)
            await task
    return late


@pytest.mark.parametrize("api", ["sync", "async"])
def test_waiters_racing_the_holders_outcome_are_always_woken(pg_uri, api):
    """A holder writes its outcome while its waiter listens and marks: never a lost wake-up."""
    from langgraph.store.postgres import PostgresStore

    rounds = 40
    if api == "async":
        late = asyncio.run(_arace(pg_uri, rounds))
    else:
        thread, late = _thread(), []
        with PostgresStore.from_conn_string(pg_uri) as store:
            store.setup()
            _subscribed(store, row_namespace(("replay_guard",), thread))
            for i in range(rounds):
                ctx, row = _claim(store, thread, i)
                since = time.monotonic()

                def holder(ctx: Any = ctx, row: Any = row) -> None:
                    time.sleep(random.uniform(0, 0.004))
                    # The holder's own connection (a worker of another process would have one).
                    with PostgresStore.from_conn_string(pg_uri) as other:
                        store_cas.write_rows(other, _outcome(ctx, row))

                worker = threading.Thread(target=holder)
                worker.start()
                started = time.monotonic()
                wake.pause(store, Sleep(5.0, wake=(ctx.rows_ns, row.key)), since)
                late.append(time.monotonic() - started)
                worker.join()
                owners.REGISTRY.release(row.owner)
    # A lost wake-up sleeps the whole 5 s; a woken waiter returns with the outcome.
    assert max(late) < 2.5, sorted(late)[-5:]


@pytest.mark.parametrize("paths", ["one", "mixed", "async"])
def test_eight_processes_racing_new_claims_run_each_call_once(pg_uri, tmp_path, paths):
    from langgraph.store.postgres import PostgresStore

    # "mixed": half of them claim through the two-round-trip path (read under the lock,
    # then write), which the one-statement claim must never overwrite, nor be overwritten by.
    # "async": half of them on an AsyncPostgresStore (the same statements, its driver).
    # "one" and "async" claim every call with its first read (`proc_one_trip`).
    other = {"mixed": "two", "async": "async"}.get(paths, "one")
    workers = ["one", other] * 4
    result = race(pg_uri, tmp_path, workers, start=warm_children.popen)
    thread, calls = result.thread, result.calls
    assert sorted(result.effects) == sorted(f"{thread}/{i}" for i in range(calls))  # once each
    assert sorted(result.ran) == list(range(calls))
    assert len(result.replayed) == calls * (len(workers) - 1)
    with PostgresStore.from_conn_string(pg_uri) as store:
        for i in range(calls):
            ctx = context(thread, i)
            item = store.get(ctx.rows_ns, ctx.identity.key)
            assert item is not None
            assert item.value["status"] == "completed"
            pointer = store.get(ctx.index_ns, f"tc/call-{i}")
            assert pointer is not None
            assert pointer.value["key"] == ctx.identity.key


def test_a_waiter_on_a_store_wrapping_postgres_polls(pg_uri):
    """A wrapping store's outcomes go through its own `batch` (no notification): no mark, a poll."""
    from langgraph.store.base import BaseStore
    from langgraph.store.postgres import PostgresStore

    class Wrapping(BaseStore):  # as `langgraph dev`'s batching store: the real one in `_store`
        def __init__(self, inner: Any) -> None:
            self._store = inner

        def batch(self, ops: Any) -> Any:
            return self._store.batch(ops)

        async def abatch(self, ops: Any) -> Any:
            return await self._store.abatch(ops)

    thread = _thread()
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        ctx, row = _claim(store, thread)
        wrapper = Wrapping(store)
        started = time.monotonic()
        wake.pause(wrapper, Sleep(0.3, wake=(ctx.rows_ns, row.key)), started)
        # The claim is still in flight: the wait lasts its pause, never returns at once (the
        # plan would read again in a loop), and the row is not marked.
        assert time.monotonic() - started >= 0.25
        item = store.get(ctx.rows_ns, row.key)
        assert item is not None
        assert store_cas.WAITING not in item.value
