"""Exact replay of execution records: one record, by id through a cache, or many at once."""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from pydantic import BaseModel, Field

from langgraph_replay_guard.errors import (
    NotReplayableError,
    ReplayGuardError,
    ReplayHashMismatchError,
)
from langgraph_replay_guard.records.envelope import (
    EnvelopeHashFormatError,
    envelope_hash_matches,
    envelope_hash_of,
)
from langgraph_replay_guard.records.integrity import IntegrityReport, verify_record_integrity
from langgraph_replay_guard.records.model import (
    ErrorInfo,
    ExecutionRecord,
    RecordedError,
    RecordNotFoundError,
)

__all__ = [
    "CachingReplayEngine",
    "RecordSource",
    "ReplayEngine",
    "ReplayResult",
    "Replayability",
    "ReplayedRunError",
    "batch_replay",
    "load_record",
]

# -- one record ----------------------------------------------------------------------------


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
            env: The envelope of the request being answered. When given, it must hash to
                the recorded `envelopeHash` (`envelope_hash_matches`: with or without the
                `sha256:` prefix; `force` does not skip this check).
            force: Serve a non-replayable record anyway (when it has a response); the
                result's `warnings` say why it was not replayable.

        Returns:
            The recorded response, with `fromReplay=True`.

        Raises:
            NotReplayableError: The record is not replayable (`reason` says why) and
                `force` is False, or it has no response to serve at all.
            ReplayHashMismatchError: `env` does not hash to the recorded envelope hash, or
                the recorded hash names an unknown algorithm.
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
            self._check_request(env)
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

    def _check_request(self, env: Mapping[str, Any]) -> None:
        header = self.record.header
        try:
            matches = envelope_hash_matches(env, header.envelopeHash)
        except EnvelopeHashFormatError as exc:
            actual = envelope_hash_of(env, "sha256:")
            msg = (
                f"The request cannot be checked against execution record "
                f"{header.executionId!r}: {exc}"
            )
            raise ReplayHashMismatchError(msg, expected=header.envelopeHash, actual=actual) from exc
        if not matches:
            actual = envelope_hash_of(env, header.envelopeHash)
            msg = (
                f"The request does not match execution record {header.executionId!r}: "
                f"expected envelope hash {header.envelopeHash}, got {actual}. Replay only "
                "answers the request that was recorded; run the graph instead."
            )
            raise ReplayHashMismatchError(msg, expected=header.envelopeHash, actual=actual)

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
