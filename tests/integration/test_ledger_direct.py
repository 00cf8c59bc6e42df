"""The guard's statements on a `PostgresStore`'s own connection go through libpq itself (issue 36).

`store_cas._direct` runs a claim, a read, an outcome and a waiter's mark with one
`PQexecPrepared` each, prepared once per connection, instead of psycopg's cursor (its Python
was a fifth of a call's client CPU). These tests race claims sent that way against each other
and against the cursor's, in processes and in tasks of one process, and check what the cursor
did that the direct call must keep doing: its errors, a connection's own `jsonb` loader, and
statements dropped by `DEALLOCATE ALL` or `DISCARD ALL`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from typing import Any

import pytest

from langgraph_replay_guard.replay import owners
from langgraph_replay_guard.replay.ledger import admit, finished_entry
from langgraph_replay_guard.storage import store_cas
from langgraph_replay_guard.storage.ledger_io import arun_plan, run_plan
from tests import warm_children

from .proc_one_trip import _outcome, context, race

pytestmark = pytest.mark.postgres


def _thread() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def _counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the statements psycopg's cursors send and those sent through libpq directly."""
    import psycopg

    sent = {"cursor": 0, "direct": 0}
    execute = psycopg.Cursor.execute
    direct = getattr(store_cas, "_direct", None)

    def on_cursor(self: Any, *args: Any, **kwargs: Any) -> Any:
        sent["cursor"] += 1
        return execute(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", on_cursor)
    if direct is not None:

        def on_libpq(*args: Any, **kwargs: Any) -> Any:
            rows = direct(*args, **kwargs)
            sent["direct"] += rows is not None
            return rows

        monkeypatch.setattr(store_cas, "_direct", on_libpq)
    return sent


def _run(store: Any, thread: str, i: int, effects: list[str] | None = None) -> str:
    """Admit call `i`; if told to run it, note its effect and write its outcome."""
    ctx = context(thread, i)
    admission = run_plan(store, admit(ctx))
    if admission.kind == "replay":
        return "replayed"
    assert admission.kind == "run", admission
    if effects is not None:
        effects.append(f"{thread}/{i}")
    done = finished_entry(admission.entry, f"sent {i}", None, "success")
    run_plan(store, _outcome(ctx, done))
    owners.REGISTRY.release(admission.entry.owner)
    return "ran"


def test_a_first_run_and_a_hit_send_no_statement_through_a_cursor(pg_uri, monkeypatch):
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        thread = _thread()
        sent = _counted(monkeypatch)
        for i in range(4):  # the thread's later first reads claim with them (one statement)
            assert _run(store, thread, i) == "ran"
        assert _run(store, thread, 0) == "replayed"
        assert sent == {"cursor": 0, "direct": 4 * 2 + 2 + 1}  # reads, claims, outcomes; a hit
        store.conn.cursor_factory = type("OtherCursor", (store.conn.cursor_factory,), {})
        assert _run(store, thread, 1) == "replayed"  # another cursor class: its cursor runs it
        assert sent["cursor"] == 1


@pytest.mark.parametrize("paths", ["direct", "direct and cursor"])
def test_processes_racing_claims_through_libpq_run_each_call_once(pg_uri, tmp_path, paths):
    # `one`: every first read carries its claim (libpq's call); `two`: the locked
    # read-then-write claim; `cursor`: `one` through psycopg's cursor.
    mixed = ["one", "two", "one", "cursor", "one", "two"]
    workers = ["one"] * 6 if paths == "direct" else mixed
    result = race(pg_uri, tmp_path, workers, start=warm_children.popen)
    thread, calls = result.thread, result.calls
    assert sorted(result.effects) == sorted(f"{thread}/{i}" for i in range(calls))  # once each
    assert sorted(result.ran) == list(range(calls))


def test_tasks_and_threads_of_one_process_racing_on_one_store_run_each_call_once(pg_uri):
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        thread, calls = _thread(), 12
        effects: list[str] = []
        lock = threading.Lock()

        async def one(i: int) -> str:
            ctx = context(thread, i)
            admission = await arun_plan(store, admit(ctx))  # a sync store: off the loop
            if admission.kind == "replay":
                return "replayed"
            with lock:
                effects.append(f"{thread}/{i}")
            done = finished_entry(admission.entry, f"sent {i}", None, "success")
            await arun_plan(store, _outcome(ctx, done))
            owners.REGISTRY.release(admission.entry.owner)
            return "ran"

        async def gathered() -> list[str]:
            return await asyncio.gather(*(one(i) for i in range(calls) for _ in range(6)))

        def in_threads() -> None:
            for i in range(calls):
                _run(store, thread, i, effects)  # list.append: atomic

        threads = [threading.Thread(target=in_threads) for _ in range(3)]
        for worker in threads:
            worker.start()
        answers = asyncio.run(gathered())
        for worker in threads:
            worker.join()
        assert sorted(effects) == sorted(f"{thread}/{i}" for i in range(calls)), effects
        assert len(answers) == calls * 6


@pytest.mark.parametrize("command", ["DEALLOCATE ALL", "DISCARD ALL"])
def test_statements_dropped_by_the_user_are_prepared_again(pg_uri, command):
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        thread = _thread()
        assert _run(store, thread, 0) == "ran"
        assert _run(store, thread, 0) == "replayed"
        store.conn.execute(command)
        assert _run(store, thread, 1) == "ran"
        assert _run(store, thread, 1) == "replayed"
        assert _run(store, thread, 0) == "replayed"


def test_reads_decode_jsonb_with_the_connections_own_loader(pg_uri):
    import psycopg.types.json
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        seen: list[Any] = []

        def loads(data: Any) -> Any:
            seen.append(data)
            return json.loads(data)

        psycopg.types.json.set_json_loads(loads, store.conn)
        thread = _thread()
        assert _run(store, thread, 0) == "ran"
        seen.clear()
        assert _run(store, thread, 0) == "replayed"
        assert seen, "the connection's jsonb loader was not used"


def test_a_server_error_is_psycopgs_error_and_the_next_call_works(pg_uri):
    import psycopg
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        thread = _thread()
        with pytest.raises(psycopg.errors.UndefinedTable):
            store_cas._direct(store.conn, "SELECT * FROM no_such_table WHERE x = %s", ["1"], True)
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            store_cas._direct(store.conn, "SELECT %s::int", ["not a number"], True)
        assert store.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert _run(store, thread, 0) == "ran"
        assert _run(store, thread, 0) == "replayed"


def test_a_statement_with_another_percent_sign_goes_to_the_cursor(pg_uri, monkeypatch):
    from langgraph.store.postgres import PostgresStore

    assert store_cas._numbered("a = %s AND b = %s") == (b"a = $1 AND b = $2", 2)
    assert store_cas._numbered("SELECT %s::text LIKE 'a%%'") is None  # psycopg's own escape
    with PostgresStore.from_conn_string(pg_uri) as store:
        sent = _counted(monkeypatch)
        rows = store_cas._statement(store, store.conn, "SELECT %s::text LIKE 'a%%'", ["ab"])
        assert rows == [(True,)]
        assert sent == {"cursor": 1, "direct": 0}
