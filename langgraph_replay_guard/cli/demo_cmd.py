"""`replay-guard demo`: a looping agent run without and with the guard, offline."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_replay_guard.evaluation import evaluate_file
from langgraph_replay_guard.guard import ReplayGuard
from langgraph_replay_guard.policy.config import GuardConfig, ToolPolicy
from langgraph_replay_guard.testing import ScriptedChatModel, agent_graph

__all__ = ["DESCRIPTION", "add_arguments", "run"]

SYSTEM = "You are a telecom customer-service agent."
# Every tool gets its class (the guard lists the ones that have none, issue 34 item 7).
CONFIG = GuardConfig(
    tools={
        "transfer_to_human_agents": ToolPolicy(replay="unsafe"),
        "get_customer_by_phone": ToolPolicy(replay="pure"),
        "get_details_by_id": ToolPolicy(replay="pure"),
    }
)


DESCRIPTION = (
    "Run a scripted agent that loops like a real recorded run, once without the guard and "
    "once with it, offline and without an API key, and compare their model calls, tool "
    "runs and side effects."
)
"""What `replay-guard demo --help` says of the command."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo takes no arguments."""
    del parser


@dataclass
class _Outcome:
    model_calls: int
    tool_runs: Counter[str]
    seconds: float
    last_message: str
    values: dict[str, Any]
    prompts: list[str | None]


def _tools(runs: Counter[str]) -> list[BaseTool]:
    @tool
    def get_customer_by_phone(phone_number: str) -> str:
        """Find a customer by phone number."""
        runs["get_customer_by_phone"] += 1
        return '{"customer_id": "C1001", "lines": ["L1001", "L1002"], "plan_id": "P1002"}'

    @tool
    def get_details_by_id(id: str) -> str:
        """Look up a line or plan by id."""
        runs["get_details_by_id"] += 1
        return f'{{"plan_id": "{id}", "name": "Premium Plan", "data_limit_gb": 15.0}}'

    @tool
    def transfer_to_human_agents(summary: str) -> str:
        """Hand the customer over to a human (a real side effect: a ticket in a queue)."""
        runs["transfer_to_human_agents"] += 1
        return "Transfer successful"

    return [get_customer_by_phone, get_details_by_id, transfer_to_human_agents]


def _script() -> list[Any]:
    # The shape of a recorded tau2-bench run: one lookup, then the same read 96 times,
    # then the same hand-over 10 times, then an answer.
    script: list[Any] = [[("get_customer_by_phone", {"phone_number": "555-123-2002"})]]
    script += [[("get_details_by_id", {"id": "P1002"})]] * 96
    script += [[("transfer_to_human_agents", {"summary": "roaming issue"})]] * 10
    return script


def _run_agent(guard: ReplayGuard | None) -> _Outcome:
    runs: Counter[str] = Counter()
    model = ScriptedChatModel(
        script=_script(), final="Your plan is Premium; a human will follow up."
    )
    tools = _tools(runs)

    graph = agent_graph(
        model, tools, guard=guard, system_prompt=SYSTEM, checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "demo"}, "recursion_limit": 1000}
    start = time.perf_counter()
    out = graph.invoke({"messages": [HumanMessage("My data doesn't work abroad.")]}, config)
    seconds = time.perf_counter() - start
    return _Outcome(
        model_calls=model.calls,
        tool_runs=runs,
        seconds=seconds,
        last_message=out["messages"][-1].text,
        values=graph.get_state(config).values,
        prompts=model.system_prompts,
    )


def run(args: argparse.Namespace) -> int:
    """Run the demo."""
    print("replay-guard demo: a scripted agent that loops like a real recorded run")
    print("(a fine-tuned GPT-4.1 on tau2-bench called get_details_by_id({'id': 'P1002'}) 96 times")
    print(
        " in a row; another model called transfer_to_human_agents 100 times). No network, no key."
    )
    print()
    plain = _run_agent(None)
    guard = ReplayGuard(CONFIG)
    guarded = _run_agent(guard)
    view = guard.inspect(guarded.values)

    print(f"{'':22}{'model calls':>12}{'lookups run':>13}{'transfers made':>16}{'time':>9}")
    for label, outcome in (("without the guard", plain), ("with the guard", guarded)):
        print(
            f"{label:22}{outcome.model_calls:>12}{outcome.tool_runs['get_details_by_id']:>13}"
            f"{outcome.tool_runs['transfer_to_human_agents']:>16}{outcome.seconds:>8.2f}s"
        )
    saved_calls = plain.model_calls - guarded.model_calls
    saved_runs = sum(plain.tool_runs.values()) - sum(guarded.tool_runs.values())
    print()
    print(f"Saved {saved_calls} model calls and {saved_runs} tool runs; ", end="")
    print(
        f"{plain.tool_runs['transfer_to_human_agents']} transfers without the guard, "
        f"{guarded.tool_runs['transfer_to_human_agents']} with it."
    )
    print(f"Stop reason in the guard state: {view.stop_reason} ({view.stop})")
    print()
    reminder = next((p for p in guarded.prompts if p and "LOOP WARNING" in p), None)
    print("What the model saw in its next system prompt after the first blocked call:")
    print(f"  {reminder.removeprefix(SYSTEM).strip() if reminder else '(none)'}")
    blocked = next(
        (
            m
            for m in guarded.values["messages"]
            if isinstance(m, ToolMessage) and m.status == "error"
        ),
        None,
    )
    print("What it was told instead of running the tool:")
    print(f"  {blocked.text.splitlines()[0] if blocked else '(none)'}")
    final = guarded.values["messages"][-1]
    if isinstance(final, AIMessage):
        print("How the guarded run ended:")
        print(f"  {final.text}")
    print()
    _offline_eval_summary()
    return 0


def _offline_eval_summary() -> None:
    data = resources.files("langgraph_replay_guard") / "data"
    with resources.as_file(data / "tau_tools.json") as policy:
        config = GuardConfig().with_policies(policy)
    with resources.as_file(data / "tau_sample.jsonl") as sample:
        total = evaluate_file(sample, config).total
    # Each number says what it counts: "make 373 unnecessary" read as 373 more blocks.
    print(
        f"On {total.trajectories} real recorded runs shipped with the package ({total.calls} "
        f"calls), the default guard would block {total.blocked} calls, with {total.wrong} wrong "
        f"blocks, and stop {total.aborts} runaway runs: the {total.cut} calls those runs made "
        "after the stop would never have been made (eval's 'cut' column)."
    )
    print("See the details (then try your own recordings, in the same format):")
    print(f"  {eval_command()}")


def eval_command() -> str:
    """The `replay-guard eval` command for the shipped sample, runnable from here.

    In a clone after `make demo`: `.venv/bin/replay-guard eval
    langgraph_replay_guard/data/tau_sample.jsonl --policy
    langgraph_replay_guard/data/tau_tools.json`. Paths under the working directory are
    shown relative to it, others whole.
    """
    data = Path(str(resources.files("langgraph_replay_guard") / "data"))
    sample, policy = _shown(data / "tau_sample.jsonl"), _shown(data / "tau_tools.json")
    return f"{_program()} eval {sample} --policy {policy}"


def _shown(path: Path) -> str:
    """`path` relative to the working directory when it is under it, else whole; quoted."""
    try:
        shown = str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        shown = str(path)
    return shlex.quote(shown)


def _program() -> str:
    """`replay-guard`, or the path the demo was started by when that is not on PATH.

    `make demo` runs `.venv/bin/replay-guard` without activating the virtual environment:
    the hint then says `.venv/bin/replay-guard` too.
    """
    invoked = sys.argv[0] if sys.argv else ""
    if Path(invoked).name == "replay-guard" and os.sep in invoked:
        on_path = shutil.which("replay-guard")
        if on_path is None or Path(on_path).resolve() != Path(invoked).resolve():
            return _shown(Path(invoked))
    return "replay-guard"
