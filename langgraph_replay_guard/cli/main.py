"""Entry point of the `replay-guard` command."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS: dict[str, str] = {
    "crashtest": "kill a guarded graph at every tool-call boundary and resume it",
    "demo": "run a looping agent without and with the guard (offline, no API key)",
    "eval": "replay recorded trajectories through the guard and report what it would block",
    "export": "write a database's threads (or a LangSmith export) as trajectories for `eval`",
    "inspect": "show a thread's guard state and replay ledger from a database",
    "records": "list, show, replay, verify and invalidate execution records",
}
"""Each sub-command and its one-line help; its module is `cli/<name>_cmd.py`.

`replay-guard --help` lists them from here without importing any of them (they import
LangChain and LangGraph). Each module holds its `DESCRIPTION`, `add_arguments(parser)` and
`run(args)`.
"""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the argument parser.

    Args:
        command: Build only this sub-command in full (importing its module); the others are
            listed with their help. None builds every sub-command in full.

    Returns:
        The parser.
    """
    parser = argparse.ArgumentParser(
        prog="replay-guard",
        description="Loop, duplicate and replay protection for LangGraph tool calls.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        if command is None or name == command:
            module = importlib.import_module(f"langgraph_replay_guard.cli.{name}_cmd")
            own = sub.add_parser(name, help=help_text, description=module.DESCRIPTION)
            module.add_arguments(own)
            own.set_defaults(func=module.run)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def _command(argv: Sequence[str]) -> str:
    """The sub-command named on the command line ("" when none is, as for `--help`)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: Arguments without the program name; `sys.argv[1:]` when None.

    Returns:
        The exit status.
    """
    os.environ.setdefault("LANGSMITH_TRACING", "false")
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        args = build_parser(_command(words)).parse_args(words)
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
