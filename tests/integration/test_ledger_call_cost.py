"""What a ledger call costs on PostgreSQL: rows read as JSON text, decoded by orjson (issue 36).

A call's reads (the read, the read that claims, a compare-and-set's locked read) fetch each
row's value as JSON text and decode it with orjson, not with psycopg's `jsonb` loader (the
standard library's decoder). The values must be those psycopg's loader read: numbers beyond
64 bits stay exact integers (orjson would read them as floats; the server prints 1e400 as
401 digits), a JSON `null` or string row stays a damaged row. Workers racing on such rows,
in processes and as gathered tasks, replay them exactly and run nothing.
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

# Values whose decoding differs between orjson and the standard library, and plain ones.
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


def _tricky_rows(store: Any, thread: str) -> list[tuple[tuple[str, ...], str]]:
    """Rows of every kind above, written as JSON text; their keys."""
    ns = ("replay_guard", "ledger", thread)
    prefix = ".".join(ns)
    texts = {
        "tricky": json.dumps({**TRICKY, "huge": "PLACEHOLDER"}).replace('"PLACEHOLDER"', "1e400"),
        "big": json.dumps(TRICKY),  # no number orjson refuses: orjson decodes the row
        "null": "null",
        "string": '"a row that is a JSON string"',
        "list": "[18446744073709551616, 1e400, -0, 1.5e308]",
    }
    for key, text in texts.items():
        _put_text(store.conn, prefix, key, text)
    return [(ns, key) for key in texts]


def _as_psycopg_reads(uri: str, keys: list[tuple[tuple[str, ...], str]]) -> list[Any]:
    """The rows as psycopg's `jsonb` loader decodes them (the standard library's `json`).

    What the ledger's reads answered before they fetched JSON text (9c799ef). Not the
    store's `get`: `PostgresStore` decodes with orjson (2**70 reads as a float there).
    """
    import psycopg

    values = []
    with psycopg.connect(uri, autocommit=True) as conn:
        for ns, key in keys:
            row = conn.execute(
                "SELECT value FROM store WHERE prefix = %s AND key = %s", (".".join(ns), key)
            ).fetchone()
            assert row is not None
            # A JSON null row is a damaged row to the ledger (`_NULL_ROW`), never an absent one.
            values.append(store_cas._NULL_ROW if row[0] is None else row[0])
    return values


def test_rows_read_as_json_text_decode_as_the_store_reads_them(pg_uri):
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        keys = _tricky_rows(store, _thread())
        expected = _as_psycopg_reads(pg_uri, keys)
        assert expected[1]["big"] == 2**70 + 1
        assert isinstance(expected[1]["big"], int)
        assert expected[0]["huge"] == 10**400

        # repr: an integer read as a float may still compare equal (2**70 == 2.0**70).
        assert _exact(store_cas.read_rows(store, keys)) == _exact(expected)
        assert _exact(store_cas.read_rows(store, keys[1:2])) == _exact(expected[1:2])
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
        keys = _tricky_rows(store, _thread())
        expected = _as_psycopg_reads(pg_uri, keys)

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
    """Calls 0 .. calls-1 of a thread recorded by hand, their content `TRICKY`."""
    for i in range(calls):
        ctx = context(thread, i)
        row = started_entry(ctx, args=ctx.args, idempotency_key=None)
        done = finished_entry(row, "x", None, "success").to_value()
        # An outcome in the codec's first format (content as it is): its numbers reach the
        # row as they are, which `encode_result` no longer writes (it tags big integers).
        done["result"] = {"content": "PLACEHOLDER", "status": "success"}
        text = json.dumps(done).replace('"PLACEHOLDER"', json.dumps(TRICKY))
        _put_text(store.conn, ".".join(ctx.rows_ns), ctx.identity.key, text)


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
