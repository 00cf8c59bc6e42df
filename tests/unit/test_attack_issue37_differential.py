"""Issue 37's smaller state machine decides as c9cb1d9 did, call for call.

Generated call sequences (tools with policies of every kind, outcomes, batches of several
calls, turns, Send fan-out writes merged in shuffled orders and read back from a checkpoint,
format 2 values written with update_state, and `GuardConfig` variations: scope, window,
max_repeats, repeat_reset, result_diff, cycle settings, shadow mode, reminders, previews)
run through `attack37_driver.py` twice, in subprocesses: on this package and on c9cb1d9's
(exported with `git archive`). Every decision, reminder, stop, stored value, `guard.inspect`
view and system prompt must be the same.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

BASE = "c9cb1d9"
ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("attack37_driver.py")
TOOLS = ["read", "search", "write", "poll", "flaky"]


def guard_config(rng: random.Random) -> dict[str, Any]:
    """`GuardConfig` keyword arguments: tool policies and a random set of settings."""
    flaky = {"max_same_failures": rng.choice([1, 2, 3])}
    config: dict[str, Any] = {
        "tools": {"write": {"replay": "unsafe"}, "poll": {"volatile": True}, "flaky": flaky}
    }
    choices: dict[str, list[Any]] = {
        "scope": ["turn", "thread"],
        "history_window": [1, 2, 3, 5, 8],
        "max_repeats": [1, 2, 3, 4],
        "repeat_reset": ["progress", "turn"],
        "result_diff": [True, False],
        "cycle_detection": [True, False],
        "max_cycle_period": [2, 3, 4, 6],
        "mode": ["enforce", "shadow"],
        "reminder": [True, False],
        "store_previews": [True, False],
        "dedup": [True, False],
        "max_same_failures": [0, 1, 2],
        "exit_behavior": ["end", "error", "continue"],
    }
    for name, values in choices.items():
        if rng.random() < 0.35:
            config[name] = rng.choice(values)
    return config


def scenario(rng: random.Random) -> dict[str, Any]:
    """A thread: steps of one to four calls, most of them going round a few calls (a loop)."""
    motif = [(rng.choice(TOOLS), rng.randint(0, 3)) for _ in range(rng.choice([2, 2, 3, 4]))]
    fixed = rng.random() < 0.6  # a call always gives the same result
    steps, turn, position = [], "h0", 0
    for s in range(rng.randint(3, 24)):
        if rng.random() < 0.2:
            turn = f"h{s}"
        calls, results = [], []
        for i in range(rng.choice([1, 1, 1, 2, 2, 3, 4])):
            if rng.random() < 0.6:
                tool, arg = motif[position % len(motif)]
                position += 1
            else:
                tool, arg = rng.choice(TOOLS), rng.randint(0, 3)
            calls.append({"name": tool, "args": {"id": arg}, "id": f"c{s}-{i}"})
            r = rng.random()
            if tool == "flaky" and r < 0.7:
                results.append(["failure", "Error: same failure"])
            elif fixed and r > 0.2:
                results.append(["success", f"{tool}{arg}"])
            elif r < 0.15:
                results.append(["failure", rng.choice(["boom", "no such file"])])
            elif r < 0.2:
                results.append(["failure", None])
            else:
                results.append(["success", rng.choice(["same", "x", "", f"r{rng.randint(0, 2)}"])])
        order = list(range(len(calls)))
        rng.shuffle(order)
        step: dict[str, Any] = {
            "turn": turn,
            "batch": f"ai-{s}",
            "calls": calls,
            "results": results,
            "order": order,
        }
        for flag, chance in [("one_write", 0.15), ("reread", 0.2), ("as_v2", 0.1)]:
            if rng.random() < chance:
                step[flag] = True
        if rng.random() < 0.1:
            step["sized"] = False  # events without the batch size: folded by the next batch
        steps.append(step)
    return {"config": guard_config(rng), "steps": steps}


@pytest.fixture(scope="module")
def old_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """c9cb1d9's package, exported from the repository's history."""
    where = tmp_path_factory.mktemp("c9cb1d9")
    archive = where / "package.tar"
    done = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "-o", str(archive), BASE, "langgraph_replay_guard"],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"no git history holding {BASE}: {done.stderr.decode()[:200]}")
    with tarfile.open(archive) as tar:
        # The archive is this repository's own; Python 3.11 before 3.11.4 (Debian 12's
        # 3.11.2) has no extraction filters.
        tar.extractall(where, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return where


def start(package_root: Path, scenarios: list[Any]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(package_root), "LANGSMITH_TRACING": "false"}
    process = subprocess.Popen(
        [sys.executable, str(DRIVER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=str(package_root),
    )
    assert process.stdin is not None
    process.stdin.write(json.dumps(scenarios))
    process.stdin.close()
    return process


def outputs(process: subprocess.Popen[str]) -> list[Any]:
    assert process.stdout is not None
    text = process.stdout.read()
    assert process.wait(timeout=600) == 0
    results: list[Any] = json.loads(text)
    return results


def test_generated_threads_decide_as_c9cb1d9_did(old_package):
    # 60 threads keep the suite's time (two processes importing LangGraph and running every
    # thread twice); 1,300 generated threads were compared when the change landed.
    rng = random.Random(37)
    scenarios = [scenario(rng) for _ in range(60)]
    now, then = start(ROOT, scenarios), start(old_package, scenarios)
    new_results, old_results = outputs(now), outputs(then)
    assert len(new_results) == len(old_results) == len(scenarios)
    reasons: set[Any] = set()
    for index, (new, old) in enumerate(zip(new_results, old_results, strict=True)):
        assert not isinstance(new, str), f"scenario {index}: {new}"
        for step, (a, b) in enumerate(zip(new, old, strict=True)):
            for part in a:
                assert a[part] == b[part], f"scenario {index}, step {step}: {part} differs"
            reasons.update(d[1] for d in a["decisions"])
            reasons.update(d[5][1] for d in a["decisions"] if d[5])
    # The matrix reaches every layer.
    assert {"duplicate", "repeat_limit", "stop_ignored", "same_failure", "stopped"} <= reasons
