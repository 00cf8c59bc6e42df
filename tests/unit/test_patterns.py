"""Users' regular expressions run in linear time, or are refused (issue 27 item 5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.policy.config import ClassRule, ToolPolicy

PACKAGE = Path(__file__).resolve().parents[2] / "langgraph_replay_guard"


def _run_within(code: str, seconds: float = 20) -> str:
    """Run `code` in a fresh interpreter; a backtracking match would never return."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=seconds,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the match did not return within {seconds} s (catastrophic backtracking)")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_catastrophic_failure_pattern_returns_at_once_after_the_tool_ran():
    out = _run_within(
        "from langgraph_replay_guard import GuardConfig\n"
        "from langgraph_replay_guard.decisions.engine import call_facts, make_event\n"
        "config = GuardConfig(failure_pattern=r'(a+)+$')\n"
        "facts = call_facts(config, 'probe', {})\n"
        "event = make_event(facts, 'success', result='a' * 32 + '!')\n"
        "again = make_event(facts, 'success', result='b\\n' + 'a' * 5000)\n"
        "print('f' in event, 'f' in again)\n"
    )
    assert out.splitlines()[-1] == "False True"  # only the second has a line of a's at its end


def test_a_catastrophic_class_rule_returns_at_once_on_a_model_chosen_argument():
    out = _run_within(
        "from langgraph_replay_guard import GuardConfig\n"
        "from langgraph_replay_guard.decisions.engine import call_facts\n"
        "from langgraph_replay_guard.policy.config import ClassRule, ToolPolicy\n"
        "rule = ClassRule(arg='q', pattern=r'^(a+)+$', replay='pure')\n"
        "config = GuardConfig(tools={'t': ToolPolicy(classify=[rule])})\n"
        "print(call_facts(config, 't', {'q': 'a' * 32 + '!'}).replay,"
        " call_facts(config, 't', {'q': 'aaa'}).replay)\n"
    )
    assert out.splitlines()[-1] == "unsafe pure"


@pytest.mark.parametrize(
    ("build", "option"),
    [
        (lambda p: GuardConfig(failure_pattern=p), "GuardConfig.failure_pattern"),
        (lambda p: ToolPolicy(replay="pure", failure_pattern=p), "ToolPolicy.failure_pattern"),
        (lambda p: ClassRule(arg="q", pattern=p, replay="pure"), "ClassRule.pattern"),
    ],
)
@pytest.mark.parametrize("pattern", [r"(a)\1", r"error(?!: ignored)", r"(?<=x)y", "("])
def test_a_pattern_the_linear_engine_cannot_run_is_refused_at_construction(build, option, pattern):
    with pytest.raises(ValidationError) as caught:
        build(pattern)
    text = str(caught.value)
    assert option in text
    assert repr(pattern)[:30] in text
    assert "RE2" in text


def test_the_presets_and_toolkits_patterns_run_on_the_linear_engine():
    shell = GuardConfig(tools={"bash": ToolPolicy(preset="shell")})
    editor = GuardConfig(tools={"edit": ToolPolicy(preset="editor")})
    assert shell.failure_regex_for("bash").search("bash: javac: command not found")
    assert shell.failure_regex_for("bash").search("x\nTraceback (most recent call last):\n")
    assert not shell.failure_regex_for("bash").search("all 12 tests passed")
    assert editor.failure_regex_for("edit").search("ERROR: the file does not exist")
    for path in sorted((PACKAGE / "policy" / "toolkits").glob("*.json")):
        tools = json.loads(path.read_text(encoding="utf-8"))["tools"]
        for name, fields in tools.items():
            fields = {k: v for k, v in fields.items() if k != "reason"}
            ToolPolicy.model_validate(fields)  # refused here if RE2 could not run one
            assert name


def test_failure_patterns_keep_their_semantics():
    config = GuardConfig(failure_pattern=r"^fatal:|exit code [1-9]")
    pattern = config.failure_regex
    assert pattern is not None
    assert pattern.search("ok\nFATAL: no repo")  # case-insensitive, ^ at each line
    assert pattern.search("Exit Code 2")
    assert not pattern.search("exit code 0")
    assert pattern.search("lone \ud800 surrogate\nfatal: x")  # never a UnicodeEncodeError
