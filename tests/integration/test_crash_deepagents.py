"""A deep agent killed with SIGKILL after `write_file`: the file survives, written once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import warm_children

pytest.importorskip("deepagents", reason="the stacks extra: pip install -e '.[stacks]'")

CHILD = Path(__file__).with_name("proc_deepagents.py")


def _child(phase: str, root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LANGSMITH_TRACING": "false"}
    return warm_children.run(
        [sys.executable, str(CHILD), phase, str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_write_file_killed_before_its_checkpoint_is_replayed_whole_on_resume(tmp_path):
    first = _child("run", tmp_path)
    assert first.returncode == -9, first.stderr[-2000:]  # SIGKILL, before any checkpoint
    resumed = _child("resume", tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    report = json.loads(resumed.stdout.strip().splitlines()[-1])
    executions = (tmp_path / "executions").read_text().splitlines()
    assert executions == ["write_file"]  # the body ran once, in the killed process
    # The resumed run got write_file's state writes back from the ledger: the file is there.
    assert report["files"] == {"/notes.md": "the printer is on fire\n"}
    assert report["texts"][-1] == "Saved your notes."
