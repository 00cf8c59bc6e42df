"""A `create_agent` agent guarded by the callback handler, in a fresh process that may die.

Usage: python tests/integration/proc_callbacks_marks.py STORE CHECKPOINTS OUTBOX MODE

The handler keeps its state in a `SqliteStore` at STORE, the agent its checkpoints in a
`SqliteSaver` at CHECKPOINTS (thread "t1"). The unsafe `send_email` tool appends one line to
OUTBOX (its real side effect) before anything else. MODE:

- `down-exit`: the model sends Ann's email once; the tool sends it, then the store goes down
  (its connection is closed) and the tool raises. The process then ends normally.
- `down-kill`: the same, then the process prints `ready` and waits to be killed (SIGKILL).
- `kill-in-body`: the tool sends, prints `sent` and waits to be killed (SIGKILL) mid-call.
- `again`: a new user turn in which the model sends the same email again.
- `resume`: resumes the thread (the pending call of a killed run runs again).

Prints one JSON line at the end (not in the modes that wait to be killed): the tool
messages of the run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from langchain.agents import create_agent
from langchain.agents.middleware import ToolRetryMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import GuardConfig, ReplayGuardCallbackHandler
from langgraph_replay_guard.testing import ScriptedChatModel

EMAIL = {"to": "ann@example.com", "body": "Your refund is on its way."}


def main() -> None:
    store_path, checkpoints, outbox, mode = sys.argv[1:5]
    with (
        SqliteStore.from_conn_string(store_path) as store,
        SqliteSaver.from_conn_string(checkpoints) as saver,
    ):
        store.setup()

        @tool
        def send_email(to: str, body: str) -> str:
            """Send an email."""
            with open(outbox, "a", encoding="utf-8") as handle:
                handle.write(f"{to}\n")
            if mode == "kill-in-body":
                print("sent", flush=True)
                time.sleep(60)
            if mode.startswith("down-"):
                store.conn.close()  # the guard's store is down from now on
                raise ConnectionError("connection reset by peer")
            return "sent"

        # The tool's exception reaches the model as an error message instead of failing the run.
        retry = ToolRetryMiddleware(max_retries=0, on_failure="continue", initial_delay=0)
        send = [("send_email", EMAIL)]
        script: list = [send, "Could not confirm."] if mode != "resume" else ["Could not confirm."]
        model = ScriptedChatModel(script=script)
        agent = create_agent(model, [send_email], middleware=[retry], checkpointer=saver)
        handler = ReplayGuardCallbackHandler(
            GuardConfig(tools={"send_email": "unsafe"}), store=store
        )
        config: dict = {"configurable": {"thread_id": "t1"}, "callbacks": [handler]}
        inputs = None if mode == "resume" else {"messages": [HumanMessage("send Ann the email")]}
        out = agent.invoke(inputs, config, durability="sync")
        texts = [m.text for m in out["messages"] if isinstance(m, ToolMessage)]
        if mode == "down-kill":
            print("ready", flush=True)
            time.sleep(60)
    print(json.dumps({"tool_messages": texts}), flush=True)


if __name__ == "__main__":
    main()
