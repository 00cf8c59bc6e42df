"""Run the crash test: learn the tool calls, then crash and resume each in fresh processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langgraph_replay_guard.crashtest.child import RESULT_MARK
from langgraph_replay_guard.crashtest.report import POINTS, CallSeen, CrashReport, Trial
from langgraph_replay_guard.crashtest.target import CrashTestError

__all__ = ["DEFAULT_INPUT", "crashtest"]

DEFAULT_INPUT: dict[str, Any] = {"messages": [{"role": "user", "content": "Go."}]}
"""The input when none is given: one user message."""

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def crashtest(
    target: str,
    input: Any = None,
    *,
    allow_rerun: Sequence[str] = (),
    jobs: int = 2,
    timeout: float = 120.0,
) -> CrashReport:
    """Crash-test a guarded graph: SIGKILL each tool call at each crash point, then resume.

    `target` names a function taking `checkpointer=` and `store=` keyword arguments that
    returns the compiled, guarded graph (the guard given that store, or the graph compiled
    with it). The input runs once to learn the tool calls; then, for each call and each
    crash point (`POINTS`), a fresh process runs the graph on fresh SQLite databases
    (`SqliteSaver`, `SqliteStore`, `durability="sync"`) and is killed with SIGKILL there,
    and another process resumes the thread (`invoke(None, config)`). The graph must be
    deterministic (a scripted model, `ScriptedChatModel`): every process replays the input.

    Args:
        target: `path/to/file.py:FUNCTION` or `package.module:FUNCTION`.
        input: The graph's input (JSON-serializable); one user message when None.
        allow_rerun: Tools whose second run after a crash is fine: `pure` tools you checked
            have no side effect. Any other `pure` tool that runs twice fails the test.
        jobs: How many trials run at once.
        timeout: Seconds each child process may take.

    Returns:
        The report; `report.ok` is False when an `unsafe` or `idempotent` call's body started
        twice without its stable idempotency key, or a `pure` call ran twice.

    Raises:
        CrashTestError: The target cannot be loaded, does not build a compiled graph with a
            `ToolNode`, makes no tool call, or its calls never reach a guard's ledger.

    Example:
        ```text
        from langgraph_replay_guard.testing import crashtest

        def test_my_agent_survives_crashes():
            report = crashtest("my_agent.py:build_graph")
            assert report.ok, report.render()
        ```
    """
    given = DEFAULT_INPUT if input is None else input
    allowed = frozenset(allow_rerun)
    with tempfile.TemporaryDirectory(prefix="replay-guard-crashtest-") as root:
        learned = _child(
            {"target": target, "dir": _fresh(root, "learn"), "phase": "learn", "input": given},
            timeout,
        )
        if "error" in learned:
            raise CrashTestError(str(learned["error"]))
        calls = tuple(CallSeen(**call) for call in learned["calls"])
        plan = [(call, point) for call in calls for point in POINTS]

        def one(index: int) -> Trial:
            call, point = plan[index]
            opts = {"target": target, "dir": _fresh(root, f"trial-{index}"), "input": given}
            return _trial(opts, call, point, timeout, call.tool in allowed)

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            trials = tuple(pool.map(one, range(len(plan))))
    return CrashReport(calls=calls, trials=trials)


def _fresh(root: str, name: str) -> str:
    path = Path(root) / name
    path.mkdir()
    return str(path)


def _trial(
    opts: dict[str, Any], call: CallSeen, point: str, timeout: float, allowed: bool
) -> Trial:
    where = [call.tool, call.ordinal]
    crash = _child({**opts, "phase": "crash", "kill": [*where, point]}, timeout)
    error = crash.get("error")
    killed = bool(crash.get("killed"))
    resume = "-"
    if error is None:
        resumed = _child({**opts, "phase": "resume", "call": where}, timeout)
        error = resumed.get("error")
        resume = str(resumed.get("resume", "-"))
    starts = _starts(Path(opts["dir"]) / "starts", call)
    return Trial(
        call=call,
        point=point,
        killed=killed,
        starts=len(starts),
        keys=tuple(starts),
        resume=resume,
        error=None if error is None else str(error),
        allowed_rerun=allowed,
    )


def _starts(path: Path, call: CallSeen) -> list[str | None]:
    """The key of each body start of the call (None where no key was delivered)."""
    if not path.exists():
        return []
    keys = []
    for line in path.read_text(encoding="utf-8").splitlines():
        start = json.loads(line)
        if (start["tool"], start["ordinal"]) == (call.tool, call.ordinal):
            keys.append(start["key"])
    return keys


def _child(opts: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one child process; its result, `{"killed": True}`, or `{"error": ...}`."""
    path = os.environ.get("PYTHONPATH")
    env = {
        **os.environ,
        "LANGSMITH_TRACING": "false",
        "PYTHONPATH": os.pathsep.join([_PACKAGE_ROOT, *([path] if path else [])]),
    }
    command = [sys.executable, "-m", "langgraph_replay_guard.crashtest", json.dumps(opts)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"the {opts['phase']} process timed out after {timeout:g} s"}
    if done.returncode == -signal.SIGKILL:
        return {"killed": True}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            result: dict[str, Any] = json.loads(line[len(RESULT_MARK) :])
            return result
    tail = done.stderr.strip().splitlines()[-5:]
    msg = f"the {opts['phase']} process exited with {done.returncode}: " + " | ".join(tail)
    return {"error": msg}
