"""Execution records: the recorded run, its integrity checks, exact replay, store and recorder."""

from __future__ import annotations

from langgraph_replay_guard.records.engine import (
    CachingReplayEngine,
    RecordSource,
    Replayability,
    ReplayedRunError,
    ReplayEngine,
    ReplayResult,
    batch_replay,
    load_record,
)
from langgraph_replay_guard.records.envelope import ENVELOPE_ROUTING_FIELDS, compute_envelope_hash
from langgraph_replay_guard.records.integrity import (
    IntegrityReport,
    verify_event_sequence,
    verify_record_integrity,
)
from langgraph_replay_guard.records.model import (
    NOT_REPLAYABLE_REASONS,
    ErrorInfo,
    ExecutionRecord,
    FinalResponse,
    RecordedError,
    RecordEvent,
    RecordHeader,
    RecordNotFoundError,
    ReplayableReason,
    first_validation_error,
    invalidate_record,
    utc_now_iso,
)
from langgraph_replay_guard.records.recording import RecordedGraph
from langgraph_replay_guard.records.store import RecordStore, StoredRecordInfo

__all__ = [
    "ENVELOPE_ROUTING_FIELDS",
    "NOT_REPLAYABLE_REASONS",
    "CachingReplayEngine",
    "ErrorInfo",
    "ExecutionRecord",
    "FinalResponse",
    "IntegrityReport",
    "RecordEvent",
    "RecordHeader",
    "RecordNotFoundError",
    "RecordSource",
    "RecordStore",
    "RecordedError",
    "RecordedGraph",
    "ReplayEngine",
    "ReplayResult",
    "Replayability",
    "ReplayableReason",
    "ReplayedRunError",
    "StoredRecordInfo",
    "batch_replay",
    "compute_envelope_hash",
    "first_validation_error",
    "invalidate_record",
    "load_record",
    "utc_now_iso",
    "verify_event_sequence",
    "verify_record_integrity",
]
