"""A process that imports once, then forks a fresh process per crash-test phase and waits."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

__all__ = ["serve"]

_POLL = 0.01


_PHASE_MODULES = (
    "langgraph.checkpoint.sqlite",
    "langgraph.store.sqlite",
    "langgraph.checkpoint.sqlite.aio",  # the async phases'
    "langgraph.store.sqlite.aio",
    # What a guarded run imports on first use (the guard's integrations, LangChain's lazy
    # modules): imported once here, not again in every forked phase (60 ms each).
    "langgraph_replay_guard.integrations.middleware",
    "langgraph_replay_guard.integrations.tool_node",
    "langgraph_replay_guard.integrations.callbacks",
    "langchain_core.tracers.stdout",
    "langchain_core.messages.block_translators.langchain_v0",
)


def _preload(target: str) -> None:
    """Import what every phase needs, so a forked process starts at once."""
    import importlib

    from langgraph_replay_guard.crashtest import target as targets

    for module in _PHASE_MODULES:
        with contextlib.suppress(ImportError):  # a phase that needs it reports the error
            importlib.import_module(module)

    with contextlib.suppress(Exception):  # the forked phase reports the error itself
        where, _ = targets.split_target(target)
        if not (where.endswith(".py") or Path(where).is_file()):
            targets.load_function(target)  # a module stays imported; a file runs per phase


def _phase(opts: dict[str, Any]) -> None:
    """In the forked process: run the phase, write its result file, exit without cleanup."""
    directory = Path(opts["dir"])
    log = os.open(directory / f"{opts['phase']}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    status = 1
    try:
        from langgraph_replay_guard.crashtest.child import run

        result = run(opts)
        (directory / f"{opts['phase']}.json").write_text(json.dumps(result, default=str))
        status = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _wait(pid: int, timeout: float) -> tuple[int | None, bool]:
    """Wait for a forked phase: its wait status, and whether it was killed for the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status, False
        time.sleep(_POLL)
    os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1], True


def _answer(opts: dict[str, Any], timeout: float) -> dict[str, Any]:
    pid = os.fork()
    if pid == 0:
        _phase(opts)
    status, late = _wait(pid, timeout)
    directory, phase = Path(opts["dir"]), opts["phase"]
    if late:
        return {"error": f"the {phase} process timed out after {timeout:g} s"}
    if status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return {"killed": True}
    found = directory / f"{phase}.json"
    if found.exists():
        result: dict[str, Any] = json.loads(found.read_text())
        return result
    log = directory / f"{phase}.log"
    tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
    return {"error": f"the {phase} process failed: " + " | ".join(tail)}


def serve(target: str, timeout: float, requests: TextIO, answers: TextIO) -> None:
    """Answer one JSON line of phase options per request line until `requests` ends.

    Args:
        target: The crash test's target, imported once here.
        timeout: Seconds each phase may take.
        requests: Where the requests come from (stdin).
        answers: Where the answers go, one JSON line each (stdout).
    """
    _preload(target)
    answers.write("ready\n")
    answers.flush()
    for line in requests:
        answers.write(json.dumps(_answer(json.loads(line), timeout)) + "\n")
        answers.flush()
