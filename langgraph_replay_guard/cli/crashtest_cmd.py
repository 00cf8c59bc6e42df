"""`replay-guard crashtest`: SIGKILL a guarded graph at every tool-call boundary, then resume."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from langgraph_replay_guard.crashtest import POINTS, CrashTestError, crashtest

__all__ = ["DESCRIPTION", "add_arguments", "run"]


def _json_input(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        msg = f"--input is not JSON: {exc}"
        raise argparse.ArgumentTypeError(msg) from exc


DESCRIPTION = (
    "Run the input once to learn the tool calls, then for each call and each crash "
    f"point ({'; '.join(POINTS.values())}) run the graph in a fresh process on fresh SQLite "
    "databases, "
    "kill it with SIGKILL there, resume the thread in a new process and count how "
    "many times the tool's body started, per call and per tool and arguments. Exit 1 when "
    "an unsafe or idempotent call started twice without its idempotency key, a pure call "
    "ran twice, an unsafe call's unknown outcome did not surface as an error or an "
    "interrupt, or a trial could not be verified because the crashed or resumed run went "
    "another way than the learning run (it never says ok over such a trial)."
)
"""What `replay-guard crashtest --help` says of the command."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `crashtest` sub-command's arguments."""
    parser.add_argument(
        "target",
        metavar="FILE_OR_MODULE:FUNCTION",
        help="a function taking checkpointer= and store= that returns the compiled, guarded "
        "graph (deterministic: a scripted model)",
    )
    parser.add_argument(
        "--input",
        type=_json_input,
        default=None,
        metavar="JSON",
        help='the graph\'s input (default: {"messages": [{"role": "user", "content": "Go."}]})',
    )
    parser.add_argument(
        "--allow-rerun",
        action="append",
        default=[],
        metavar="TOOL",
        help="a pure tool you checked has no side effect: its re-run after a crash passes "
        "(repeatable)",
    )
    parser.add_argument(
        "--compare-unguarded",
        action="store_true",
        help="also run the input on FUNCTION(..., guarded=False) and fail when its tool calls "
        "or final answer differ from the guarded run's",
    )
    parser.add_argument(
        "--answer",
        metavar="FILE_OR_MODULE:FUNCTION",
        default=None,
        help="a function answering the graph's interrupts (gets the interrupt's value, returns "
        "the resume value, or None to leave it pending), for graphs that pause for a person",
    )
    parser.add_argument(
        "--point",
        action="append",
        choices=list(POINTS),
        default=None,
        help="crash only at this point (repeatable; default: every point)",
    )
    parser.add_argument(
        "--postgres",
        metavar="URI",
        default=None,
        help="run on PostgresSaver and PostgresStore (a schema per trial) instead of SQLite",
    )
    parser.add_argument(
        "--async",
        dest="asynchronous",
        action="store_true",
        help="run every phase with ainvoke (the async path) instead of invoke",
    )
    parser.add_argument(
        "--crashes",
        type=int,
        default=1,
        help="processes killed at each trial's point before the last resume (2: the first "
        "resume dies there too; default: 1)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="trials run at once (default: 2)")
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds per process (default: 120)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Crash-test the graph and print the report.

    Returns:
        0 when every trial was verified and none failed, 1 otherwise, 2 when the test
        cannot run.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        report = crashtest(
            args.target,
            args.input,
            allow_rerun=args.allow_rerun,
            jobs=args.jobs,
            timeout=args.timeout,
            compare_unguarded=args.compare_unguarded,
            points=args.point,
            answer=args.answer,
            postgres=args.postgres,
            asynchronous=args.asynchronous,
            crashes=args.crashes,
        )
    except CrashTestError as exc:
        print(f"replay-guard crashtest: error: {exc}", file=err)
        return 2
    if args.json:
        print(json.dumps(report.to_json(), indent=2, default=str), file=out)
    else:
        print(report.render(), file=out)
    return report.exit_status
