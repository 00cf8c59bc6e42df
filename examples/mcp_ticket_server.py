"""A tiny MCP server over stdio for examples/mcp_tools.py: one tool, one line per real run."""

from __future__ import annotations

import os

from mcp.server.fastmcp import FastMCP

server = FastMCP("tickets", log_level="WARNING")


@server.tool()
def fetch_ticket(ticket_id: str) -> str:
    """Fetch a support ticket by id."""
    with open(os.environ["RUNS_FILE"], "a", encoding="utf-8") as runs:
        runs.write(f"{ticket_id}\n")
    return f"ticket {ticket_id}: the printer is on fire"


if __name__ == "__main__":
    server.run("stdio")
