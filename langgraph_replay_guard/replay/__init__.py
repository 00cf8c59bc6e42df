"""The replay ledger: its rows and state machine, recorded results, claim holders (pure Python)."""

__all__: list[str] = []
