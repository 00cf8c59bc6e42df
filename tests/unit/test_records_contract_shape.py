"""Execution records written in the record contract's own JSON shape, by hand."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from langgraph_replay_guard import (
    ExecutionRecord,
    NotReplayableError,
    ReplayedRunError,
    ReplayEngine,
    batch_replay,
    compute_envelope_hash,
    verify_event_sequence,
    verify_record_integrity,
)
from langgraph_replay_guard.records import ErrorInfo, invalidate_record

ENVELOPE = {
    "version": "1.0",
    "intent": {"name": "support.ticket.analyze", "version": "1.0"},
    "payload": {"ticket": "T-17", "text": "My invoice is wrong."},
    "context": {"sourceAgent": "gateway", "priority": "normal"},
}


def contract_record(
    *,
    execution_id: str = "exec-success",
    status: str = "success",
    seqs: tuple[int, ...] = (1, 2, 3),
) -> dict[str, Any]:
    """A record as the contract writes it: JSON text, nothing built with this package."""
    if status == "success":
        final = {
            "version": "1.0",
            "status": "success",
            "payload": {"category": "billing", "confidence": 0.92},
            "metadata": {"agent": "classifier", "latencyMs": 41},
            "error": None,
        }
    else:
        final = {
            "version": "1.0",
            "status": "error",
            "payload": None,
            "error": {
                "code": "AGENT_ERROR",
                "message": "classifier timed out",
                "retryable": True,
                "details": {"timeoutMs": 5000},
            },
        }
    event_kinds = ["INTENT_RECEIVED", "AGENT_ATTEMPT_START", "AGENT_ATTEMPT_END", "FINAL"]
    events = [
        {"seq": seq, "type": event_kinds[i % 4], "payload": {"agent": "classifier", "n": i}}
        for i, seq in enumerate(seqs)
    ]
    text = json.dumps(
        {
            "header": {
                "executionId": execution_id,
                "createdUtcIso": "2025-03-04T05:06:07.000008Z",
                "envelopeHash": compute_envelope_hash(ENVELOPE),
                "replayable": True,
                "replayableReason": None,
            },
            "envelope": ENVELOPE,
            "routerDecision": {"agent": "classifier", "reason": "capability match"},
            "events": events,
            "finalResponse": final,
        }
    )
    data: dict[str, Any] = json.loads(text)
    return data


@pytest.mark.parametrize("status", ["success", "error"])
def test_a_contract_record_loads_and_dumps_back_to_the_same_json(status: str) -> None:
    data = contract_record(status=status)
    record = ExecutionRecord.model_validate(data)
    assert record.to_json_data() == data
    assert json.loads(record.model_dump_json()) == data
    # and once more through JSON text, as a store does
    again = ExecutionRecord.model_validate_json(record.model_dump_json())
    assert again.to_json_data() == data


def test_contract_events_keep_only_their_own_fields() -> None:
    record = ExecutionRecord.model_validate(contract_record())
    first = record.events[0].model_dump()
    assert first == {
        "seq": 1,
        "type": "INTENT_RECEIVED",
        "payload": {"agent": "classifier", "n": 0},
    }
    assert "kind" not in first


def test_replay_of_a_contract_success_record_returns_its_final_response() -> None:
    data = contract_record()
    result = ReplayEngine(ExecutionRecord.model_validate(data)).replay()
    assert result.response == data["finalResponse"]
    assert result.payload == {"category": "billing", "confidence": 0.92}
    assert result.metadata == {"agent": "classifier", "latencyMs": 41}
    assert result.fromReplay is True
    assert result.originalExecutionId == "exec-success"
    assert result.warnings == []


def test_replay_of_a_contract_error_record_raises_the_recorded_error() -> None:
    data = contract_record(execution_id="exec-error", status="error")
    engine = ReplayEngine(ExecutionRecord.model_validate(data))
    assert engine.is_replayable()  # an error is a recorded outcome: it replays (as the error)
    with pytest.raises(ReplayedRunError) as info:
        engine.replay()
    assert isinstance(info.value.error, ErrorInfo)
    assert info.value.error.code == "AGENT_ERROR"
    assert info.value.error.message == "classifier timed out"
    assert "AGENT_ERROR: classifier timed out" in str(info.value)
    assert info.value.result.response == data["finalResponse"]
    outcome = batch_replay({"exec-error": engine.record}, ["exec-error"])
    assert isinstance(outcome["exec-error"], ReplayedRunError)


def test_is_replayable_unpacks_and_tests_true() -> None:
    engine = ReplayEngine(ExecutionRecord.model_validate(contract_record()))
    ok, reason = engine.is_replayable()
    assert (ok, reason) == (True, None)
    assert engine.is_replayable()
    if not engine.is_replayable():
        pytest.fail("a replayable record must test true")


@pytest.mark.parametrize(
    ("reason", "make"),
    [
        ("manually_invalidated", lambda r: invalidate_record(r)),
        (
            "execution_incomplete",
            lambda r: r.model_copy(
                update={
                    "header": r.header.model_copy(
                        update={"replayable": False, "replayableReason": "execution_incomplete"}
                    )
                }
            ),
        ),
    ],
)
def test_is_replayable_unpacks_and_tests_false(reason: str, make: Any) -> None:
    engine = ReplayEngine(make(ExecutionRecord.model_validate(contract_record())))
    ok, why = engine.is_replayable()
    assert ok is False
    assert why == reason
    assert not engine.is_replayable()
    assert engine.is_replayable().reason == reason
    with pytest.raises(NotReplayableError) as info:
        engine.replay()
    assert info.value.reason == reason


def test_contract_record_passes_integrity_and_sequence_checks() -> None:
    data = contract_record()
    record = ExecutionRecord.model_validate(data)
    report = verify_record_integrity(record)
    assert report
    assert report.ok
    assert report.problems == ()
    assert report.warnings == ()
    assert verify_event_sequence(record)
    assert verify_event_sequence(data)  # raw JSON data of the record
    assert verify_event_sequence(data["events"])  # or just its events
    assert verify_record_integrity(data)


def test_a_gap_in_seq_is_a_warning_not_a_failure() -> None:
    record = ExecutionRecord.model_validate(contract_record(seqs=(1, 2, 5, 6)))
    sequence = verify_event_sequence(record)
    assert sequence
    assert sequence.problems == ()
    assert sequence.warnings == (
        "event at position 2 has seq 5, after seq 2 (events 3..4 are missing)",
    )
    integrity = verify_record_integrity(record)
    assert integrity
    assert integrity.warnings == sequence.warnings
    engine = ReplayEngine(record)
    assert engine.is_replayable() == (True, None)
    assert engine.replay().payload == {"category": "billing", "confidence": 0.92}


def test_a_decreasing_seq_fails_and_the_record_is_corrupted() -> None:
    record = ExecutionRecord.model_validate(contract_record(seqs=(1, 3, 2)))
    sequence = verify_event_sequence(record)
    assert not sequence
    assert sequence.ok is False
    assert sequence.problems == (
        "event at position 2 has seq 2, which is not after seq 3 (events out of order or repeated)",
    )
    assert not verify_record_integrity(record)
    engine = ReplayEngine(record)
    assert engine.is_replayable() == (False, "record_corrupted")
    with pytest.raises(NotReplayableError) as info:
        engine.replay()
    assert info.value.reason == "record_corrupted"


@pytest.mark.parametrize(
    ("status", "error", "problem"),
    [
        ("error", None, "status is 'error' but there is no finalResponse.error"),
        ("success", {"code": "X", "message": "m"}, "status is 'success' but it has an error"),
    ],
)
def test_status_and_error_must_agree(status: str, error: Any, problem: str) -> None:
    data = contract_record()
    data["finalResponse"]["status"] = status
    data["finalResponse"]["error"] = error
    report = verify_record_integrity(data)
    assert not report
    assert problem in report.problems[0]


def test_recorder_shaped_records_keep_their_json() -> None:
    data = contract_record()
    data["finalResponse"] = {"payload": {"a": 1}, "metadata": {}, "error": None}
    data["events"] = [{"seq": 1, "kind": "tool_start", "name": "search"}]
    del data["routerDecision"]
    record = ExecutionRecord.model_validate(copy.deepcopy(data))
    assert record.to_json_data() == data
    assert record.events[0].kind == "tool_start"
