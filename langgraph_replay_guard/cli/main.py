"""Entry point of the `replay-guard` command."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from langgraph_replay_guard.cli import (
    crashtest_cmd,
    demo_cmd,
    eval_cmd,
    export_cmd,
    inspect_cmd,
    records_cmd,
)

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every sub-command."""
    parser = argparse.ArgumentParser(
        prog="replay-guard",
        description="Loop, duplicate and replay protection for LangGraph tool calls.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    crashtest_cmd.add_parser(sub)
    demo_cmd.add_parser(sub)
    eval_cmd.add_parser(sub)
    export_cmd.add_parser(sub)
    inspect_cmd.add_parser(sub)
    records_cmd.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: Arguments without the program name; `sys.argv[1:]` when None.

    Returns:
        The exit status.
    """
    os.environ.setdefault("LANGSMITH_TRACING", "false")
    try:
        args = build_parser().parse_args(argv)
        status: int = args.func(args)
        sys.stdout.flush()  # a reader that went away shows here, not at interpreter exit
    except BrokenPipeError:
        # `replay-guard ... | head`: the reader has what it wanted. As the Python docs
        # advise (signal module, "Note on SIGPIPE"), point stdout at devnull so the final
        # flush at exit cannot fail again, and exit quietly with 1.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
