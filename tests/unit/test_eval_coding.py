"""`replay-guard eval` with per-call classes, on the synthetic coding-agent trajectories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.cli.main import main
from langgraph_replay_guard.evaluation import evaluate_file

DATA = Path(__file__).parent.parent.parent / "benchmarks" / "data"
TRAJECTORIES = DATA / "coding-synthetic.jsonl"
NORMALIZE = [r"in [0-9.]+s"]


def evaluate(policy: str):
    config = GuardConfig().with_policies(DATA / f"coding-{policy}.json")
    return evaluate_file(TRAJECTORIES, config, normalize=NORMALIZE)


def test_shell_preset_blocks_no_legitimate_rerun_and_still_catches_the_loops():
    pure, unsafe, preset = evaluate("bash-pure"), evaluate("bash-unsafe"), evaluate("presets")
    weak_runs = preset.by_model["synthetic-weak"].trajectories
    # bash as pure blocks re-runs after edits made through the shell: wrong blocks.
    assert pure.total.wrong > 0
    assert pure.by_tool_class["bash"]["pure"].wrong == pure.total.wrong
    # The preset blocks nothing new, and dedups reads that bash-as-unsafe lets through.
    assert preset.total.wrong == 0
    assert (
        preset.by_model["synthetic-strong"].redundant
        > unsafe.by_model["synthetic-strong"].redundant
    )
    assert preset.total.caught > unsafe.total.caught
    # Every weak agent's loop still ends.
    assert preset.by_model["synthetic-weak"].aborts == weak_runs
    classes = set(preset.by_tool_class["bash"])
    assert classes == {"pure", "pure volatile", "idempotent", "unsafe"}


def test_cli_accepts_presets_in_the_policy_file_and_reports_per_tool_and_class(capsys):
    policy = DATA / "coding-presets.json"
    args = ["eval", str(TRAJECTORIES), "--policy", str(policy), "--normalize", NORMALIZE[0]]
    assert main(args) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()]
    bash_rows = [row for row in rows if row[:1] == ["bash"]]
    assert bash_rows
    assert bash_rows[0][1] == "pure"
    assert any(row[:1] == ["idempotent"] for row in rows)
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["by_tool_class"]["bash"]["idempotent"]["calls"] > 0
    assert data["by_class"]["unsafe"]["calls"] > 0


def test_cli_reports_a_bad_preset_in_a_policy_file(tmp_path, capsys):
    policy = tmp_path / "tools.json"
    policy.write_text(json.dumps({"tools": {"bash": {"preset": "zsh"}}}))
    with pytest.raises(SystemExit):
        main(["eval", str(TRAJECTORIES), "--policy", str(policy)])
    err = capsys.readouterr().err
    assert "tools.bash.preset" in err
    assert "unknown preset 'zsh'" in err
