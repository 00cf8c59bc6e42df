"""Crash-test a guarded graph: SIGKILL each tool call at each boundary, resume, count runs."""

from __future__ import annotations

from langgraph_replay_guard.crashtest.harness import DEFAULT_INPUT, crashtest
from langgraph_replay_guard.crashtest.hooks import effect
from langgraph_replay_guard.crashtest.report import POINTS, CallSeen, CrashReport, Trial
from langgraph_replay_guard.crashtest.target import CrashTestError

__all__ = [
    "DEFAULT_INPUT",
    "POINTS",
    "CallSeen",
    "CrashReport",
    "CrashTestError",
    "Trial",
    "crashtest",
    "effect",
]
