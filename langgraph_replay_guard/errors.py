"""Exceptions raised by the replay guard."""

from __future__ import annotations

from typing import Any

__all__ = [
    "InvalidArgumentsError",
    "LoopAbortedError",
    "NotReplayableError",
    "ReplayConflictError",
    "ReplayGuardError",
    "ReplayGuardWarning",
    "ReplayHashMismatchError",
    "ReplayInFlightError",
    "ReplayUnsafeError",
    "UnclassifiedToolsWarning",
]


class ReplayGuardError(Exception):
    """Base class of every error the replay guard raises."""


class InvalidArgumentsError(ReplayGuardError, TypeError):
    """Tool-call arguments cannot be turned into a stable call key.

    Raised for unsupported types, cyclic references and absurdly deep or large values.
    It is also a `TypeError`, so code that catches serialization errors keeps working.

    Attributes:
        path: Where in the arguments the problem is, e.g. `args.items[3].when`.
    """

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class LoopAbortedError(ReplayGuardError):
    """The guard aborted a run because the agent was looping (`exit_behavior="error"`).

    Attributes:
        tool: Name of the tool whose call tripped the guard.
        reason: Machine-readable reason, e.g. `"repeat_limit"` or `"cycle"`.
        count: How many identical attempts were seen, counting this one.
    """

    def __init__(self, message: str, *, tool: str, reason: str, count: int) -> None:
        super().__init__(message)
        self.tool = tool
        self.reason = reason
        self.count = count


class ReplayUnsafeError(ReplayGuardError):
    """An `unsafe` tool call started earlier and its outcome is unknown.

    Running it again could repeat a side effect, so a human must resolve it first, with
    `guard.resolve(graph, config, tool_call_id, outcome, result)`, or, on a served graph, by
    resuming the interrupt of `GuardConfig(on_unsafe="interrupt")` through the SDK.

    Attributes:
        facts: What a human needs to decide: `thread_id`, `tool`, `args`, `tool_call_id`,
            `started_at`, `status`, `reason`, `earlier_tool_call_id`, `last_error`, and how
            to settle it: `resolve` (in process) and `resume` (the SDK command).
    """

    def __init__(self, message: str, **facts: Any) -> None:
        super().__init__(message)
        self.facts = facts


class ReplayConflictError(ReplayGuardError):
    """The same call identity was seen with different arguments.

    Also raised by `guard.resolve` when the call's ledger row changed between its read and
    its compare-and-set write (its worker finished, another operator resolved it): nothing
    was recorded.
    """


class ReplayInFlightError(ReplayGuardError):
    """Another worker is running this very call and had no outcome within the wait.

    Like an HTTP 409 for an in-flight idempotency key: resume again later to replay the
    other worker's outcome (or raise `GuardConfig.in_flight_wait`).

    Attributes:
        facts: `thread_id`, `tool`, `tool_call_id`, `started_at`, `owner` (the worker).
    """

    def __init__(self, message: str, **facts: Any) -> None:
        super().__init__(message)
        self.facts = facts


class ReplayGuardWarning(UserWarning):
    """A setup in which the guard cannot keep its replay promises (e.g. no durable ledger)."""


class UnclassifiedToolsWarning(ReplayGuardWarning):
    """Tools that nothing classified: they run as `default_policy` (`pure`: deduplicated).

    Given once per guard (and per callback handler) for each tool, where the guard first
    sees its tools. Its own class so that a test suite can filter it alone
    (`ignore::langgraph_replay_guard.UnclassifiedToolsWarning`).
    """


class NotReplayableError(ReplayGuardError):
    """An execution record cannot be replayed exactly.

    Attributes:
        reason: One of `execution_incomplete`, `recording_failure`, `manually_invalidated`,
            `record_corrupted`.
    """

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class ReplayHashMismatchError(ReplayGuardError):
    """The envelope given for a replay does not hash to the recorded envelope hash."""

    def __init__(self, message: str, *, expected: str, actual: str) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual
