"""Loop, duplicate and replay protection for LangGraph and LangChain tool calls."""

from __future__ import annotations

from langgraph_replay_guard.config import GuardConfig, ReplayClass, ToolPolicy
from langgraph_replay_guard.control import GuardControl
from langgraph_replay_guard.engine import Decision, Verdict
from langgraph_replay_guard.errors import (
    GuardStateError,
    InvalidArgumentsError,
    LoopAbortedError,
    NotReplayableError,
    ReplayConflictError,
    ReplayGuardError,
    ReplayHashMismatchError,
    ReplayUnsafeError,
)
from langgraph_replay_guard.guard import ReplayGuard
from langgraph_replay_guard.state import GuardView, merge_guard_state

__version__ = "0.1.0"

__all__ = [
    "Decision",
    "GuardConfig",
    "GuardControl",
    "GuardStateError",
    "GuardView",
    "InvalidArgumentsError",
    "LoopAbortedError",
    "NotReplayableError",
    "ReplayClass",
    "ReplayConflictError",
    "ReplayGuard",
    "ReplayGuardError",
    "ReplayHashMismatchError",
    "ReplayUnsafeError",
    "ToolPolicy",
    "Verdict",
    "__version__",
    "merge_guard_state",
]
