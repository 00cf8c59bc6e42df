"""PostgreSQL claims in one statement on every path: the async store, a batch, a first run.

Issue 36: a first run's read and claim are one statement (`ClaimIfAbsent`), on
`AsyncPostgresStore` as on `PostgresStore` (one plan of statements, a sync and an async
driver); a batch's claims of rows that are not there are one statement too. The ledger's
rules hold: one worker of many runs each call (processes, and tasks gathered in one process),
a row found is never overwritten, ops are decided as if alone in their order.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from langgraph_replay_guard.replay import owners
from langgraph_replay_guard.replay.ledger import Update, Write, admit, finished_entry
from langgraph_replay_guard.storage import ledger_io, store_cas
from langgraph_replay_guard.storage.ledger_io import arun_plan

from .batch_graphs import SENDS, backend, batch_graph, batch_tools, effects_of, fan_out_agent
from .proc_one_trip import context
from .test_batch_claims import _counting_cursors

pytestmark = pytest.mark.postgres


def _thread() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def _acounting_cursors(conn: Any) -> list[str]:
    """`_counting_cursors` for an async psycopg connection (test-only)."""
    import psycopg

    statements: list[str] = []

    class CountingCursor(psycopg.AsyncCursor):  # type: ignore[type-arg]
        async def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
            as_string = getattr(query, "as_string", None)
            statements.append(as_string(self.connection) if as_string else str(query))
            return await super().execute(query, *args, **kwargs)

    conn.cursor_factory = CountingCursor
    return statements


def _ledger(statements: list[str]) -> list[str]:
    return [s for s in statements if "store" in s]


def _transactions(statements: list[str]) -> list[str]:
    return [s for s in statements if s.lstrip().upper().startswith(("BEGIN", "COMMIT"))]


THREE = [[SENDS[0]], [SENDS[1]], [SENDS[2]], "done"]  # three new calls, one after another


async def _athree_runs(uri: str, effects: Path) -> list[str]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.store.postgres.aio import AsyncPostgresStore

    async with (
        AsyncPostgresSaver.from_conn_string(uri) as saver,
        AsyncPostgresStore.from_conn_string(uri) as store,
    ):
        await saver.setup()
        await store.setup()
        graph = batch_graph(batch_tools(effects), saver, store, steps=THREE)
        statements = _acounting_cursors(store.conn)
        config = {"configurable": {"thread_id": _thread()}}
        await graph.ainvoke({"messages": [HumanMessage("email")]}, config, durability="sync")
    return statements


def _three_runs(uri: str, effects: Path) -> list[str]:
    with backend("postgres", uri) as (saver, store):
        graph = batch_graph(batch_tools(effects), saver, store, steps=THREE)
        statements = _counting_cursors(store.conn)
        config = {"configurable": {"thread_id": _thread()}}
        graph.invoke({"messages": [HumanMessage("email")]}, config, durability="sync")
    return statements


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_thread_of_new_calls_claims_each_with_its_read_in_one_statement(pg_uri, tmp_path, api):
    """After two first reads of a thread found nothing, a new call's read is its claim."""
    effects = tmp_path / "effects.txt"
    run = _three_runs if api == "sync" else (lambda *a: asyncio.run(_athree_runs(*a)))
    statements = run(pg_uri, effects)
    assert effects_of(effects) == ["ann@example.com", "bob@example.com", "cy@example.com"]
    ledger = _ledger(statements)
    # The first two calls: the read, the claim, the outcome. The third: the read with the
    # claim, the outcome. 0c2551c: three statements a call on PostgresStore, and five on
    # AsyncPostgresStore (the read; the lock, the read again and the upsert in a transaction;
    # the outcome).
    assert len(ledger) == 8, ledger
    assert [i for i, s in enumerate(ledger) if "found AS" in s] == [6], ledger
    assert "pg_advisory_xact_lock" in ledger[6]
    assert not _transactions(statements), statements


@pytest.mark.usefixtures("patient_batch_window")
@pytest.mark.parametrize("graph_of", [batch_graph, fan_out_agent], ids=["toolnode", "send"])
def test_a_batch_of_four_new_calls_is_claimed_in_one_statement(pg_uri, tmp_path, graph_of):
    effects = tmp_path / "effects.txt"
    with backend("postgres", pg_uri) as (saver, store):
        graph = graph_of(batch_tools(effects), saver, store)
        statements = _counting_cursors(store.conn)
        config = {"configurable": {"thread_id": _thread()}}
        graph.invoke({"messages": [HumanMessage("go")]}, config, durability="sync")
    assert sorted(effects_of(effects)) == sorted(args["to"] for _, args in SENDS)
    claims = [s for s in statements if "pg_advisory_xact_lock" in s]
    assert len(claims) == 1, claims
    # One round trip for the four claims (0c2551c: BEGIN, the locks and the reads; the
    # upsert and COMMIT).
    assert not _transactions(statements), statements


def _claim(ctx: Any, *, also: tuple[Any, ...] = ()) -> Update:
    from langgraph_replay_guard.replay.ledger import started_entry

    row = started_entry(ctx, args=ctx.args, idempotency_key=None)
    return Update(ctx.rows_ns, ctx.identity.key, row.to_value(), False, None, also=also)


def test_a_batch_with_a_row_found_claims_the_others_in_one_statement(pg_uri):
    from langgraph.store.postgres import PostgresStore

    thread = _thread()
    ctxs = [context(thread, i) for i in range(4)]
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        earlier = _claim(ctxs[2])
        assert store_cas.compare_and_set(store, earlier)[0]
        statements = _counting_cursors(store.conn)
        ops = [
            _claim(ctx, also=((ctx.index_ns, f"tc/{i}", {"i": i}),)) for i, ctx in enumerate(ctxs)
        ]
        answers = store_cas.compare_and_set_many(store, ops)
        assert [written for written, _ in answers] == [True, True, False, True]
        assert answers[2][1]["rev"] == earlier.value["rev"]  # the row found, never overwritten
        # The three new rows in one statement; the row found by the locked read-then-write.
        assert "pg_advisory_xact_lock(hashtextextended(l, 0))" in statements[0]
        assert len(statements) == 3, statements
        for i, ctx in enumerate(ctxs):
            item = store.get(ctx.rows_ns, ctx.identity.key)
            assert item is not None
            assert item.value["rev"] == (earlier if i == 2 else ops[i]).value["rev"]
            pointer = store.get(ctx.index_ns, f"tc/{i}")
            assert (pointer is None) == (i == 2)  # a lookup row only with its claim


def test_a_batch_whose_calls_share_a_lookup_row_keeps_the_order(pg_uri):
    """Two claims writing one lookup row: the later op's value wins (the locked path)."""
    from langgraph.store.postgres import PostgresStore

    thread = _thread()
    ctxs = [context(thread, i) for i in range(3)]
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        ops = [
            _claim(ctx, also=((ctx.index_ns, "shared", {"i": i}),)) for i, ctx in enumerate(ctxs)
        ]
        answers = store_cas.compare_and_set_many(store, ops)
        assert all(written for written, _ in answers)
        shared = store.get(ctxs[0].index_ns, "shared")
        assert shared is not None
        assert shared.value == {"i": 2}


async def _arace(uri: str, thread: str, calls: int, stores: int, tasks: int) -> list[int]:
    from langgraph.store.postgres.aio import AsyncPostgresStore

    ran: list[int] = []
    opened = [AsyncPostgresStore.from_conn_string(uri) for _ in range(stores)]
    entered = [await store.__aenter__() for store in opened]
    try:
        await entered[0].setup()

        async def worker(store: Any, order: list[int]) -> None:
            for i in order:
                ctx = context(thread, i)
                admission = await arun_plan(store, admit(ctx))
                if admission.kind == "replay":
                    continue
                assert admission.kind == "run", admission
                ran.append(i)  # the effect: counted once per real run
                done = finished_entry(admission.entry, f"sent {i}", None, "success")
                await arun_plan(store, _write(ctx, done))
                owners.REGISTRY.release(admission.entry.owner)

        orders = [list(range(calls))[:: 1 if n % 2 else -1] for n in range(tasks)]
        await asyncio.gather(*(worker(entered[n % stores], orders[n]) for n in range(tasks)))
    finally:
        for store in opened:
            await store.__aexit__(None, None, None)
    return ran


def _write(ctx: Any, entry: Any) -> Any:
    yield Write(((ctx.rows_ns, entry.key, entry.to_value()),))


@pytest.mark.parametrize("streak", [0, 2], ids=["read-claims", "shipped"])
def test_gathered_tasks_racing_new_claims_on_an_async_store_run_each_call_once(
    pg_uri, monkeypatch, streak
):
    # "read-claims": every first read claims with it, to race that statement.
    monkeypatch.setattr(ledger_io.MISSES, "STREAK", streak)
    calls = 30
    ran = asyncio.run(_arace(pg_uri, _thread(), calls, stores=4, tasks=8))
    assert sorted(ran) == list(range(calls))  # each effect once


async def _abatch(uri: str, effects: Path, graph_of: Any) -> list[str]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.store.postgres.aio import AsyncPostgresStore

    async with (
        AsyncPostgresSaver.from_conn_string(uri) as saver,
        AsyncPostgresStore.from_conn_string(uri) as store,
    ):
        await saver.setup()
        await store.setup()
        graph = graph_of(batch_tools(effects), saver, store)
        statements = _acounting_cursors(store.conn)
        config = {"configurable": {"thread_id": _thread()}}
        await graph.ainvoke({"messages": [HumanMessage("go")]}, config, durability="sync")
    return statements


@pytest.mark.usefixtures("patient_batch_window")
@pytest.mark.parametrize("graph_of", [batch_graph, fan_out_agent], ids=["toolnode", "send"])
def test_an_async_store_claims_a_batch_of_four_in_one_statement(pg_uri, tmp_path, graph_of):
    effects = tmp_path / "effects.txt"
    statements = asyncio.run(_abatch(pg_uri, effects, graph_of))
    assert sorted(effects_of(effects)) == sorted(args["to"] for _, args in SENDS)
    claims = [s for s in statements if "pg_advisory_xact_lock" in s]
    # 0c2551c: each call its own transaction (four claims, each a lock, a read, an upsert).
    assert len(claims) == 1, claims
    assert "hashtextextended(l, 0)" in claims[0]  # the batch's statement
