"""A scripted coding agent with a real shell and a real file editor on a guarded custom graph."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel, agent_graph

os.environ["LANGSMITH_TRACING"] = "false"

CODING = GuardConfig(
    tools={"bash": {"preset": "shell"}, "str_replace_editor": {"preset": "editor"}}
)
TESTS = "python -m unittest -q test_calc"

CALC = """\
def add(a, b):
    return a - b


def mul(a, b):
    return a + b
"""
TEST_CALC = """\
import unittest

from calc import add, mul


class TestCalc(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_mul(self):
        self.assertEqual(mul(2, 3), 6)
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "calc.py").write_text(CALC)
    (tmp_path / "test_calc.py").write_text(TEST_CALC)
    return tmp_path


def coding_tools(repo: Path, ran: list[str]) -> list[BaseTool]:
    """The two tools of a typical coding agent; both really act on `repo`."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    # No .pyc for the repository's modules: CPython checks a cached module by its source's
    # mtime in whole seconds and its size, so an edit of the same size within the second
    # (`a - b` to `a + b`) would rerun the stale code (make test lets Python write bytecode).
    env["PYTHONDONTWRITEBYTECODE"] = "1"

    @tool
    def bash(command: str) -> str:
        """Run a shell command in the repository and return its output and exit code."""
        ran.append(command)
        done = subprocess.run(
            command, shell=True, cwd=repo, env=env, capture_output=True, text=True, timeout=120
        )
        return f"{done.stdout}{done.stderr}[exit code {done.returncode}]"

    @tool
    def str_replace_editor(
        command: str, path: str, old_str: str | None = None, new_str: str | None = None
    ) -> str:
        """View a file, or replace one exact occurrence of old_str with new_str."""
        ran.append(f"editor {command} {path}")
        target = repo / path
        text = target.read_text()
        if command == "view":
            return text
        if command == "str_replace" and old_str is not None and new_str is not None:
            if text.count(old_str) != 1:
                return f"Error: old_str {old_str!r} did not appear exactly once in {path}."
            target.write_text(text.replace(old_str, new_str))
            return f"The file {path} has been edited."
        return f"Error: unknown command {command!r}."

    return [bash, str_replace_editor]


def run_agent(config: GuardConfig, repo: Path, script: list[Any]) -> tuple[Any, list[str], Any]:
    ran: list[str] = []
    guard = ReplayGuard(config)
    model = ScriptedChatModel(script=script, final="Done.")
    graph = agent_graph(model, coding_tools(repo, ran), guard=guard, checkpointer=InMemorySaver())
    config_ = {"configurable": {"thread_id": "coding"}}
    out = graph.invoke({"messages": [HumanMessage("Fix the failing tests.")]}, config_)
    return out, ran, guard.inspect(graph.get_state(config_))


def tool_messages(out: Any) -> list[ToolMessage]:
    return [m for m in out["messages"] if isinstance(m, ToolMessage)]


def bash(command: str) -> list[tuple[str, dict[str, Any]]]:
    return [("bash", {"command": command})]


def edit(old: str, new: str) -> list[tuple[str, dict[str, Any]]]:
    args = {"command": "str_replace", "path": "calc.py", "old_str": old, "new_str": new}
    return [("str_replace_editor", args)]


def sed(old: str, new: str) -> list[tuple[str, dict[str, Any]]]:
    return bash(f"sed -i 's/{old}/{new}/' calc.py")


def test_rerunning_the_tests_after_each_edit_is_allowed_every_time(repo):
    script = [
        bash("cat calc.py"),
        bash(TESTS),
        edit("a - b", "a + b"),
        bash(TESTS),
        edit("return a + b\n\n\ndef mul", "return a + b\n\n\ndef mul"),  # a no-op edit
        sed("return a + b$", "return a * b"),  # wrong: this also hits add
        bash(TESTS),
        bash("cat calc.py"),
        edit("def add(a, b):\n    return a * b", "def add(a, b):\n    return a + b"),
        bash(TESTS),
        bash("cat calc.py"),
    ]
    out, ran, view = run_agent(CODING, repo, script)
    messages = tool_messages(out)
    assert [m.status for m in messages] == ["success"] * len(script)
    assert ran.count(TESTS) == 4, "every re-run after an edit ran"
    assert ran.count("cat calc.py") == 3, "every re-read after a write ran"
    test_runs = [m.text for m in messages if m.name == "bash" and "Ran 2 tests" in m.text]
    assert "FAILED (failures=2)" in test_runs[0]
    assert "FAILED (failures=1)" in test_runs[1]
    assert test_runs[-1].endswith("OK\n[exit code 0]")
    assert (repo / "calc.py").read_text().count("return a + b") == 1
    assert view.totals.blocked == 0


def test_treating_bash_as_pure_blocks_the_legitimate_rerun(repo):
    # Why the preset exists: with one class for the whole tool, the edit made through the
    # shell does not count as a write, so the re-run is answered with the stale failure.
    script = [bash(TESTS), sed("a - b", "a + b"), bash(TESTS), sed("a + b$", "a * b"), bash(TESTS)]
    pure_bash = GuardConfig(tools={"bash": "pure"})
    out, ran, _ = run_agent(pure_bash, repo, script)
    assert ran.count(TESTS) == 1
    assert [m.status for m in tool_messages(out)][2] == "error"
    stale = tool_messages(out)[2].text
    assert "FAIL: test_add" in stale, "the model is shown the stale result"

    (repo / "calc.py").write_text(CALC)
    out, ran, _ = run_agent(CODING, repo, script)
    assert ran.count(TESTS) == 3
    assert [m.status for m in tool_messages(out)] == ["success"] * 5


def test_the_same_cat_five_times_runs_once_while_nothing_is_written(repo):
    config = CODING.model_copy(update={"exit_behavior": "continue"})
    out, ran, view = run_agent(config, repo, [bash("cat calc.py")] * 5)
    assert ran == ["cat calc.py"]
    messages = tool_messages(out)
    assert [m.status for m in messages] == ["success"] + ["error"] * 4
    assert "def add" in messages[1].text, "a duplicate gets the earlier result"
    assert [reason for _, reason, _ in view.blocked] == [
        "duplicate",
        "duplicate",
        "repeat_limit",
        "repeat_limit",
    ]


def test_with_the_default_abort_the_cat_loop_ends_the_run(repo):
    out, ran, view = run_agent(CODING, repo, [bash("cat calc.py")] * 5)
    assert ran == ["cat calc.py"]
    assert view.stop_reason == "repeat_limit"
    assert len(tool_messages(out)) == 4, "the 5th cat is never asked for"


def test_a_write_through_the_shell_makes_the_next_read_run(repo):
    script = [
        bash("cat calc.py"),
        bash("cat calc.py 2>/dev/null"),
        bash("echo '# note' >> calc.py"),
        bash("cat calc.py"),
        [("str_replace_editor", {"command": "view", "path": "calc.py"})],
        [("str_replace_editor", {"command": "view", "path": "calc.py"})],
    ]
    out, ran, _ = run_agent(CODING, repo, script)
    statuses = [m.status for m in tool_messages(out)]
    assert statuses == ["success", "success", "success", "success", "success", "error"]
    assert ran.count("cat calc.py") == 2
    assert "# note" in tool_messages(out)[3].text


def test_the_same_test_run_without_an_edit_is_a_loop(repo):
    _, ran, view = run_agent(CODING, repo, [bash(TESTS)] * 6)
    assert ran.count(TESTS) == 3
    assert view.stop_reason == "repeat_limit"


def test_the_same_failing_edit_again_and_again_is_a_loop(repo):
    _, ran, view = run_agent(CODING, repo, [edit("a ** b", "a * b")] * 6)
    assert ran.count("editor str_replace calc.py") == 3
    assert view.stop_reason == "repeat_limit"
