"""A recorded agent run that blocks inside a tool, for the crash test (killed with SIGKILL).

Usage: python tests/integration/proc_record.py DB_FILE READY_FILE EXECUTION_ID

The run is recorded into the SQLite store DB_FILE with the record id EXECUTION_ID. The tool
writes READY_FILE and then sleeps: the test kills the process while it sleeps.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.graphs import POLICY, build_agent


def main(argv: list[str]) -> None:
    db, ready, execution_id = argv[0], Path(argv[1]), argv[2]

    @tool
    def transfer_to_human_agents(summary: str) -> str:
        """Transfer the customer to a human agent."""
        ready.write_text("in the tool")
        time.sleep(120)  # killed here
        return "Transfer successful"

    model = ScriptedChatModel(script=[[("transfer_to_human_agents", {"summary": "help"})]])
    with SqliteStore.from_conn_string(db) as store:
        store.setup()
        guard = ReplayGuard(POLICY, store=store, record=True)
        agent = guard.record(build_agent(guard, model, [transfer_to_human_agents]))
        agent.invoke(
            {"messages": [HumanMessage(content="I need a human.")]},
            {"run_id": uuid.UUID(execution_id)},
        )


if __name__ == "__main__":
    main(sys.argv[1:])
