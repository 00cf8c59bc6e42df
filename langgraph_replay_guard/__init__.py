"""Loop, duplicate and replay protection for LangGraph and LangChain tool calls."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
        UnclassifiedToolsWarning,
    )
    from langgraph_replay_guard.guard import ReplayGuard
    from langgraph_replay_guard.integrations.callbacks import (
        ReplayGuardCallbackHandler,
        ToolCallBlockedError,
    )
    from langgraph_replay_guard.integrations.calls import GUARD_CHANNEL
    from langgraph_replay_guard.integrations.graph_state import ReplayGuardState
    from langgraph_replay_guard.integrations.middleware import ReplayGuardMiddleware
    from langgraph_replay_guard.policy.config import (
        CallClass,
        ClassRule,
        GuardConfig,
        GuardOptions,
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

# Every public name is imported on first use (PEP 562), so that `import
# langgraph_replay_guard` (and `replay-guard --help`, which imports its `cli` package) does
# not load LangChain and LangGraph. The middleware needs the optional `langchain` package.
_LAZY: dict[str, str] = {
    "CachingReplayEngine": "langgraph_replay_guard.records",
    "ExecutionRecord": "langgraph_replay_guard.records",
    "RecordNotFoundError": "langgraph_replay_guard.records",
    "RecordStore": "langgraph_replay_guard.records",
    "ReplayEngine": "langgraph_replay_guard.records",
    "ReplayResult": "langgraph_replay_guard.records",
    "ReplayedRunError": "langgraph_replay_guard.records",
    "batch_replay": "langgraph_replay_guard.records",
    "compute_envelope_hash": "langgraph_replay_guard.records",
    "verify_event_sequence": "langgraph_replay_guard.records",
    "verify_record_integrity": "langgraph_replay_guard.records",
    "CallClass": "langgraph_replay_guard.policy.config",
    "ClassRule": "langgraph_replay_guard.policy.config",
    "Decision": "langgraph_replay_guard.decisions.engine",
    "GUARD_CHANNEL": "langgraph_replay_guard.integrations.calls",
    "GuardConfig": "langgraph_replay_guard.policy.config",
    "GuardOptions": "langgraph_replay_guard.policy.config",
    "GuardControl": "langgraph_replay_guard.decisions.control",
    "GuardView": "langgraph_replay_guard.decisions.state",
    "InvalidArgumentsError": "langgraph_replay_guard.errors",
    "LoopAbortedError": "langgraph_replay_guard.errors",
    "NotReplayableError": "langgraph_replay_guard.errors",
    "ReplayClass": "langgraph_replay_guard.policy.config",
    "ReplayConflictError": "langgraph_replay_guard.errors",
    "ReplayGuard": "langgraph_replay_guard.guard",
    "ReplayGuardCallbackHandler": "langgraph_replay_guard.integrations.callbacks",
    "ReplayGuardError": "langgraph_replay_guard.errors",
    "ReplayGuardMiddleware": "langgraph_replay_guard.integrations.middleware",
    "ReplayGuardState": "langgraph_replay_guard.integrations.graph_state",
    "ReplayGuardWarning": "langgraph_replay_guard.errors",
    "ReplayHashMismatchError": "langgraph_replay_guard.errors",
    "ReplayInFlightError": "langgraph_replay_guard.errors",
    "ReplayUnsafeError": "langgraph_replay_guard.errors",
    "ToolCallBlockedError": "langgraph_replay_guard.integrations.callbacks",
    "ToolPolicy": "langgraph_replay_guard.policy.config",
    "ToolkitRef": "langgraph_replay_guard.policy.config",
    "UnclassifiedToolsWarning": "langgraph_replay_guard.errors",
    "Verdict": "langgraph_replay_guard.decisions.engine",
    "merge_guard_state": "langgraph_replay_guard.decisions.state",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        try:  # a submodule not imported yet, e.g. `langgraph_replay_guard.records`
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
    "GuardOptions",
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
    "UnclassifiedToolsWarning",
    "Verdict",
    "__version__",
    "batch_replay",
    "compute_envelope_hash",
    "merge_guard_state",
    "verify_event_sequence",
    "verify_record_integrity",
]
