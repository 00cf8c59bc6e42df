"""Execution records: the recorded run, its integrity checks and exact replay."""

from __future__ import annotations

import copy
import datetime as dt
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictInt,
    ValidationError,
    model_serializer,
)

from langgraph_replay_guard.errors import (
    NotReplayableError,
    ReplayGuardError,
    ReplayHashMismatchError,
)
from langgraph_replay_guard.keys import sha256_json

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
    "RecordedError",
    "ReplayEngine",
    "ReplayResult",
    "Replayability",
    "ReplayableReason",
    "ReplayedRunError",
    "batch_replay",
    "compute_envelope_hash",
    "first_validation_error",
    "invalidate_record",
    "load_record",
    "utc_now_iso",
    "verify_event_sequence",
    "verify_record_integrity",
]

ReplayableReason = Literal[
    "execution_incomplete", "recording_failure", "manually_invalidated", "record_corrupted"
]
"""Why a record cannot be replayed exactly.

- `"execution_incomplete"`: the run started but never finished (crash, kill, interrupt).
- `"recording_failure"`: the run finished but recording it failed (the response may be
  missing or partial).
- `"manually_invalidated"`: someone invalidated the record (`records invalidate`).
- `"record_corrupted"`: the stored record does not pass its integrity checks.
"""

NOT_REPLAYABLE_REASONS: tuple[str, ...] = (
    "execution_incomplete",
    "recording_failure",
    "manually_invalidated",
    "record_corrupted",
)

ENVELOPE_ROUTING_FIELDS: frozenset[str] = frozenset(
    {
        "callbacks",
        "checkpoint_id",
        "checkpoint_map",
        "checkpoint_ns",
        "max_concurrency",
        "metadata",
        "parent_run_id",
        "run_id",
        "run_name",
        "tags",
        "task_id",
        "thread_id",
    }
)
"""Fields left out of the envelope hash: they route or trace a run, they do not decide it.

They are dropped at the top of the envelope, from `envelope["config"]` and from
`envelope["config"]["configurable"]`, where keys starting with `__` (LangGraph's internal
plumbing) are dropped too. So the same request sent on another thread, with another run
id or other tracing callbacks, has the same hash.
"""

_HASH_PATTERN = re.compile(r"^sha256:[0-9a-f]{64}$")


def utc_now_iso() -> str:
    """The current UTC time in ISO 8601 with a `Z` suffix (microseconds)."""
    now = dt.datetime.now(dt.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- the record ----------------------------------------------------------------------------


class RecordHeader(BaseModel):
    """What identifies a record and says whether it can be replayed."""

    model_config = ConfigDict(extra="forbid")

    executionId: str = Field(min_length=1)
    createdUtcIso: str
    envelopeHash: str
    replayable: bool
    replayableReason: ReplayableReason | None = None


class _KeepsGivenFields(BaseModel):
    """A model whose optional `_given_only` fields are written only when they were given.

    So a record in the contract's own JSON shape dumps back to the same JSON: no field
    it did not have (`kind`, `metadata`, `status`...) appears as `null` or `{}`.
    """

    _given_only: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _drop_fields_not_given(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        omit = self._omitted_fields()
        if not omit or not isinstance(data, dict):
            return data
        return {k: v for k, v in data.items() if k not in omit}

    def _omitted_fields(self) -> frozenset[str]:
        return self._given_only - self.model_fields_set


class RecordEvent(_KeepsGivenFields):
    """One recorded step of a run: a model call, a tool call or a guard decision.

    `seq` numbers the events in the order they happened (strictly increasing; the
    recorder writes 1, 2, 3...). `kind` names the step (`model_start`, `model_end`,
    `model_error`, `tool_start`, `tool_end`, `tool_error`, `guard_decision`); events in the
    contract's own shape may carry only `seq` and their own fields (`type`, `payload`...).
    Every other field is kept as it is, and `kind` is written back only when it was given.
    """

    model_config = ConfigDict(extra="allow")
    _given_only: ClassVar[frozenset[str]] = frozenset({"kind"})

    seq: StrictInt
    kind: str | None = None


class RecordedError(BaseModel):
    """An exception that ended a recorded run."""

    model_config = ConfigDict(extra="forbid")

    type: str
    message: str
    module: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_exception(cls, exc: BaseException) -> RecordedError:
        """Describe an exception (its class, message and JSON-like public attributes).

        Args:
            exc: The exception.

        Returns:
            The description.
        """
        details: dict[str, Any] = {}
        for name, value in vars(exc).items():
            if not name.startswith("_") and isinstance(value, str | int | float | bool):
                details[name] = value
        return cls(
            type=type(exc).__name__,
            module=type(exc).__module__,
            message=str(exc),
            details=details,
        )

    @property
    def label(self) -> str:
        """What failed, for messages: the exception's class name."""
        return self.type


class ErrorInfo(BaseModel):
    """An error in the contract's own shape: `{"code", "message"}` (other fields kept)."""

    model_config = ConfigDict(extra="allow")

    code: str
    message: str

    @property
    def label(self) -> str:
        """What failed, for messages: the error code."""
        return self.code


class FinalResponse(_KeepsGivenFields):
    """What the run returned (`payload`), or the error it raised (`error`).

    Two shapes load. The recorder's: `payload`, `metadata` and `error` (a `RecordedError`).
    The contract's: `status` (`"success"` or `"error"`), `payload`, an `error` as
    `{"code", "message"}` (an `ErrorInfo`), and any other fields (`version`...). A response
    with a `status` is written back with exactly the fields it was given.
    """

    model_config = ConfigDict(extra="allow")

    status: Literal["success", "error"] | None = None
    payload: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    error: RecordedError | ErrorInfo | None = None

    def _omitted_fields(self) -> frozenset[str]:
        if self.status is None:  # the recorder's shape: written as before
            return frozenset({"status"})
        return frozenset(type(self).model_fields) - self.model_fields_set

    @property
    def failed(self) -> bool:
        """Whether the recorded run ended with an error."""
        return self.error is not None or self.status == "error"


class ExecutionRecord(_KeepsGivenFields):
    """A recorded run: header, envelope (the request), events and final response.

    The JSON form uses the field names shown here (`header.executionId`,
    `finalResponse.payload`...). A record in the contract's own shape (a `finalResponse`
    with `status`, events with `seq` and their own fields, a `routerDecision`) loads and
    dumps back to the same JSON. `problems` is not part of the JSON: it carries what went
    wrong while loading a stored record, for error messages.
    """

    model_config = ConfigDict(extra="forbid")
    _given_only: ClassVar[frozenset[str]] = frozenset({"routerDecision"})

    header: RecordHeader
    envelope: dict[str, Any]
    routerDecision: Any = None
    events: list[RecordEvent] = Field(default_factory=list)
    finalResponse: FinalResponse | None = None
    problems: list[str] = Field(default_factory=list, exclude=True)

    @property
    def execution_id(self) -> str:
        """The record's `executionId`."""
        return self.header.executionId

    @classmethod
    def started(
        cls, execution_id: str, envelope: Mapping[str, Any], *, created_utc_iso: str | None = None
    ) -> ExecutionRecord:
        """The record of a run that has started: not replayable until it finishes.

        Args:
            execution_id: The run's id.
            envelope: The run's request (input and the config that decides the result).
            created_utc_iso: Start time; now when omitted.

        Returns:
            A record with `replayableReason="execution_incomplete"` and no response.
        """
        return cls(
            header=RecordHeader(
                executionId=execution_id,
                createdUtcIso=created_utc_iso or utc_now_iso(),
                envelopeHash=compute_envelope_hash(envelope),
                replayable=False,
                replayableReason="execution_incomplete",
            ),
            envelope=dict(envelope),
        )

    def to_json_data(self) -> dict[str, Any]:
        """The record as JSON data (the payload is kept as it is: NaN stays NaN)."""
        return self.model_dump(mode="python")


def invalidate_record(record: ExecutionRecord) -> ExecutionRecord:
    """A copy of a record marked `manually_invalidated` (never replayed unless forced).

    Args:
        record: The record.

    Returns:
        The invalidated copy; the events and the response are kept.
    """
    header = record.header.model_copy(
        update={"replayable": False, "replayableReason": "manually_invalidated"}
    )
    return record.model_copy(update={"header": header})


# -- hashing and integrity -----------------------------------------------------------------


def _without_routing(envelope: Mapping[str, Any]) -> dict[str, Any]:
    clean = {k: v for k, v in envelope.items() if k not in ENVELOPE_ROUTING_FIELDS}
    config = clean.get("config")
    if isinstance(config, Mapping):
        config = {k: v for k, v in config.items() if k not in ENVELOPE_ROUTING_FIELDS}
        configurable = config.get("configurable")
        if isinstance(configurable, Mapping):
            config["configurable"] = {
                k: v
                for k, v in configurable.items()
                if k not in ENVELOPE_ROUTING_FIELDS and not str(k).startswith("__")
            }
        clean["config"] = config
    return clean


def compute_envelope_hash(envelope: Mapping[str, Any]) -> str:
    """Hash an envelope: `"sha256:" + hex digest` of its canonical JSON.

    Routing fields (`ENVELOPE_ROUTING_FIELDS`: run and thread ids, checkpoint ids,
    callbacks, tags, metadata...) are left out, so they never make two identical
    requests look different. Canonical JSON sorts keys and hashes `1` and `1.0` equal
    (see `keys.canonicalize`).

    Args:
        envelope: The request: usually `{"graph", "input", "config", ...}` as the recorder
            builds it.

    Returns:
        The hash, e.g. `"sha256:9f86d0..."`.

    Raises:
        InvalidArgumentsError: If the envelope holds values with no canonical JSON form.
    """
    return sha256_json(_without_routing(envelope))


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
    if not _HASH_PATTERN.match(recorded):
        return [f"envelopeHash {recorded!r} is not 'sha256:' + 64 hex digits"]
    try:
        actual = compute_envelope_hash(record.envelope)
    except ReplayGuardError as exc:
        return [f"the envelope cannot be hashed: {exc}"]
    if actual != recorded:
        return [
            f"the envelope hashes to {actual}, not to the recorded {recorded} "
            "(the envelope was changed)"
        ]
    return []


def _status_problems(final: FinalResponse) -> list[str]:
    # A contract-shaped response says its outcome twice (status and error): they must agree.
    if final.status == "error" and final.error is None:
        return ["finalResponse.status is 'error' but there is no finalResponse.error"]
    if final.status == "success" and final.error is not None:
        return [f"finalResponse.status is 'success' but it has an error ({final.error.label})"]
    return []


def first_validation_error(exc: ValidationError) -> str:
    """The first problem of a validation error, as `where: what`."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "record"
    return f"{where}: {error['msg']}"


# -- replay --------------------------------------------------------------------------------


class ReplayResult(BaseModel):
    """A recorded response served again, without running anything.

    Attributes:
        payload: The recorded final response, exactly as recorded (a copy).
        metadata: The recorded response metadata.
        fromReplay: Always True: this came from a record, not from a run.
        originalExecutionId: The record's `executionId`.
        originalTimestamp: When the recorded run started (`createdUtcIso`).
        warnings: What the caller should know, e.g. that a non-replayable record was
            forced.
        response: The whole recorded `finalResponse` as JSON data, exactly as recorded (a
            copy; with `status`, `error`... for a record in the contract's shape). Not part
            of the result's own JSON form.
    """

    payload: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    fromReplay: bool = True
    originalExecutionId: str
    originalTimestamp: str
    warnings: list[str] = Field(default_factory=list)
    response: dict[str, Any] | None = Field(default=None, exclude=True)


class ReplayedRunError(ReplayGuardError):
    """The recorded run ended with an error, so its replay raises it again.

    Attributes:
        error: The recorded error: a `RecordedError` (`type`, `message`, `module`,
            `details`), or an `ErrorInfo` (`code`, `message`) for a record in the
            contract's shape.
        result: The replay result (the recorded payload, metadata and warnings; `response`
            is the whole recorded final response).
    """

    def __init__(
        self, message: str, *, error: RecordedError | ErrorInfo, result: ReplayResult
    ) -> None:
        super().__init__(message)
        self.error = error
        self.result = result


class RecordNotFoundError(ReplayGuardError, LookupError):
    """No execution record has this id."""

    def __init__(self, message: str, *, execution_id: str) -> None:
        super().__init__(message)
        self.execution_id = execution_id


class Replayability(NamedTuple):
    """Whether a record can be replayed, and why not: `ok, reason = engine.is_replayable()`.

    It is also true or false by itself, so `if engine.is_replayable():` works.

    Attributes:
        ok: Whether `replay()` would serve the record without `force=True`.
        reason: Why it would not (`"execution_incomplete"`, `"recording_failure"`,
            `"manually_invalidated"` or `"record_corrupted"`); None when `ok`.
    """

    ok: bool
    reason: str | None

    def __bool__(self) -> bool:
        """True when the record is replayable (a plain 2-tuple would always be true)."""
        return self.ok


class ReplayEngine:
    """Serves one record's final response again, exactly, with no model, tool or graph call.

    Example:
        ```python
        engine = ReplayEngine(record)
        ok, reason = engine.is_replayable()  # or: if engine.is_replayable(): ...
        if ok:
            result = engine.replay()
            result.payload  # the recorded response
        ```

    Args:
        record: The record to replay.
    """

    def __init__(self, record: ExecutionRecord) -> None:
        """Create the engine (the integrity check runs once, on first use)."""
        self.record = record
        self._integrity: IntegrityReport | None = None

    @property
    def integrity(self) -> IntegrityReport:
        """The record's integrity report (computed once)."""
        if self._integrity is None:
            self._integrity = verify_record_integrity(self.record)
        return self._integrity

    def not_replayable_reason(self) -> str | None:
        """Why the record cannot be replayed, or None when it can.

        Returns:
            The header's reason, or `"record_corrupted"` when the header says replayable
            but the integrity check fails.
        """
        header = self.record.header
        if not header.replayable:
            return header.replayableReason or "record_corrupted"
        if not self.integrity.ok:
            return "record_corrupted"
        return None

    def is_replayable(self) -> Replayability:
        """Whether `replay()` would serve the record without `force=True`, and why not.

        Returns:
            `(ok, reason)`, as a `Replayability` that is also falsy when not replayable.
        """
        reason = self.not_replayable_reason()
        return Replayability(reason is None, reason)

    def replay(self, env: Mapping[str, Any] | None = None, *, force: bool = False) -> ReplayResult:
        """Return the recorded final response.

        Args:
            env: The envelope of the request being answered. When given, its hash must be
                the recorded `envelopeHash` (`force` does not skip this check).
            force: Serve a non-replayable record anyway (when it has a response); the
                result's `warnings` say why it was not replayable.

        Returns:
            The recorded response, with `fromReplay=True`.

        Raises:
            NotReplayableError: The record is not replayable (`reason` says why) and
                `force` is False, or it has no response to serve at all.
            ReplayHashMismatchError: `env` does not hash to the recorded envelope hash.
            ReplayedRunError: The recorded run ended with an error: the replay raises it
                again (the error and the result are attributes of the exception).
        """
        record = self.record
        header = record.header
        warnings: list[str] = []
        reason = self.not_replayable_reason()
        if reason is not None:
            why = self._why(reason)
            if not force:
                msg = (
                    f"Execution record {header.executionId!r} is not replayable "
                    f"({reason}): {why}. Pass force=True (CLI: --force) to serve it anyway."
                )
                raise NotReplayableError(msg, reason=reason)
            if record.finalResponse is None:
                msg = (
                    f"Execution record {header.executionId!r} is not replayable ({reason}) "
                    f"and has no recorded response, so even force=True cannot replay it: {why}."
                )
                raise NotReplayableError(msg, reason=reason)
            warnings.append(f"forced replay of a non-replayable record ({reason}): {why}")
        if env is not None:
            actual = compute_envelope_hash(env)
            if actual != header.envelopeHash:
                msg = (
                    f"The request does not match execution record {header.executionId!r}: "
                    f"expected envelope hash {header.envelopeHash}, got {actual}. Replay only "
                    "answers the request that was recorded; run the graph instead."
                )
                raise ReplayHashMismatchError(msg, expected=header.envelopeHash, actual=actual)
        final = record.finalResponse
        assert final is not None  # a replayable record has a response (integrity check)
        result = ReplayResult(
            payload=copy.deepcopy(final.payload),
            metadata=copy.deepcopy(final.metadata),
            fromReplay=True,
            originalExecutionId=header.executionId,
            originalTimestamp=header.createdUtcIso,
            warnings=warnings,
            response=final.model_dump(mode="python"),
        )
        if final.failed:
            error = final.error or ErrorInfo(code="error", message="no error details recorded")
            msg = (
                f"The recorded run {header.executionId!r} failed with {error.label}: "
                f"{error.message}"
            )
            raise ReplayedRunError(msg, error=error, result=result)
        return result

    def _why(self, reason: str) -> str:
        explanations = {
            "execution_incomplete": "the run started but never finished (crash, kill or "
            "interrupt), so there is no final response to trust",
            "recording_failure": "recording the run failed, so the response may be missing "
            "or partial",
            "manually_invalidated": "the record was invalidated",
            "record_corrupted": "the record failed its integrity checks",
        }
        why = explanations.get(reason, reason)
        problems = list(self.record.problems)
        if reason == "record_corrupted" or self.record.header.replayable:
            problems.extend(p for p in self.integrity.problems if p not in problems)
        return f"{why} ({'; '.join(problems)})" if problems else why


# -- loading many records ------------------------------------------------------------------


class RecordSource(Protocol):
    """Anything records can be loaded from by id (a `RecordStore`, a cache...)."""

    def get(self, execution_id: str) -> ExecutionRecord | None:
        """The record with this id, or None."""
        ...


def load_record(source: RecordSource, execution_id: str) -> ExecutionRecord:
    """Load a record by id.

    Args:
        source: Where records are loaded from.
        execution_id: The record's id.

    Returns:
        The record.

    Raises:
        RecordNotFoundError: No record has this id.
    """
    record = source.get(execution_id)
    if record is None:
        msg = f"No execution record {execution_id!r}; `replay-guard records list` shows the ids."
        raise RecordNotFoundError(msg, execution_id=execution_id)
    return record


class CachingReplayEngine:
    """Replays records by id from a store, keeping recently used records in memory.

    A cached record is served for up to `ttl_seconds` after it was loaded, so a change made
    elsewhere (another process invalidating it) is seen at most that late; `evict` forgets
    one record at once. At most `max_entries` records are kept (least recently used go
    first). Thread-safe.

    Args:
        source: Where records are loaded from (a `RecordStore`).
        ttl_seconds: How long a loaded record is served from memory.
        max_entries: How many records are kept in memory.
        clock: Monotonic clock in seconds (for tests).
    """

    def __init__(
        self,
        source: RecordSource,
        *,
        ttl_seconds: float = 300.0,
        max_entries: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Create the caching engine."""
        if ttl_seconds < 0:
            msg = f"ttl_seconds must be >= 0, got {ttl_seconds}"
            raise ValueError(msg)
        if max_entries < 1:
            msg = f"max_entries must be >= 1, got {max_entries}"
            raise ValueError(msg)
        self.source = source
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self._clock = clock
        self._cache: OrderedDict[str, tuple[float, ReplayEngine]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def engine(self, execution_id: str) -> ReplayEngine:
        """The replay engine of one record, from memory when fresh enough.

        Args:
            execution_id: The record's id.

        Returns:
            The engine.

        Raises:
            RecordNotFoundError: No record has this id.
        """
        now = self._clock()
        with self._lock:
            entry = self._cache.get(execution_id)
            if entry is not None and now - entry[0] <= self.ttl_seconds:
                self._cache.move_to_end(execution_id)
                self.hits += 1
                return entry[1]
            self.misses += 1
        engine = ReplayEngine(load_record(self.source, execution_id))
        with self._lock:
            self._cache[execution_id] = (now, engine)
            self._cache.move_to_end(execution_id)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return engine

    def get(self, execution_id: str) -> ExecutionRecord | None:
        """The record with this id (through the cache), or None."""
        try:
            return self.engine(execution_id).record
        except RecordNotFoundError:
            return None

    def replay(
        self, execution_id: str, env: Mapping[str, Any] | None = None, *, force: bool = False
    ) -> ReplayResult:
        """Replay one record by id (see `ReplayEngine.replay`).

        Raises:
            RecordNotFoundError: No record has this id.
            NotReplayableError: See `ReplayEngine.replay`.
            ReplayHashMismatchError: See `ReplayEngine.replay`.
            ReplayedRunError: See `ReplayEngine.replay`.
        """
        return self.engine(execution_id).replay(env, force=force)

    def evict(self, execution_id: str) -> None:
        """Forget one cached record (call it after invalidating the record)."""
        with self._lock:
            self._cache.pop(execution_id, None)

    def clear(self) -> None:
        """Forget every cached record."""
        with self._lock:
            self._cache.clear()


def batch_replay(
    source: RecordSource,
    execution_ids: Sequence[str],
    *,
    envs: Mapping[str, Mapping[str, Any]] | None = None,
    force: bool = False,
) -> dict[str, ReplayResult | Exception]:
    """Replay many records; a failure for one id never stops the others.

    Args:
        source: Where records are loaded from (a `RecordStore` or a `CachingReplayEngine`).
        execution_ids: The records to replay.
        envs: Optional envelope per id, checked as in `ReplayEngine.replay`.
        force: Serve non-replayable records anyway (see `ReplayEngine.replay`).

    Returns:
        For each id, in order, its `ReplayResult` or the exception that stopped it
        (`RecordNotFoundError`, `NotReplayableError`, `ReplayHashMismatchError`,
        `ReplayedRunError`, or a storage error).
    """
    results: dict[str, ReplayResult | Exception] = {}
    for execution_id in execution_ids:
        env = envs.get(execution_id) if envs is not None else None
        try:
            if isinstance(source, CachingReplayEngine):
                results[execution_id] = source.replay(execution_id, env, force=force)
            else:
                engine = ReplayEngine(load_record(source, execution_id))
                results[execution_id] = engine.replay(env, force=force)
        except Exception as exc:  # one bad record (or storage hiccup) must not stop the batch
            results[execution_id] = exc
    return results
