"""Each agent-stack example in examples/ runs as a script and prints what it promises."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from tests import warm_children

ROOT = Path(__file__).resolve().parents[2]

# example -> (the packages it needs, lines its output must contain)
EXAMPLES = {
    "deep_agent.py": (
        ["deepagents"],
        [
            "lookups run by the sub-agent: 1",
            "the parent's task result: I stopped here because I called 'lookup' 4 times",
            "the parent's answer: P1 could not be looked up; the researcher was stuck.",
        ],
    ),
    "supervisor_workers.py": (
        ["langgraph_supervisor"],
        [
            "researcher: I stopped here because I called 'lookup' 4 times w (guard stop: "
            "repeat_limit)",
            "pricer: The plan costs 3 EUR. (guard stop: None)",
            "supervisor: P1 could not be looked up; the plan costs 3 EUR. (guard stop: None)",
        ],
    ),
    "swarm_handoff.py": (
        ["langgraph_swarm"],
        ["lookups run: 1", "active agent: support", "(guard stop: repeat_limit)"],
    ),
    "mcp_tools.py": (
        ["mcp", "langchain_mcp_adapters"],
        ["server runs without the guard: 8", "server runs with the guard: 1"],
    ),
    "shell_middleware.py": (
        [],
        [
            "'cat notes.txt': asked 4 times, ran 1",
            "'echo again >> log.txt': asked 4 times, ran 3",
            "log.txt lines: 3",
        ],
    ),
    "react_agent.py": (
        [],
        ["stopped: lookup repeat_limit after 4 calls", "lookups run: 1, model calls: 4"],
    ),
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_example_runs_and_prints_its_result(name, tmp_path):
    packages, expected = EXAMPLES[name]
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        pytest.skip(f"{name} needs {missing}: pip install -e '.[stacks]'")
    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(ROOT)}
    # A real process forked from the warm zygote (tests/warm_children.py): the script runs as
    # `python examples/NAME` would, without importing LangGraph again. The Python processes
    # it starts itself with `sys.executable` (mcp_tools.py's 11 stdio servers, each a real
    # process running examples/mcp_ticket_server.py as written) are warm children too
    # (`warm_python`): cold, they imported `mcp` again each, about 8 s of CPU in all.
    done = warm_children.run(
        [sys.executable, str(ROOT / "examples" / name)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        warm_python=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    for line in expected:
        assert any(line in printed for printed in lines), f"{line!r} not in:\n{done.stdout}"
