"""Where a guarded `create_agent` step's time goes: the guard's parts, in thread CPU time.

Run: python benchmarks/step_parts.py [steps]
The scripted agent of `bench_agent.py`, guarded, runs 20 steps, then `steps` more (150 by
default) with the guard's parts timed: each part's `time.thread_time` (the model hook runs
in the graph's thread, the tool hook in the tools node's worker thread) summed over the steps
and divided by their number. Nested parts are inside their hook's total; "excl." excludes
the model call or the tool itself. Instrumented by wrapping the package's own functions, so
the figures are a little above the uninstrumented ones; compare rows and commits measured
one after the other, not with `bench_agent.py`'s totals. With `PYTHONPATH` pointing to
another checkout, the same parts of that code are timed.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

os.environ.setdefault("LANGSMITH_TRACING", "false")

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.channels import binop
from langgraph.checkpoint.memory import InMemorySaver
from langsmith import run_helpers

from langgraph_replay_guard import ReplayGuard
from langgraph_replay_guard.decisions import state
from langgraph_replay_guard.integrations import middleware, tool_node
from langgraph_replay_guard.testing import ScriptedChatModel

TOTALS: defaultdict[str, int] = defaultdict(int)
CALLS: Counter[str] = Counter()
ON = [False]


@tool
def lookup(id: str) -> str:
    """Look up a record."""
    return f'{{"id": "{id}", "status": "active", "plan": "Premium", "data_limit_gb": 15}}'


def _add(label: str, start: int) -> None:
    TOTALS[label] += time.thread_time_ns() - start
    CALLS[label] += 1


def _timed(owner: Any, name: str, label: str) -> None:
    func = getattr(owner, name)

    @functools.wraps(func)
    def timed(*args: Any, **kwargs: Any) -> Any:
        if not ON[0]:
            return func(*args, **kwargs)
        start = time.thread_time_ns()
        try:
            return func(*args, **kwargs)
        finally:
            _add(label, start)

    setattr(owner, name, timed)


def _excluding(owner: Any, name: str, label: str, inner: int) -> None:
    """Time a hook without the handler it is given (argument `inner`): the guard's own part."""
    func = getattr(owner, name)

    def timed(*args: Any) -> Any:
        if not ON[0]:
            return func(*args)
        handler: Callable[[Any], Any] = args[inner]
        spent = [0]

        # Named as the handler: the guard recognises ToolNode's own execute by its name
        # (`_compat.runs_the_tool_itself`), and takes another path for any other handler.
        @functools.wraps(handler)
        def through(request: Any) -> Any:
            start = time.thread_time_ns()
            try:
                return handler(request)
            finally:
                spent[0] += time.thread_time_ns() - start

        start = time.thread_time_ns()
        try:
            return func(*args[:inner], through, *args[inner + 1 :])
        finally:
            TOTALS[label] += time.thread_time_ns() - start - spent[0]
            CALLS[label] += 1

    timed.__signature__ = getattr(func, "__signature__", None)  # type: ignore[attr-defined]
    setattr(owner, name, timed)


def _instrument() -> None:
    guard_mw = middleware.ReplayGuardMiddleware
    _excluding(guard_mw, "wrap_model_call", "model hook, excl. the model call", 2)
    for name in ("_scrub", "_show", "_stop_after", "_answered_elsewhere", "_check_tools"):
        _timed(guard_mw, name, f"  model hook: {name}")
    wrapper = tool_node.ToolCallWrapper
    _excluding(wrapper, "wrap", "tool hook, excl. the tool", 2)
    for name in ("_decide", "_finish"):
        _timed(wrapper, name, f"  tool hook: {name}")
    _timed(state, "fold_events", "reducer: fold_events")
    _timed(run_helpers, "_setup_run", "langsmith traceable: _setup_run (both hooks)")
    update = binop.BinaryOperatorAggregate.update

    def channel_update(self: Any, values: Any) -> bool:
        if not ON[0] or self.operator is not state.merge_guard_state:
            return update(self, values)
        start = time.thread_time_ns()
        try:
            return update(self, values)
        finally:
            _add("reducer: the channel's updates", start)

    binop.BinaryOperatorAggregate.update = channel_update  # type: ignore[method-assign]


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 150
    _instrument()
    script = [[("lookup", {"id": f"R{step}"})] for step in range(steps + 30)]
    agent = create_agent(
        ScriptedChatModel(script=script),
        [lookup],
        middleware=[ReplayGuard().middleware()],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "parts"}, "recursion_limit": 10 * steps + 400}
    stream = agent.stream(
        {"messages": [HumanMessage("go")]}, config, stream_mode="updates", durability="sync"
    )
    done = 0
    for update in stream:
        if "tools" not in update:
            continue
        done += 1
        if done == 20:
            ON[0] = True
        if done == 20 + steps:
            break
    ON[0] = False
    print(f"{steps} steps, thread CPU time per step, {state.__file__}")
    for label in sorted(TOTALS, key=lambda k: (k.strip().split(":")[0], k)):
        print(f"{label:48}{TOTALS[label] / steps / 1000:>9.1f} us{CALLS[label] / steps:>6.1f}x")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
