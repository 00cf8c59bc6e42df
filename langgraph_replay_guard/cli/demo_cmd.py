"""`replay-guard demo`: show what the guard saves, offline."""

from __future__ import annotations

import argparse
from importlib import resources

from langgraph_replay_guard.cli.eval_cmd import print_report
from langgraph_replay_guard.config import GuardConfig
from langgraph_replay_guard.evaluation import evaluate_file

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `demo` sub-command."""
    parser = sub.add_parser(
        "demo",
        help="show what the guard saves on real recorded agent runs (offline, no API key)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo: the default guard over the shipped sample of real trajectories."""
    data = resources.files("langgraph_replay_guard") / "data"
    with resources.as_file(data / "tau_tools.json") as policy:
        config = GuardConfig().with_policies(policy)
    with resources.as_file(data / "tau_sample.jsonl") as sample:
        report = evaluate_file(sample, config)
        print("The default guard, replayed over a sample of real recorded agent runs")
        print("(tau-bench / tau2-bench, MIT; see langgraph_replay_guard/data/README.md).")
        print()
        print_report(report, source=sample.name, show_aborts=5)
    total = report.total
    print()
    print(
        f"Saved {total.blocked + total.cut} of {total.calls} tool calls "
        f"({(total.blocked + total.cut) / max(total.calls, 1):.0%}); "
        f"{total.wrong} of the blocked calls would have returned something new."
    )
    return 0
