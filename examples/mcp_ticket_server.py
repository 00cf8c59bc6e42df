"""A tiny MCP server over stdio whose tools append a line to `$MCP_RUNS_FILE` on every real run.

Started as a subprocess through langchain-mcp-adapters by examples/mcp_tools.py and
tests/integration/test_stack_mcp.py; the file is how they count what the server really ran.
"""

from __future__ import annotations

import os

from mcp.server.fastmcp import FastMCP

server = FastMCP("tickets", log_level="WARNING")


@server.tool()
def fetch_ticket(ticket_id: str) -> str:
    """Fetch a support ticket by id."""
    with open(os.environ["MCP_RUNS_FILE"], "a", encoding="utf-8") as runs:
        runs.write(f"fetch_ticket {ticket_id}\n")
    return f"ticket {ticket_id}: the printer is on fire"


@server.tool()
def close_ticket(ticket_id: str) -> str:
    """Close a support ticket (a side effect)."""
    with open(os.environ["MCP_RUNS_FILE"], "a", encoding="utf-8") as runs:
        runs.write(f"close_ticket {ticket_id}\n")
    return f"ticket {ticket_id} closed"


if __name__ == "__main__":
    server.run("stdio")
