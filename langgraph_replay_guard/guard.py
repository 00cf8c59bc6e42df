"""`ReplayGuard`: the one object users create and share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langgraph_replay_guard.config import GuardConfig
from langgraph_replay_guard.control import GuardControl

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

__all__ = ["ReplayGuard"]


class ReplayGuard:
    """Loop, duplicate and replay protection for tool calls.

    Create one per application and share it: it holds configuration only, while the
    per-thread state lives in the graph's checkpointed channel.

    Args:
        config: Guard configuration; `GuardConfig()` defaults when omitted. A mapping is
            validated as a `GuardConfig`.
        store: A LangGraph `BaseStore` for the durable replay ledger.
    """

    def __init__(
        self,
        config: GuardConfig | dict[str, Any] | None = None,
        *,
        store: BaseStore | None = None,
    ) -> None:
        """Create a guard."""
        if config is None:
            config = GuardConfig()
        elif not isinstance(config, GuardConfig):
            config = GuardConfig.model_validate(config)
        self.config: GuardConfig = config
        self.store = store

    def control(self) -> GuardControl:
        """Return a framework-free control for one turn (the seed's vocabulary).

        Returns:
            A new `GuardControl` with an empty state.
        """
        return GuardControl(self.config)

    def __repr__(self) -> str:
        """Show the configuration that differs from the defaults."""
        changed = self.config.model_dump(exclude_defaults=True)
        return f"ReplayGuard(config=GuardConfig(**{changed!r}))"
