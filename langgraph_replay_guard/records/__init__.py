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
from langgraph_replay_guard.records.envelope import (
    ENVELOPE_HASH_ALGORITHMS,
    ENVELOPE_ROUTING_FIELDS,
    EnvelopeHashFormatError,
    compute_envelope_hash,
    envelope_hash_digest,
    envelope_hash_matches,
)
from langgraph_replay_guard.records.files import (
    RecordFileError,
    RecordFiles,
    read_record_file,
    record_file_paths,
)
from langgraph_replay_guard.records.integrity import (
    IntegrityReport,
    verify_event_sequence,
    verify_record_integrity,
)
from langgraph_replay_guard.records.model import (
    NOT_REPLAYABLE_REASONS,
    RESPONSE_STATUSES,
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
    "ENVELOPE_HASH_ALGORITHMS",
    "ENVELOPE_ROUTING_FIELDS",
    "NOT_REPLAYABLE_REASONS",
    "RESPONSE_STATUSES",
    "CachingReplayEngine",
    "EnvelopeHashFormatError",
    "ErrorInfo",
    "ExecutionRecord",
    "FinalResponse",
    "IntegrityReport",
    "RecordEvent",
    "RecordFileError",
    "RecordFiles",
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
    "envelope_hash_digest",
    "envelope_hash_matches",
    "first_validation_error",
    "invalidate_record",
    "load_record",
    "read_record_file",
    "record_file_paths",
    "utc_now_iso",
    "verify_event_sequence",
    "verify_record_integrity",
]
