"""Issue 27, item 15: hostile files get a clear error (exit 2, naming the file) and bounded
work: deeply nested JSON anywhere the CLI reads JSON, and a record header that claims
10**12 body chunks (SQLite, in real subprocesses)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from langgraph_replay_guard.records import ExecutionRecord, RecordStore
from tests import warm_children

DEEP = "[" * 100_000 + "]" * 100_000
"""Nested past Python's recursion limit: `json.loads` raises RecursionError on it."""


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return warm_children.run(
        [sys.executable, "-m", "langgraph_replay_guard.cli.main", *args],
        env={**os.environ, "LANGSMITH_TRACING": "false"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _clear(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert "RecursionError" not in result.stderr + result.stdout
    for word in words:
        assert word in result.stderr + result.stdout, (word, result.stderr, result.stdout)


def _record(execution_id: str) -> ExecutionRecord:
    record = ExecutionRecord.model_validate(
        {
            "header": {
                "executionId": execution_id,
                "createdUtcIso": "2025-01-01T00:00:00Z",
                "envelopeHash": "",
                "replayable": True,
            },
            "envelope": {"input": "hi"},
            "events": [],
            "finalResponse": {"status": "ok", "payload": {"answer": 1}},
        }
    )
    from langgraph_replay_guard.records.envelope import compute_envelope_hash

    header = record.header.model_copy(
        update={"envelopeHash": compute_envelope_hash({"input": "hi"})}
    )
    return record.model_copy(update={"header": header})


def test_deeply_nested_json_files_are_refused_with_exit_2(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    trajectories = tmp_path / "deep.jsonl"
    trajectories.write_text(DEEP + "\n")
    nested_args = tmp_path / "nested.jsonl"  # parses, but deeper than any trajectory
    arg: object = "x"
    for _ in range(500):
        arg = {"a": arg}
    nested_args.write_text(json.dumps({"calls": [{"tool": "t", "args": arg}]}) + "\n")

    result = _cli("eval", str(trajectories))
    assert result.returncode == 2
    _clear(result, "deep.jsonl", "nested deeper")
    result = _cli("eval", str(nested_args))
    assert result.returncode == 2
    _clear(result, "nested.jsonl", "nested deeper")

    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"calls": [{"tool": "t", "args": {}}]}) + "\n")
    for option in ("--config", "--policy"):
        result = _cli("eval", str(good), option, str(deep))
        assert result.returncode == 2, (option, result.stderr)
        _clear(result, option, "deep.json", "nested too deeply")

    record = tmp_path / "record.json"
    record.write_text(json.dumps(_record("r1").to_json_data()))
    result = _cli("records", "replay", "--file", str(record), "--envelope", str(deep))
    assert result.returncode == 2
    _clear(result, "deep.json", "nested deeper")
    result = _cli("records", "show", "--file", str(deep))
    assert result.returncode == 2
    _clear(result, "deep.json", "nested deeper")


def _store_record(db: Path, execution_id: str) -> None:
    from langgraph.store.sqlite import SqliteStore

    with SqliteStore.from_conn_string(str(db)) as store:
        store.setup()
        RecordStore(store, namespace=("replay_guard", "records")).put(_record(execution_id))


def _edit(db: Path, key: str, change) -> None:
    with sqlite3.connect(db) as conn:
        (value,) = conn.execute("SELECT value FROM store WHERE key = ?", (key,)).fetchone()
        conn.execute("UPDATE store SET value = ? WHERE key = ?", (change(value), key))


def test_a_header_claiming_10_to_the_12_chunks_is_reported_not_read(tmp_path):
    db = tmp_path / "records.db"
    _store_record(db, "huge")
    _store_record(db, "huge-chars")

    def claim(chars: bool):
        def change(value: str) -> str:
            data = json.loads(value)
            data["body"]["chunks"] = 10**12
            if chars:
                data["body"]["chars"] = 10**12
            return json.dumps(data)

        return change

    _edit(db, "huge", claim(chars=False))
    _edit(db, "huge-chars", claim(chars=True))  # both numbers lie: read a page, then stop
    for execution_id in ("huge", "huge-chars"):
        shown = _cli("records", "show", execution_id, "--db", str(db), timeout=60)
        assert shown.returncode == 0, shown.stderr
        _clear(shown, "record_corrupted")
        replayed = _cli("records", "replay", execution_id, "--db", str(db), timeout=60)
        assert replayed.returncode == 1
        _clear(replayed, "record_corrupted")
    verified = _cli("records", "verify", "--db", str(db), timeout=60)
    assert verified.returncode == 1
    _clear(verified, "CORRUPTED huge", "CORRUPTED huge-chars", "0 ok, 2 corrupted")


def test_a_deeply_nested_stored_body_is_a_corrupted_record(tmp_path):
    db = tmp_path / "records.db"
    _store_record(db, "deep")
    text = json.dumps({"envelope": json.loads("[" * 500 + "]" * 500)}, separators=(",", ":"))
    import hashlib

    def change(value: str) -> str:
        data = json.loads(value)
        data["body"].update(
            chunks=1, chars=len(text), sha256=hashlib.sha256(text.encode()).hexdigest()
        )
        return json.dumps(data)

    _edit(db, "deep", change)
    _edit(db, "deep/0", lambda _value: json.dumps({"text": text}))
    verified = _cli("records", "verify", "--db", str(db))
    assert verified.returncode == 1
    _clear(verified, "CORRUPTED deep", "nested deeper")
