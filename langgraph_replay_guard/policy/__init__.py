"""Tool policies: the configuration, per-call classification, presets, toolkits and MCP hints."""

__all__: list[str] = []
