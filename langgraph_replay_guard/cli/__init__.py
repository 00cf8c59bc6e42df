"""The `replay-guard` command line."""

__all__: list[str] = []
