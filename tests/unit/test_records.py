"""Execution records without LangGraph: hashing, integrity, the replay engine, cache, batch."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from langgraph_replay_guard import (
    CachingReplayEngine,
    ExecutionRecord,
    NotReplayableError,
    RecordNotFoundError,
    ReplayedRunError,
    ReplayEngine,
    ReplayHashMismatchError,
    batch_replay,
    compute_envelope_hash,
    verify_event_sequence,
    verify_record_integrity,
)
from langgraph_replay_guard.records import (
    NOT_REPLAYABLE_REASONS,
    FinalResponse,
    RecordedError,
    RecordEvent,
    RecordHeader,
    invalidate_record,
)

ENVELOPE = {
    "graph": "support-agent",
    "input": {"messages": [{"role": "user", "content": "Show me plan P1002."}]},
    "config": {"configurable": {"model": "small"}, "recursion_limit": 50},
}
PAYLOAD = {"messages": [{"role": "assistant", "content": "Premium Plan, 15 GB", "score": 0.5}]}


def make_record(
    *,
    execution_id: str = "run-1",
    envelope: dict[str, Any] | None = None,
    payload: Any = None,
    replayable: bool = True,
    reason: str | None = None,
    error: RecordedError | None = None,
    events: list[dict[str, Any]] | None = None,
    final: bool = True,
) -> ExecutionRecord:
    envelope = copy.deepcopy(ENVELOPE if envelope is None else envelope)
    events = (
        events
        if events is not None
        else [
            {"seq": 1, "kind": "model_start"},
            {"seq": 2, "kind": "model_end"},
            {"seq": 3, "kind": "tool_start", "name": "get_details_by_id"},
            {"seq": 4, "kind": "tool_end", "name": "get_details_by_id"},
        ]
    )
    return ExecutionRecord(
        header=RecordHeader(
            executionId=execution_id,
            createdUtcIso="2025-01-02T03:04:05.000006Z",
            envelopeHash=compute_envelope_hash(envelope),
            replayable=replayable,
            replayableReason=reason,  # type: ignore[arg-type]
        ),
        envelope=envelope,
        events=[RecordEvent.model_validate(e) for e in events],
        finalResponse=(
            FinalResponse(
                payload=copy.deepcopy(PAYLOAD if payload is None else payload),
                metadata={"modelCalls": 1},
                error=error,
            )
            if final
            else None
        ),
    )


# -- envelope hash ---------------------------------------------------------------------------


def test_envelope_hash_is_prefixed_sha256_of_canonical_json() -> None:
    digest = compute_envelope_hash(ENVELOPE)
    assert digest.startswith("sha256:")
    assert len(digest) == len("sha256:") + 64
    reordered = {"config": ENVELOPE["config"], "input": ENVELOPE["input"], "graph": "support-agent"}
    assert compute_envelope_hash(reordered) == digest
    with_float = copy.deepcopy(ENVELOPE)
    with_float["config"]["recursion_limit"] = 50.0
    assert compute_envelope_hash(with_float) == digest


def test_envelope_hash_ignores_routing_fields_only() -> None:
    digest = compute_envelope_hash(ENVELOPE)
    routed = copy.deepcopy(ENVELOPE)
    routed["run_id"] = "0b7f"
    routed["config"].update(
        {"tags": ["prod"], "metadata": {"user": "x"}, "callbacks": None, "run_name": "n"}
    )
    routed["config"]["configurable"].update(
        {
            "thread_id": "t-9",
            "checkpoint_id": "c",
            "checkpoint_ns": "",
            "__pregel_runtime": "internal",
        }
    )
    assert compute_envelope_hash(routed) == digest
    changed = copy.deepcopy(ENVELOPE)
    changed["config"]["configurable"]["model"] = "large"
    assert compute_envelope_hash(changed) != digest
    other_input = copy.deepcopy(ENVELOPE)
    other_input["input"]["messages"][0]["content"] = "Show me plan P1003."
    assert compute_envelope_hash(other_input) != digest


# -- integrity -------------------------------------------------------------------------------


def test_a_fresh_record_passes_its_integrity_checks() -> None:
    report = verify_record_integrity(make_record())
    assert report.ok
    assert bool(report)
    assert report.problems == ()


def test_a_changed_envelope_is_detected() -> None:
    record = make_record()
    record.envelope["input"]["messages"][0]["content"] = "Refund everything."
    report = verify_record_integrity(record)
    assert not report
    assert "envelope was changed" in report.problems[0]


@pytest.mark.parametrize(
    ("seqs", "expected"),
    [
        ([1, 2, 3], None),
        ([], None),
        ([1, 2, 4], None),  # a gap is only a warning (the contract: strictly increasing)
        ([1, 3, 2], "has seq 2, which is not after seq 3"),
        ([2, 1], "has seq 1, which is not after seq 2"),
        ([1, 2, 2], "out of order or repeated"),
        ([0, 1], "is not after the start"),
    ],
)
def test_event_sequence_must_strictly_increase(seqs: list[int], expected: str | None) -> None:
    report = verify_event_sequence([{"seq": s, "kind": "x"} for s in seqs])
    if expected is None:
        assert report.ok
    else:
        assert not report.ok
        assert expected in report.problems[0]


def test_event_sequence_rejects_non_integer_seq() -> None:
    assert not verify_event_sequence([{"seq": True, "kind": "x"}])
    assert not verify_event_sequence([{"seq": "1", "kind": "x"}])
    assert not verify_event_sequence([{"kind": "x"}])


def test_events_out_of_order_make_the_record_corrupted() -> None:
    record = make_record(events=[{"seq": 2, "kind": "tool_end"}, {"seq": 1, "kind": "tool_start"}])
    engine = ReplayEngine(record)
    assert not engine.is_replayable()
    with pytest.raises(NotReplayableError) as info:
        engine.replay()
    assert info.value.reason == "record_corrupted"
    assert "seq 2" in str(info.value)


def test_integrity_of_raw_json_data() -> None:
    data = make_record().to_json_data()
    assert verify_record_integrity(data).ok
    del data["header"]["envelopeHash"]
    report = verify_record_integrity(data)
    assert not report.ok
    assert "header.envelopeHash" in report.problems[0]


def test_inconsistent_header_is_a_problem() -> None:
    record = make_record()
    record.header.replayableReason = "recording_failure"
    assert "gives the reason" in verify_record_integrity(record).problems[0]
    no_response = make_record(final=False)
    assert "no final response" in verify_record_integrity(no_response).problems[0]


# -- replay ------------------------------------------------------------------------------------


def test_replay_returns_the_recorded_response_exactly() -> None:
    payload = {"a": [1, 2.5, None, True, "é\u0000"], "nan": math.inf}
    record = make_record(payload=payload)
    result = ReplayEngine(record).replay()
    assert result.payload == payload
    assert result.fromReplay is True
    assert result.originalExecutionId == "run-1"
    assert result.originalTimestamp == "2025-01-02T03:04:05.000006Z"
    assert result.metadata == {"modelCalls": 1}
    assert result.warnings == []
    result.payload["a"].append("changed by the caller")
    assert ReplayEngine(record).replay().payload == payload  # the record is not touched


def test_replay_checks_the_envelope() -> None:
    engine = ReplayEngine(make_record())
    routed = copy.deepcopy(ENVELOPE)
    routed["config"]["configurable"]["thread_id"] = "another thread"
    assert engine.replay(routed).payload == PAYLOAD
    changed = copy.deepcopy(ENVELOPE)
    changed["input"]["messages"][0]["content"] = "Show me plan P1003."
    with pytest.raises(ReplayHashMismatchError) as info:
        engine.replay(changed)
    assert info.value.expected == engine.record.header.envelopeHash
    assert info.value.actual == compute_envelope_hash(changed)
    assert info.value.expected in str(info.value)
    assert info.value.actual in str(info.value)
    with pytest.raises(ReplayHashMismatchError):
        engine.replay(changed, force=True)  # force is for non-replayable states only


@pytest.mark.parametrize("reason", NOT_REPLAYABLE_REASONS)
def test_each_non_replayable_state_refuses_unless_forced(reason: str) -> None:
    record = make_record(replayable=False, reason=reason)
    engine = ReplayEngine(record)
    assert not engine.is_replayable()
    assert engine.not_replayable_reason() == reason
    with pytest.raises(NotReplayableError) as info:
        engine.replay()
    assert info.value.reason == reason
    assert reason in str(info.value)
    assert "force=True" in str(info.value)
    forced = engine.replay(force=True)
    assert forced.payload == PAYLOAD
    assert len(forced.warnings) == 1
    assert reason in forced.warnings[0]
    assert forced.warnings[0].startswith("forced replay")


def test_a_started_record_cannot_be_replayed_even_forced() -> None:
    record = ExecutionRecord.started("run-2", ENVELOPE)
    assert record.header.replayableReason == "execution_incomplete"
    assert verify_record_integrity(record).ok
    with pytest.raises(NotReplayableError) as info:
        ReplayEngine(record).replay(force=True)
    assert info.value.reason == "execution_incomplete"
    assert "no recorded response" in str(info.value)


def test_invalidated_record() -> None:
    record = make_record()
    invalid = invalidate_record(record)
    assert record.header.replayable  # a copy
    assert invalid.header.replayableReason == "manually_invalidated"
    assert verify_record_integrity(invalid).ok
    with pytest.raises(NotReplayableError) as info:
        ReplayEngine(invalid).replay()
    assert info.value.reason == "manually_invalidated"


def test_an_error_response_replays_as_an_error() -> None:
    error = RecordedError(
        type="LoopAbortedError",
        module="langgraph_replay_guard.errors",
        message="Loop aborted: 'get_details_by_id' called 4 times",
        details={"tool": "get_details_by_id", "count": 4},
    )
    record = make_record(error=error, payload={})
    with pytest.raises(ReplayedRunError) as info:
        ReplayEngine(record).replay()
    assert info.value.error == error
    assert "LoopAbortedError" in str(info.value)
    assert info.value.result.fromReplay
    assert info.value.result.originalExecutionId == "run-1"


def test_recorded_error_from_exception_keeps_public_scalar_attributes() -> None:
    from langgraph_replay_guard import LoopAbortedError

    exc = LoopAbortedError("stop", tool="think", reason="cycle", count=5)
    error = RecordedError.from_exception(exc)
    assert error.type == "LoopAbortedError"
    assert error.message == "stop"
    assert error.details == {"tool": "think", "reason": "cycle", "count": 5}


# -- caching and batches -----------------------------------------------------------------------


class DictSource:
    """Records by id, counting loads (a stand-in for a store in engine-only tests)."""

    def __init__(self, records: list[ExecutionRecord]) -> None:
        self.records = {r.execution_id: r for r in records}
        self.loads = 0

    def get(self, execution_id: str) -> ExecutionRecord | None:
        self.loads += 1
        return self.records.get(execution_id)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_caching_engine_serves_from_memory_until_the_ttl() -> None:
    source = DictSource([make_record()])
    clock = Clock()
    cache = CachingReplayEngine(source, ttl_seconds=10, clock=clock)
    assert cache.replay("run-1").payload == PAYLOAD
    assert cache.replay("run-1").payload == PAYLOAD
    assert source.loads == 1
    assert (cache.hits, cache.misses) == (1, 1)
    source.records["run-1"] = invalidate_record(source.records["run-1"])
    clock.now = 9.0
    assert cache.replay("run-1").payload == PAYLOAD  # still the cached copy
    clock.now = 10.5
    with pytest.raises(NotReplayableError):
        cache.replay("run-1")  # reloaded after the TTL
    assert source.loads == 2


def test_caching_engine_evict_and_bound() -> None:
    source = DictSource([make_record(execution_id=f"run-{i}") for i in range(3)])
    cache = CachingReplayEngine(source, max_entries=2)
    for i in range(3):
        cache.replay(f"run-{i}")
    assert source.loads == 3
    cache.replay("run-2")
    cache.replay("run-1")
    assert source.loads == 3  # the two newest are cached
    cache.replay("run-0")
    assert source.loads == 4  # the oldest was dropped
    cache.evict("run-0")
    cache.replay("run-0")
    assert source.loads == 5
    with pytest.raises(RecordNotFoundError):
        cache.replay("missing")
    with pytest.raises(ValueError, match="max_entries"):
        CachingReplayEngine(source, max_entries=0)


def test_batch_replay_reports_each_id() -> None:
    source = DictSource(
        [
            make_record(execution_id="good"),
            make_record(execution_id="incomplete", replayable=False, reason="execution_incomplete"),
            make_record(execution_id="failed", error=RecordedError(type="E", message="boom")),
        ]
    )
    other = copy.deepcopy(ENVELOPE)
    other["graph"] = "another"
    results = batch_replay(
        source,
        ["good", "missing", "incomplete", "failed", "good2"],
        envs={"good2": other},
    )
    assert list(results) == ["good", "missing", "incomplete", "failed", "good2"]
    good = results["good"]
    assert not isinstance(good, Exception)
    assert good.payload == PAYLOAD
    assert isinstance(results["missing"], RecordNotFoundError)
    incomplete = results["incomplete"]
    assert isinstance(incomplete, NotReplayableError)
    assert incomplete.reason == "execution_incomplete"
    assert isinstance(results["failed"], ReplayedRunError)
    assert isinstance(results["good2"], RecordNotFoundError)
    source.records["good2"] = make_record(execution_id="good2")
    mismatch = batch_replay(source, ["good2"], envs={"good2": other})["good2"]
    assert isinstance(mismatch, ReplayHashMismatchError)
    forced = batch_replay(CachingReplayEngine(source), ["incomplete"], force=True)["incomplete"]
    assert not isinstance(forced, Exception)
    assert forced.warnings
