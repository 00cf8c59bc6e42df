"""`replay-guard records verify/replay/show` on records in the contract's shape, in SQLite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import ExecutionRecord
from langgraph_replay_guard.records import RecordStore
from tests.integration.test_records_cli import cli
from tests.unit.test_records_contract_shape import contract_record


def store_records(target: str, records: list[dict[str, Any]]) -> None:
    with SqliteStore.from_conn_string(target) as store:
        store.setup()
        for data in records:
            RecordStore(store).put(ExecutionRecord.model_validate(data))


def test_contract_records_round_trip_through_a_sqlite_store(tmp_path: Path) -> None:
    target = str(tmp_path / "records.db")
    success, error = contract_record(), contract_record(execution_id="exec-error", status="error")
    store_records(target, [success, error])
    with SqliteStore.from_conn_string(target) as store:
        records = RecordStore(store)
        for data in (success, error):
            loaded = records.get(data["header"]["executionId"])
            assert loaded is not None
            assert loaded.problems == []
            assert loaded.to_json_data() == data
        failed = {i.execution_id: i.failed for i in records.list_records()}
        assert failed == {"exec-success": False, "exec-error": True}


def test_cli_verifies_and_replays_contract_records(tmp_path: Path) -> None:
    target = str(tmp_path / "records.db")
    success = contract_record(seqs=(1, 2, 4))  # a gap: a warning only
    error = contract_record(execution_id="exec-error", status="error")
    swapped = contract_record(execution_id="exec-swapped", seqs=(1, 3, 2))
    store_records(target, [success, error, swapped])

    verified = cli("verify", "exec-success", "exec-error", "--db", target)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "ok        exec-success" in verified.stdout
    assert "warning: event at position 2 has seq 4, after seq 2 (events 3..3 are missing)" in (
        verified.stdout
    )
    assert "2 ok, 0 corrupted" in verified.stdout
    report = json.loads(cli("verify", "exec-success", "--db", target, "--json").stdout)
    assert report[0]["ok"] is True
    assert report[0]["replayable"] is True
    assert report[0]["warnings"] == [
        "event at position 2 has seq 4, after seq 2 (events 3..3 are missing)"
    ]

    corrupted = cli("verify", "--db", target)
    assert corrupted.returncode == 1
    assert "CORRUPTED exec-swapped: event at position 2 has seq 2, which is not after seq 3" in (
        corrupted.stdout
    )
    assert "2 ok, 1 corrupted" in corrupted.stdout

    replayed = cli("replay", "exec-success", "--db", target)
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == success["finalResponse"]["payload"]
    result = json.loads(cli("replay", "exec-success", "--db", target, "--json").stdout)
    assert result["payload"] == success["finalResponse"]["payload"]
    assert result["metadata"] == success["finalResponse"]["metadata"]
    assert result["fromReplay"] is True
    assert result["originalExecutionId"] == "exec-success"

    failed = cli("replay", "exec-error", "--db", target)
    assert failed.returncode == 1
    assert "failed with AGENT_ERROR: classifier timed out" in failed.stderr
    failed_json = json.loads(cli("replay", "exec-error", "--db", target, "--json").stdout)
    assert failed_json["error"] == error["finalResponse"]["error"]

    refused = cli("replay", "exec-swapped", "--db", target)
    assert refused.returncode == 1
    assert "record_corrupted" in refused.stderr

    shown = cli("show", "exec-error", "--db", target)
    assert shown.returncode == 0, shown.stderr
    assert "AGENT_ATTEMPT_START" in shown.stdout
    assert "final response: error AGENT_ERROR: classifier timed out" in shown.stdout
    assert json.loads(cli("show", "exec-error", "--db", target, "--json").stdout) == {
        **error,
        "problems": [],
    }
