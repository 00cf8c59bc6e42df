"""`python -m langgraph_replay_guard.crashtest '<json>'`: the crash test's child process."""

from __future__ import annotations

import sys

from langgraph_replay_guard.crashtest.child import main

main(sys.argv[1:])
