"""One user turn of a `create_agent` agent guarded by the callback handler, in a fresh process.

Usage: python tests/integration/proc_callbacks.py SQLITE_STORE_FILE THREAD_ID CALLS

The handler keeps its state in a `SqliteStore` at SQLITE_STORE_FILE (shared by every process
that runs this script), with `scope="thread"`. The model makes CALLS identical
`get_details_by_id` calls and then answers. Prints one JSON line: how often the tool body ran
in this process, and the thread's guard view afterwards.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import ReplayGuardCallbackHandler
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.graphs import POLICY, ToolRuns, make_tools


def main() -> None:
    path, thread_id, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
    model = ScriptedChatModel.looping("get_details_by_id", {"id": "P1002"}, times=calls)
    runs = ToolRuns()
    with SqliteStore.from_conn_string(path) as store:
        store.setup()
        handler = ReplayGuardCallbackHandler(
            POLICY.model_copy(update={"scope": "thread"}), store=store
        )
        agent = create_agent(model, make_tools(runs))
        agent.invoke(
            {"messages": [HumanMessage("look up P1002")]},
            {"configurable": {"thread_id": thread_id}, "callbacks": [handler]},
        )
        view = handler.inspect(thread_id)
    print(json.dumps({"runs": runs["get_details_by_id"], "calls": view.totals.calls}))


if __name__ == "__main__":
    main()
