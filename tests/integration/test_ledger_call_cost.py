"""A ledger call's reads on PostgreSQL decode rows exactly, for workers racing on them (issue 36).

The reads (the read, the read that claims, a compare-and-set's locked read) decode a row as
psycopg's `jsonb` loader does (the standard library's decoder): numbers beyond 64 bits stay
exact integers. orjson, three times faster on a row, reads them as floats (2**70 + 1 as
1.1805916207174113e+21), and a check for long numbers before it cost what it saved, so the
reads keep psycopg's loader (issue 36, "the goals with margin"). A JSON `null` or string row
stays a damaged row. Outcomes recorded by the guard, and rows written by hand, replay exactly
for workers racing on them (processes, and tasks gathered on an `AsyncPostgresStore`), and
nothing runs again. The statements reuse a cursor on a store's own connection, made again
when the connection's `cursor_factory` changes.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from langgraph_replay_guard.replay.ledger import Update, finished_entry, started_entry
from langgraph_replay_guard.storage import store_cas
from tests import warm_children

from .proc_one_trip import context

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(Path(__file__).with_name("proc_call_cost.py"))

# Values orjson would decode otherwise than the standard library, and plain ones.
TRICKY = {
    "big": 2**70 + 1,
    "negative": -(2**63) - 1,
    "nineteen": 9_999_999_999_999_999_999,
    "u64": 2**64 - 1,
    "float": 0.1,
    "text": 'caf\u00e9 \U0001f600 \\ "q"',
    "nested": [{"a": [1, 2.5, None, True]}],
}


def _exact(value: Any) -> Any:
    """A value with the type of each number and string beside it (2**70 == 2.0**70 in Python)."""
    if isinstance(value, dict):
        return {key: _exact(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_exact(item) for item in value]
    return (type(value).__name__, value)


def _thread() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def _put_text(conn: Any, prefix: str, key: str, text: str) -> None:
    conn.execute(
        "INSERT INTO store (prefix, key, value) VALUES (%s, %s, %s::jsonb) "
        "ON CONFLICT (prefix, key) DO UPDATE SET value = EXCLUDED.value",
        (prefix, key, text),
    )


def _tricky_rows(store: Any, thread: str) -> tuple[list[Any], list[Any]]:
    """Rows of every kind, written as JSON text by hand; their keys and how each must read."""
    import psycopg

    ns = ("replay_guard", "ledger", thread)
    texts = {
        "plain": json.dumps(TRICKY),
        "huge": '{"huge": 1e400, "n": 1}',  # the server prints it in full: 401 digits
        "null": "null",
        "string": '"a row that is a JSON string"',
        "list": '[1.5, -0, "x", {"b": null}]',
    }
    for key, text in texts.items():
        _put_text(store.conn, ".".join(ns), key, text)
    expected = []
    with psycopg.connect(store.conn.info.dsn, autocommit=True) as conn:  # psycopg's loader
        for key in texts:
            row = conn.execute(
                "SELECT value FROM store WHERE prefix = %s AND key = %s", (".".join(ns), key)
            ).fetchone()
            assert row is not None
            # A JSON null row is a damaged row to the ledger (`_NULL_ROW`), never an absent one.
            expected.append(store_cas._NULL_ROW if row[0] is None else row[0])
    return [(ns, key) for key in texts], expected


def test_rows_read_as_json_text_decode_as_the_store_reads_them(pg_uri):
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        keys, expected = _tricky_rows(store, _thread())
        assert _exact(expected[0]) == _exact(TRICKY)
        assert expected[1] == {"huge": 10**400, "n": 1}

        # repr: an integer read as a float may still compare equal (2**70 == 2.0**70).
        assert _exact(store_cas.read_rows(store, keys)) == _exact(expected)
        many = keys * 20  # more than `_PG_READ_POINTS` keys: the join of many rows
        assert _exact(store_cas.read_rows(store, many)) == _exact(expected * 20)

        # The read that claims: a row is there, so it writes nothing and answers the rows.
        absent = (keys[0][0], "absent")
        op = Update(absent[0], absent[1], {"v": 1}, expect_exists=False, expect_rev=None)
        claimed, values = store_cas.claim_if_absent(store, [absent, *keys], op)
        assert _exact((claimed, values)) == _exact((False, [None, *expected]))

        # A compare-and-set that finds the row otherwise answers it as read under the lock.
        for (ns, key), value in zip(keys, expected, strict=True):
            op = Update(ns, key, {"v": 1}, expect_exists=False, expect_rev=None)
            assert _exact(store_cas.compare_and_set(store, op)) == _exact((False, value))


def test_an_async_store_reads_them_alike(pg_uri):
    from langgraph.store.postgres import PostgresStore
    from langgraph.store.postgres.aio import AsyncPostgresStore

    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        keys, expected = _tricky_rows(store, _thread())

    async def read() -> tuple[Any, Any, Any]:
        async with AsyncPostgresStore.from_conn_string(pg_uri) as astore:
            absent = (keys[0][0], "absent")
            op = Update(absent[0], absent[1], {"v": 1}, expect_exists=False, expect_rev=None)
            return (
                await store_cas.aread_rows(astore, keys),
                await store_cas.aclaim_if_absent(astore, [absent, *keys], op),
                await asyncio.gather(*(store_cas.aread_rows(astore, keys) for _ in range(8))),
            )

    rows, claim, gathered = asyncio.run(read())
    assert _exact(rows) == _exact(expected)
    assert _exact(claim) == _exact((False, [None, *expected]))
    assert _exact(gathered) == _exact([expected] * 8)


def _recorded(store: Any, thread: str, calls: int) -> None:
    """Calls 0 .. calls-1 of a thread recorded by the guard, their content `TRICKY`."""
    for i in range(calls):
        ctx = context(thread, i)
        row = started_entry(ctx, args=ctx.args, idempotency_key=None)
        done = finished_entry(row, TRICKY, None, "success")
        assert store_cas.write_rows(store, [(ctx.rows_ns, ctx.identity.key, done.to_value())])


def test_workers_racing_on_recorded_rows_replay_them_exactly(pg_uri, tmp_path):
    from langgraph.store.postgres import PostgresStore

    thread, calls = _thread(), 12
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        _recorded(store, thread, calls)
    barrier = tmp_path / "ready"
    barrier.mkdir()
    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(ROOT)}
    modes = ["read", "claims", "async", "read", "claims", "async"]
    procs = [
        warm_children.popen(
            [sys.executable, SCRIPT, pg_uri, thread, str(calls), str(barrier), "6", mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for mode in modes
    ]
    replays = 0
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err.decode()[-2000:]
        answer = json.loads(out.decode().strip().splitlines()[-1])
        assert answer["ran"] == []  # every call was recorded: nothing runs again
        for value in answer["values"]:
            assert _exact(value) == _exact(TRICKY)
        replays += len(answer["values"])
    assert replays == calls * 4 + calls * 8 * 2  # 4 sync workers, 2 of 8 gathered tasks each


def test_statements_after_a_cursor_factory_change_go_through_the_new_factory(pg_uri):
    # The guard's statements reuse a cursor on a store's own connection; code that sets the
    # connection's `cursor_factory` afterwards (to count or trace statements) still sees them.
    from langgraph.store.postgres import PostgresStore

    from .test_batch_claims import _counting_cursors

    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        ctx = context(_thread(), 0)
        keys = [(ctx.rows_ns, ctx.identity.key)]
        assert store_cas.read_rows(store, keys) == [None]  # a cursor is kept from here on
        statements = _counting_cursors(store.conn)
        row = started_entry(ctx, args=ctx.args, idempotency_key=None)
        op = Update(ctx.rows_ns, ctx.identity.key, row.to_value(), False, None)
        assert store_cas.compare_and_set(store, op) == (True, op.value)
        done = finished_entry(row, "sent", None, "success").to_value()
        assert store_cas.write_rows(store, [(ctx.rows_ns, ctx.identity.key, done)])
        assert store_cas.read_rows(store, keys) == [done]
        assert len(statements) == 3, statements  # the claim, the outcome, the read
