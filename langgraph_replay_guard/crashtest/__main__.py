"""`python -m langgraph_replay_guard.crashtest TARGET TIMEOUT`: the crash test's phase server."""

from __future__ import annotations

import os

os.environ["LANGSMITH_TRACING"] = "false"

import sys

from langgraph_replay_guard.crashtest.server import serve

# The answers own stdout: anything else the process prints goes to stderr.
answers = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
serve(sys.argv[1], float(sys.argv[2]), sys.stdin, answers)
