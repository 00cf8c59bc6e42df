"""Loop, duplicate and replay protection for LangGraph and LangChain tool calls."""

from __future__ import annotations

from langgraph_replay_guard.decisions.control import GuardControl
from langgraph_replay_guard.decisions.engine import Decision, Verdict
from langgraph_replay_guard.decisions.state import GuardView, merge_guard_state
from langgraph_replay_guard.errors import (
    InvalidArgumentsError,
    LoopAbortedError,
    NotReplayableError,
    ReplayConflictError,
    ReplayGuardError,
    ReplayGuardWarning,
    ReplayHashMismatchError,
    ReplayInFlightError,
    ReplayUnsafeError,
)
from langgraph_replay_guard.guard import ReplayGuard
from langgraph_replay_guard.integrations.calls import GUARD_CHANNEL
from langgraph_replay_guard.integrations.graph_state import ReplayGuardState
from langgraph_replay_guard.policy.config import (
    CallClass,
    ClassRule,
    GuardConfig,
    ReplayClass,
    ToolkitRef,
    ToolPolicy,
)
from langgraph_replay_guard.records import (
    CachingReplayEngine,
    ExecutionRecord,
    RecordNotFoundError,
    RecordStore,
    ReplayedRunError,
    ReplayEngine,
    ReplayResult,
    batch_replay,
    compute_envelope_hash,
    verify_event_sequence,
    verify_record_integrity,
)


def __getattr__(name: str) -> object:
    # The middleware needs the optional `langchain` package: import it on first use.
    if name == "ReplayGuardMiddleware":
        from langgraph_replay_guard.integrations.middleware import (
            ReplayGuardMiddleware,
        )

        return ReplayGuardMiddleware
    # The callback handler imports LangChain's agent types: import it on first use too.
    if name in {"ReplayGuardCallbackHandler", "ToolCallBlockedError"}:
        from langgraph_replay_guard.integrations import callbacks

        return getattr(callbacks, name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


__version__ = "0.1.0"

__all__ = [
    "GUARD_CHANNEL",
    "CachingReplayEngine",
    "CallClass",
    "ClassRule",
    "Decision",
    "ExecutionRecord",
    "GuardConfig",
    "GuardControl",
    "GuardView",
    "InvalidArgumentsError",
    "LoopAbortedError",
    "NotReplayableError",
    "RecordNotFoundError",
    "RecordStore",
    "ReplayClass",
    "ReplayConflictError",
    "ReplayEngine",
    "ReplayGuard",
    "ReplayGuardCallbackHandler",
    "ReplayGuardError",
    "ReplayGuardMiddleware",
    "ReplayGuardState",
    "ReplayGuardWarning",
    "ReplayHashMismatchError",
    "ReplayInFlightError",
    "ReplayResult",
    "ReplayUnsafeError",
    "ReplayedRunError",
    "ToolCallBlockedError",
    "ToolPolicy",
    "ToolkitRef",
    "Verdict",
    "__version__",
    "batch_replay",
    "compute_envelope_hash",
    "merge_guard_state",
    "verify_event_sequence",
    "verify_record_integrity",
]
