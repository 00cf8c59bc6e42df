"""Execution records: the recorded run (header, events, response) and its errors."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictInt,
    ValidationError,
    field_validator,
    model_serializer,
)

from langgraph_replay_guard.errors import ReplayGuardError
from langgraph_replay_guard.records.envelope import compute_envelope_hash

__all__ = [
    "NOT_REPLAYABLE_REASONS",
    "RESPONSE_STATUSES",
    "ErrorInfo",
    "ExecutionRecord",
    "FinalResponse",
    "RecordEvent",
    "RecordHeader",
    "RecordNotFoundError",
    "RecordedError",
    "ReplayableReason",
    "first_validation_error",
    "invalidate_record",
    "utc_now_iso",
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


ResponseStatus = Literal["success", "ok", "error"]

RESPONSE_STATUSES: Mapping[str, Literal["success", "error"]] = {
    "success": "success",
    "ok": "success",
    "error": "error",
}
"""The `finalResponse.status` values a record may carry, and the outcome each one means.

`"success"` and `"error"` are the record contract's (and IntentusNet's `AgentResponse`
contract's). `"ok"` is what IntentusNet's example agents answer with, so its record files carry
it; IntentusNet's router counts a response as a success when it has no error, and writes
`"ok"` itself in its `AGENT_ATTEMPT_END` events. Any other status is refused when a record is
loaded, naming the value and these.
"""


def utc_now_iso() -> str:
    """The current UTC time in ISO 8601 with a `Z` suffix (microseconds)."""
    now = dt.datetime.now(dt.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- the record ----------------------------------------------------------------------------


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


class RecordHeader(_KeepsGivenFields):
    """What identifies a record and says whether it can be replayed.

    `envelopeHash` is `"sha256:" + hex digest` in this package's records and the bare hex
    digest in IntentusNet's (see `envelope_hash_matches`). `replayableReason` is written back
    only when it was given (IntentusNet's older records have none).
    """

    model_config = ConfigDict(extra="forbid")
    _given_only: ClassVar[frozenset[str]] = frozenset({"replayableReason"})

    executionId: str = Field(min_length=1)
    createdUtcIso: str
    envelopeHash: str
    replayable: bool
    replayableReason: ReplayableReason | None = None


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
    The contract's: `status` (`"success"`, `"error"`, or IntentusNet's `"ok"`: see
    `RESPONSE_STATUSES`), `payload`, an `error` as `{"code", "message"}` (an `ErrorInfo`),
    and any other fields (`version`...). A response with a `status` is written back with
    exactly the fields it was given, its `status` as recorded (`outcome` says what it means).
    """

    model_config = ConfigDict(extra="allow")

    status: ResponseStatus | None = None
    payload: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    error: RecordedError | ErrorInfo | None = None

    @field_validator("status", mode="before")
    @classmethod
    def _known_status(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and value in RESPONSE_STATUSES):
            return value
        accepted = ", ".join(f"{name!r} ({outcome})" for name, outcome in RESPONSE_STATUSES.items())
        msg = f"unknown finalResponse.status {value!r}; accepted: {accepted}"
        raise ValueError(msg)

    def _omitted_fields(self) -> frozenset[str]:
        if self.status is None:  # the recorder's shape: written as before
            return frozenset({"status"})
        return frozenset(type(self).model_fields) - self.model_fields_set

    @property
    def outcome(self) -> Literal["success", "error"] | None:
        """What the `status` means (`"ok"` is a success); None when there is no status."""
        return None if self.status is None else RESPONSE_STATUSES[self.status]

    @property
    def failed(self) -> bool:
        """Whether the recorded run ended with an error."""
        return self.error is not None or self.outcome == "error"


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


# -- errors --------------------------------------------------------------------------------


def first_validation_error(exc: ValidationError) -> str:
    """The first problem of a validation error, as `where: what`."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "record"
    return f"{where}: {error['msg']}"


class RecordNotFoundError(ReplayGuardError, LookupError):
    """No execution record has this id."""

    def __init__(self, message: str, *, execution_id: str) -> None:
        super().__init__(message)
        self.execution_id = execution_id
