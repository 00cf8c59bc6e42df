"""A tiny MCP server over stdio whose tools carry MCP annotations; each real run is logged.

Every tool appends a line to `$MCP_RUNS_FILE` when it runs: that file is how
tests/integration/test_mcp_annotations.py counts what the server really ran.
"""

from __future__ import annotations

import os

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

server = FastMCP("helpdesk", log_level="WARNING")


def _ran(line: str) -> None:
    with open(os.environ["MCP_RUNS_FILE"], "a", encoding="utf-8") as runs:
        runs.write(line + "\n")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
def lookup_ticket(ticket_id: str) -> str:
    """Read a support ticket (read-only)."""
    _ran(f"lookup_ticket {ticket_id}")
    return f"ticket {ticket_id}: the printer is on fire"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
def delete_ticket(ticket_id: str) -> str:
    """Delete a support ticket (destructive)."""
    _ran(f"delete_ticket {ticket_id}")
    return f"ticket {ticket_id} deleted"


@server.tool(
    annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True)
)
def tag_ticket(ticket_id: str, tag: str) -> str:
    """Put a tag on a ticket (idempotent: tagging twice changes nothing more)."""
    _ran(f"tag_ticket {ticket_id} {tag}")
    return f"ticket {ticket_id} tagged {tag}"


@server.tool(annotations=ToolAnnotations(title="Escalate a ticket"))
def escalate_ticket(ticket_id: str) -> str:
    """Escalate a ticket (annotated, but with no hint: the MCP defaults, a side effect)."""
    _ran(f"escalate_ticket {ticket_id}")
    return f"ticket {ticket_id} escalated"


@server.tool()
def ticket_count() -> str:
    """Count the open tickets (no annotations at all)."""
    _ran("ticket_count")
    return "3 open tickets"


if __name__ == "__main__":
    server.run("stdio")
