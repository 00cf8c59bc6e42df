"""Store I/O: plans, their sync and async drivers, and atomic compare-and-set per store."""

__all__: list[str] = []
