"""Run the crash test: learn the tool calls, then crash and resume each in fresh processes."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langgraph_replay_guard.crashtest.report import POINTS, CallSeen, CrashReport, Trial
from langgraph_replay_guard.crashtest.target import CrashTestError, split_target

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
    split_target(target)  # a malformed target fails here, before any process starts
    given = DEFAULT_INPUT if input is None else input
    allowed = frozenset(allow_rerun)
    with tempfile.TemporaryDirectory(prefix="replay-guard-crashtest-") as root:
        servers = _Servers(target, timeout, max(1, jobs), root)
        try:
            learned = servers.ask(
                {"target": target, "dir": _fresh(root, "learn"), "phase": "learn", "input": given}
            )
            if "error" in learned:
                raise CrashTestError(str(learned["error"]))
            calls = tuple(CallSeen(**call) for call in learned["calls"])
            plan = [(call, point) for call in calls for point in POINTS]

            def one(index: int) -> Trial:
                call, point = plan[index]
                opts = {"target": target, "dir": _fresh(root, f"trial-{index}"), "input": given}
                return _trial(servers, opts, call, point, call.tool in allowed)

            with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                trials = tuple(pool.map(one, range(len(plan))))
        finally:
            servers.close()
    return CrashReport(calls=calls, trials=trials)


def _fresh(root: str, name: str) -> str:
    path = Path(root) / name
    path.mkdir()
    return str(path)


def _trial(
    servers: _Servers, opts: dict[str, Any], call: CallSeen, point: str, allowed: bool
) -> Trial:
    where = [call.tool, call.ordinal]
    crash = servers.ask({**opts, "phase": "crash", "kill": [*where, point]})
    error = crash.get("error")
    killed = bool(crash.get("killed"))
    resume = "-"
    if error is None:
        resumed = servers.ask({**opts, "phase": "resume", "call": where})
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


class _Server:
    """One phase server (`server.serve` in a new interpreter): forks a process per phase."""

    def __init__(self, target: str, timeout: float, log: Path) -> None:
        path = os.environ.get("PYTHONPATH")
        env = {
            **os.environ,
            "LANGSMITH_TRACING": "false",
            "PYTHONPATH": os.pathsep.join([_PACKAGE_ROOT, *([path] if path else [])]),
        }
        command = [sys.executable, "-m", "langgraph_replay_guard.crashtest", target, f"{timeout}"]
        with log.open("ab") as errors:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=env
            )
        self.ready = False
        self.timeout = timeout

    def ask(self, opts: dict[str, Any]) -> dict[str, Any]:
        """Run one phase; its result, `{"killed": True}` or `{"error": ...}`."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None
        assert stdout is not None
        # The server bounds each phase; this bounds the server (an import that hangs).
        watchdog = threading.Timer(2 * self.timeout + 60, self.process.kill)
        watchdog.start()
        try:
            if not self.ready:
                self.ready = stdout.readline() == b"ready\n"
            stdin.write(json.dumps(opts).encode() + b"\n")
            stdin.flush()
            line = stdout.readline()
        except OSError:
            line = b""
        finally:
            watchdog.cancel()
        if not self.ready or not line:
            return {"error": "the crash test's process server died (see --timeout)"}
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        """End the server (it exits when its input ends)."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _Servers:
    """A pool of phase servers, one per job; each trial borrows one."""

    def __init__(self, target: str, timeout: float, jobs: int, root: str) -> None:
        self.idle: queue.Queue[_Server] = queue.Queue()
        self.all = [_Server(target, timeout, Path(root) / "servers.log") for _ in range(jobs)]
        for server in self.all:
            self.idle.put(server)

    def ask(self, opts: dict[str, Any]) -> dict[str, Any]:
        server = self.idle.get()
        try:
            return server.ask(opts)
        finally:
            self.idle.put(server)

    def close(self) -> None:
        for server in self.all:
            server.close()
