"""Integrity checks of execution records: envelope hash, event order, header and response."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from langgraph_replay_guard.errors import ReplayGuardError
from langgraph_replay_guard.records.envelope import (
    EnvelopeHashFormatError,
    envelope_hash_matches,
    envelope_hash_of,
)
from langgraph_replay_guard.records.model import (
    ExecutionRecord,
    FinalResponse,
    RecordEvent,
    first_validation_error,
)

__all__ = ["IntegrityReport", "verify_event_sequence", "verify_record_integrity"]


@dataclass(frozen=True)
class IntegrityReport:
    """The result of an integrity check: true when nothing is wrong.

    Attributes:
        problems: What is wrong, one sentence each; empty when the check passed.
        warnings: What is odd but harmless (gaps in the event numbering), one sentence
            each; they never fail the check.
    """

    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the check passed."""
        return not self.problems

    def __bool__(self) -> bool:
        """True when the check passed."""
        return self.ok


def _seq_of(event: Any) -> Any:
    if isinstance(event, RecordEvent):
        return event.seq
    if isinstance(event, Mapping):
        return event.get("seq")
    return getattr(event, "seq", None)


def _events_of(
    record: ExecutionRecord | Mapping[str, Any] | Iterable[RecordEvent | Mapping[str, Any]],
) -> Iterable[Any]:
    if isinstance(record, ExecutionRecord):
        return record.events
    if isinstance(record, Mapping):  # a record's raw JSON data
        events = record.get("events")
        return events if isinstance(events, list) else []
    return record


def verify_event_sequence(
    record: ExecutionRecord | Mapping[str, Any] | Iterable[RecordEvent | Mapping[str, Any]],
) -> IntegrityReport:
    """Check that the events' `seq` numbers strictly increase.

    A repeated or decreasing `seq` (events swapped or duplicated) fails the check; a gap
    (`1, 2, 4`) is only a warning, as the record contract allows. Numbers start at 1.

    Args:
        record: The record, its raw JSON data, or its events (models or raw mappings).

    Returns:
        The report: its problems name the first event out of order, its warnings the gaps.
    """
    warnings: list[str] = []
    previous = 0
    for position, event in enumerate(_events_of(record)):
        seq = _seq_of(event)
        if type(seq) is not int:
            return IntegrityReport((f"event at position {position} has no integer 'seq'",))
        if seq <= previous:
            after = "the start" if position == 0 else f"seq {previous}"
            why = f"is not after {after} (events out of order or repeated)"
            problem = f"event at position {position} has seq {seq}, which {why}"
            return IntegrityReport((problem,), tuple(warnings))
        if seq > previous + 1:
            missing = f"{previous + 1}..{seq - 1}"
            warnings.append(
                f"event at position {position} has seq {seq}, after seq {previous} "
                f"(events {missing} are missing)"
            )
        previous = seq
    return IntegrityReport((), tuple(warnings))


def verify_record_integrity(record: ExecutionRecord | Mapping[str, Any]) -> IntegrityReport:
    """Check a record: envelope hash, event order and a consistent header and response.

    Args:
        record: The record, or its raw JSON data.

    Returns:
        The report; each problem or warning is one sentence. Gaps in the event numbering
        are warnings only.
    """
    problems: list[str] = []
    if not isinstance(record, ExecutionRecord):
        try:
            record = ExecutionRecord.model_validate(record)
        except ValidationError as exc:
            return IntegrityReport(
                (f"not a valid execution record: {first_validation_error(exc)}",)
            )
    problems.extend(record.problems)
    header = record.header
    problems.extend(_hash_problems(record))
    sequence = verify_event_sequence(record.events)
    problems.extend(sequence.problems)
    if header.replayable and header.replayableReason is not None:
        problems.append(
            f"the header says replayable but gives the reason {header.replayableReason!r}"
        )
    if header.replayable and record.finalResponse is None:
        problems.append("the header says replayable but there is no final response")
    if record.finalResponse is not None:
        problems.extend(_status_problems(record.finalResponse))
    return IntegrityReport(tuple(problems), sequence.warnings)


def _hash_problems(record: ExecutionRecord) -> list[str]:
    recorded = record.header.envelopeHash
    try:
        if envelope_hash_matches(record.envelope, recorded):
            return []
        actual = envelope_hash_of(record.envelope, recorded)
    except EnvelopeHashFormatError as exc:
        return [str(exc)]
    except ReplayGuardError as exc:
        return [f"the envelope cannot be hashed: {exc}"]
    return [
        f"the envelope hashes to {actual}, not to the recorded {recorded} "
        "(the envelope was changed)"
    ]


def _status_problems(final: FinalResponse) -> list[str]:
    # A contract-shaped response says its outcome twice (status and error): they must agree.
    if final.outcome == "error" and final.error is None:
        return [f"finalResponse.status is {final.status!r} but there is no finalResponse.error"]
    if final.outcome == "success" and final.error is not None:
        return [
            f"finalResponse.status is {final.status!r} but it has an error ({final.error.label})"
        ]
    return []
