"""Execution records in real LangGraph stores: InMemoryStore, SqliteStore, PostgresStore.

Round trips (a 10 MB payload included), listing, invalidation, and damaged records:
truncated or edited bodies and headers, written through the store API and with raw SQL.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import (
    ExecutionRecord,
    NotReplayableError,
    RecordNotFoundError,
    RecordStore,
    ReplayEngine,
    compute_envelope_hash,
    verify_record_integrity,
)
from langgraph_replay_guard.records import FinalResponse, RecordEvent, RecordHeader

TEN_MB = 10 * 1024 * 1024


def record(
    execution_id: str, payload: Any, *, created: str = "2025-01-01T00:00:00.000000Z"
) -> ExecutionRecord:
    envelope = {"graph": "g", "input": {"messages": [["user", f"question {execution_id}"]]}}
    return ExecutionRecord(
        header=RecordHeader(
            executionId=execution_id,
            createdUtcIso=created,
            envelopeHash=compute_envelope_hash(envelope),
            replayable=True,
        ),
        envelope=envelope,
        events=[
            RecordEvent(seq=1, kind="tool_start", name="search", args={"q": "x"}),  # type: ignore[call-arg]
            RecordEvent(seq=2, kind="tool_end", name="search", output="found"),  # type: ignore[call-arg]
        ],
        finalResponse=FinalResponse(payload=payload, metadata={"durationMs": 1.5}),
    )


def test_round_trip_list_invalidate_delete(any_store: BaseStore) -> None:
    records = RecordStore(any_store)
    payload = {"answer": "é\u0000\ud800 ok", "n": [1, 1.0, 2.5e-300, None], "nan": float("inf")}
    first = record("run-a", payload, created="2025-01-01T00:00:00.000000Z")
    records.put(first)
    records.put(record("run-b", {"answer": 2}, created="2025-01-02T00:00:00.000000Z"))
    loaded = records.get("run-a")
    assert loaded is not None
    assert loaded == first
    assert loaded.finalResponse is not None
    assert loaded.finalResponse.payload == payload
    assert records.get("missing") is None

    listed = records.list_records()
    assert [i.execution_id for i in listed] == ["run-b", "run-a"]
    assert listed[1].events == 2
    assert listed[1].header == first.header
    assert records.list_records(limit=1)[0].execution_id == "run-b"

    header = records.invalidate("run-a")
    assert header.replayableReason == "manually_invalidated"
    invalid = records.get("run-a")
    assert invalid is not None
    assert verify_record_integrity(invalid).ok
    with pytest.raises(NotReplayableError) as info:
        ReplayEngine(invalid).replay()
    assert info.value.reason == "manually_invalidated"
    with pytest.raises(RecordNotFoundError):
        records.invalidate("missing")

    assert records.delete("run-a")
    assert not records.delete("run-a")
    assert records.get("run-a") is None
    assert [i.execution_id for i in records.list_records()] == ["run-b"]


def test_ten_megabyte_payload_round_trips(any_store: BaseStore) -> None:
    records = RecordStore(any_store)
    big = ("plan P1002 é \u0000 " * (TEN_MB // 16 + 1))[:TEN_MB]
    payload = {"messages": [{"role": "assistant", "content": big}], "size": len(big)}
    records.put(record("big", payload))
    loaded = records.get("big")
    assert loaded is not None
    assert not loaded.problems
    assert loaded.finalResponse is not None
    assert loaded.finalResponse.payload["messages"][0]["content"] == big
    chunks = any_store.search(records.body_namespace, limit=100)
    assert len(chunks) > 1  # split, each value well under any backend limit
    assert ReplayEngine(loaded).replay().payload == payload
    # a smaller record under the same id leaves no stale chunk behind
    records.put(record("big", {"small": True}))
    assert len(any_store.search(records.body_namespace, limit=100)) == 1
    reloaded = records.get("big")
    assert reloaded is not None
    assert reloaded.finalResponse is not None
    assert reloaded.finalResponse.payload == {"small": True}


def _corrupted(records: RecordStore, execution_id: str) -> ExecutionRecord:
    loaded = records.get(execution_id)
    assert loaded is not None
    engine = ReplayEngine(loaded)
    assert not engine.is_replayable()
    with pytest.raises(NotReplayableError) as info:
        engine.replay()
    assert info.value.reason == "record_corrupted"
    return loaded


def test_truncated_body_is_record_corrupted(any_store: BaseStore) -> None:
    records = RecordStore(any_store)
    records.put(record("run-t", {"answer": "a long enough answer"}))
    key = "run-t/0"
    text = any_store.get(records.body_namespace, key).value["text"]  # type: ignore[union-attr]
    any_store.put(records.body_namespace, key, {"text": text[:-20]})
    loaded = _corrupted(records, "run-t")
    assert any("truncated" in p for p in loaded.problems)
    assert not verify_record_integrity(loaded).ok


def test_missing_chunk_is_record_corrupted(any_store: BaseStore) -> None:
    records = RecordStore(any_store, chunk_chars=64)
    records.put(record("run-m", {"answer": "x" * 500}))
    any_store.delete(records.body_namespace, "run-m/2")
    loaded = _corrupted(records, "run-m")
    assert any("chunk 3" in p and "missing" in p for p in loaded.problems)


def test_edited_envelope_in_the_store_is_record_corrupted(any_store: BaseStore) -> None:
    records = RecordStore(any_store)
    records.put(record("run-e", {"answer": 1}))
    key = "run-e/0"
    body = json.loads(any_store.get(records.body_namespace, key).value["text"])  # type: ignore[union-attr]
    body["envelope"]["input"]["messages"][0][1] = "refund everything"
    any_store.put(records.body_namespace, key, {"text": json.dumps(body, ensure_ascii=True)})
    loaded = _corrupted(records, "run-e")
    assert loaded.envelope["input"]["messages"][0][1] == "refund everything"
    problems = verify_record_integrity(loaded).problems
    assert any("envelope was changed" in p for p in problems)
    # what was readable can still be forced out, with a warning
    forced = ReplayEngine(loaded).replay(force=True)
    assert forced.payload == {"answer": 1}
    assert "record_corrupted" in forced.warnings[0]


def test_events_out_of_order_in_the_store(any_store: BaseStore) -> None:
    records = RecordStore(any_store)
    original = record("run-o", {"answer": 1})
    original.events.reverse()
    records.put(original)
    loaded = records.get("run-o")
    assert loaded is not None
    assert not loaded.problems  # stored faithfully ...
    with pytest.raises(NotReplayableError) as info:
        ReplayEngine(loaded).replay()  # ... and refused
    assert info.value.reason == "record_corrupted"


def test_invalid_header_is_record_corrupted(any_store: BaseStore) -> None:
    records = RecordStore(any_store)
    records.put(record("run-h", {"answer": 1}))
    value = dict(any_store.get(records.namespace, "run-h").value)  # type: ignore[union-attr]
    value["header"] = {**value["header"], "replayable": "maybe"}
    any_store.put(records.namespace, "run-h", value)
    loaded = _corrupted(records, "run-h")
    assert any("header" in p for p in loaded.problems)
    assert [i.problems != () for i in records.list_records()] == [True]


def test_raw_truncated_rows_in_sqlite(tmp_path: Path) -> None:
    from langgraph.store.sqlite import SqliteStore

    db = tmp_path / "records.db"
    with SqliteStore.from_conn_string(str(db)) as store:
        store.setup()
        records = RecordStore(store)
        records.put(record("run-1", {"answer": "one"}))
        records.put(record("run-2", {"answer": "two"}))
    # a partial write, as a crash or a bad disk would leave it
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE store SET value = substr(value, 1, length(value) - 7) "
            "WHERE prefix = 'replay_guard.records__bodies' AND key = 'run-1/0'"
        )
        conn.execute(
            "UPDATE store SET value = substr(value, 1, 30) "
            "WHERE prefix = 'replay_guard.records' AND key = 'run-2'"
        )
    with SqliteStore.from_conn_string(str(db)) as store:
        records = RecordStore(store)
        body_broken = _corrupted(records, "run-1")
        assert any("body cannot be read" in p for p in body_broken.problems)
        header_broken = _corrupted(records, "run-2")
        assert header_broken.execution_id == "run-2"
        assert any("header cannot be read" in p for p in header_broken.problems)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "async_sqlite"])
def test_async_round_trip(kind: str, tmp_path: Path) -> None:
    async def scenario(store: BaseStore) -> None:
        records = RecordStore(store, chunk_chars=1000)
        original = record("run-async", {"answer": "x" * 5000})
        await records.aput(original)
        assert await records.aget("run-async") == original
        assert [i.execution_id for i in await records.alist_records()] == ["run-async"]
        await records.ainvalidate("run-async")
        loaded = await records.aget("run-async")
        assert loaded is not None
        assert loaded.header.replayableReason == "manually_invalidated"
        assert await records.aget("missing") is None

    async def main() -> None:
        if kind == "memory":
            await scenario(InMemoryStore())
        elif kind == "sqlite":
            from langgraph.store.sqlite import SqliteStore

            with SqliteStore.from_conn_string(str(tmp_path / "s.db")) as store:
                store.setup()
                await scenario(store)  # no async API: runs in a worker thread
        else:
            from langgraph.store.sqlite.aio import AsyncSqliteStore

            async with AsyncSqliteStore.from_conn_string(str(tmp_path / "a.db")) as astore:
                await astore.setup()
                await scenario(astore)

    asyncio.run(main())


def test_a_tenant_namespace_with_dots_is_accepted():
    from langgraph.store.memory import InMemoryStore

    from langgraph_replay_guard.records import RecordStore

    store = RecordStore(InMemoryStore(), namespace=("replay_guard", "acme.example.com", "records"))
    assert store.namespace[1] == "acme%2Eexample%2Ecom"
    assert store.list_records() == []
