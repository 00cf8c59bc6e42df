"""The guard for agent executors, registered as a callback: `ReplayGuardCallbackHandler`."""

from __future__ import annotations

from langgraph_replay_guard.integrations.callbacks.executors import ToolCallBlockedError
from langgraph_replay_guard.integrations.callbacks.handler import ReplayGuardCallbackHandler

__all__ = ["ReplayGuardCallbackHandler", "ToolCallBlockedError"]
