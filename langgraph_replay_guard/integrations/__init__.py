"""LangGraph and LangChain integrations of the guard (thin layers over the engine)."""

__all__: list[str] = []
