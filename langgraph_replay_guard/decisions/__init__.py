"""The guard's decisions: the engine, the channel state and its format, call keys (pure Python)."""

__all__: list[str] = []
