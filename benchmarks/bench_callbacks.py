"""Per-step cost of the callback handler, side by side with no guard and with the middleware.

Run: python benchmarks/bench_callbacks.py
The handler sees every callback event of a run (chains, model, tools), so its cost is per
event, not only per tool call. The no-op handler rows show what LangChain itself spends once a
run has any callback handler: compare the guard with them. Rows run round-robin (drift on a
shared machine hits them alike); medians of whole runs divided by their steps. Compare the
columns, not the absolute numbers.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("LANGSMITH_TRACING", "false")

from langchain.agents import create_agent
from langchain_classic.agents import AgentExecutor, create_tool_calling_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool

from langgraph_replay_guard import ReplayGuard, ReplayGuardCallbackHandler
from langgraph_replay_guard.testing import ScriptedChatModel

STEPS = 100
ROUNDS = 9


@tool
def lookup(id: str) -> str:
    """Look up a record."""
    return f'{{"id": "{id}", "status": "active", "plan": "Premium"}}'


def _model() -> ScriptedChatModel:
    return ScriptedChatModel(script=[[("lookup", {"id": f"R{i}"})] for i in range(STEPS)])


def _agent_run(middleware: list[Any], callbacks: list[Any]) -> None:
    agent = create_agent(_model(), [lookup], middleware=middleware)
    config = {
        "configurable": {"thread_id": "bench"},
        "callbacks": callbacks,
        "recursion_limit": 10 * STEPS,
    }
    agent.invoke({"messages": [HumanMessage("go")]}, config)


def _executor_run(callbacks: list[Any]) -> None:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "sys"), ("human", "{input}"), ("placeholder", "{agent_scratchpad}")]
    )
    agent = create_tool_calling_agent(_model(), [lookup], prompt)
    executor = AgentExecutor(
        agent=agent, tools=[lookup], handle_parsing_errors=True, max_iterations=STEPS + 5
    )
    executor.invoke({"input": "go"}, {"callbacks": callbacks, "metadata": {"thread_id": "b"}})


def _median_steps(rows: list[tuple[str, Callable[[], None]]]) -> dict[str, float]:
    samples: dict[str, list[float]] = {label: [] for label, _ in rows}
    for _ in range(ROUNDS):
        for label, run in rows:
            start = time.perf_counter()
            run()
            samples[label].append((time.perf_counter() - start) / STEPS)
    return {label: statistics.median(times) for label, times in samples.items()}


def main() -> None:
    print(f"{STEPS} tool-calling steps per run, median of {ROUNDS} runs, scripted model")
    print()
    rows = [
        ("create_agent, no guard", lambda: _agent_run([], [])),
        (
            "create_agent + callback handler",
            lambda: _agent_run([], [ReplayGuardCallbackHandler()]),
        ),
        (
            "create_agent + ReplayGuardMiddleware",
            lambda: _agent_run([ReplayGuard().middleware()], []),
        ),
        ("create_agent + a no-op handler", lambda: _agent_run([], [BaseCallbackHandler()])),
        ("AgentExecutor, no guard", lambda: _executor_run([])),
        ("AgentExecutor + a no-op handler", lambda: _executor_run([BaseCallbackHandler()])),
        ("AgentExecutor + callback handler", lambda: _executor_run([ReplayGuardCallbackHandler()])),
    ]
    medians = _median_steps(rows)
    print(f"{'':40}{'median step':>12}{'vs no guard':>13}")
    for label, median in medians.items():
        base = medians[label.split(",")[0].split(" +")[0] + ", no guard"]
        print(f"{label:40}{median * 1000:>10.3f}ms{median / base:>12.3f}x")


if __name__ == "__main__":
    main()
