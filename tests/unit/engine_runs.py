"""Calls run through a guard's engine alone (`guard.control()`): the verdict of each, in turn."""

from __future__ import annotations

from collections.abc import Callable

from langgraph_replay_guard import ReplayGuard


def run_through_engine(guard: ReplayGuard) -> Callable[[str, dict, str], str]:
    """Run calls through the guard's engine: each returns its verdict."""
    ctl = guard.control()

    def run(tool: str, args: dict, result: str) -> str:
        decision = ctl.evaluate(tool, args)
        if decision.executes:
            ctl.record_success(tool, args, result=result)
        else:
            ctl.record_denied(tool, args)
        return decision.verdict.value

    return run
