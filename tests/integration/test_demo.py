"""`replay-guard demo`, run as users run it: the installed command in a fresh process."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _command() -> list[str]:
    installed = Path(sys.executable).with_name("replay-guard")
    if installed.exists():
        return [str(installed)]
    found = shutil.which("replay-guard")
    return [found] if found else [sys.executable, "-m", "langgraph_replay_guard.cli.main"]


def test_demo_shows_what_the_guard_saved():
    env = {**os.environ, "LANGSMITH_TRACING": "false"}
    done = subprocess.run(
        [*_command(), "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
        cwd=ROOT,  # as from a clone
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    plain = re.search(r"without the guard\s+(\d+)\s+(\d+)\s+(\d+)", out)
    guarded = re.search(r"with the guard\s+(\d+)\s+(\d+)\s+(\d+)", out)
    assert plain is not None
    assert guarded is not None
    assert plain.groups() == ("108", "96", "10"), "the unguarded agent loops to the end"
    assert guarded.groups() == ("5", "1", "0"), "the guard stops at the 4th identical read"
    assert "Stop reason in the guard state: repeat_limit" in out
    assert "LOOP WARNING" in out
    assert "0 wrong blocks" in out
    # The last numbers say what they count: the runs stopped, then the calls they never made.
    saved = re.search(
        r"stop (\d+) runaway runs: the (\d+) calls those runs made after the stop would never "
        r"have been made \(eval's 'cut' column\)",
        out,
    )
    assert saved is not None, out
    assert saved.groups() == ("6", "374")

    # The closing hint names the shipped sample as a command that runs from here.
    hint = out.rstrip().splitlines()[-1].strip()
    sample = "langgraph_replay_guard/data/tau_sample.jsonl"
    policy = "langgraph_replay_guard/data/tau_tools.json"
    assert hint.endswith(f" eval {sample} --policy {policy}"), hint
    ran = subprocess.run(
        shlex.split(hint), capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )
    assert ran.returncode == 0, ran.stderr
    assert "35 trajectories, 743 calls" in ran.stdout
