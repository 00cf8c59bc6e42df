"""Options the sub-commands share, parsed one way everywhere."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TextIO

from langgraph_replay_guard.cli.terminal import inline, terminal_safe
from langgraph_replay_guard.replay.safe_decode import Undecoded

__all__ = [
    "DEFAULT_NAMESPACE",
    "EXIT_UNDECODED",
    "add_namespace_option",
    "parse_namespace",
    "report_undecoded",
]

EXIT_UNDECODED = 3
"""Exit status of a reading command that finished but left values undecoded (shown opaque)."""

DEFAULT_NAMESPACE = "replay_guard"
"""The guard's default namespace (`ReplayGuard(namespace=("replay_guard",))`), as written."""

_EXAMPLE = "--namespace replay_guard/acme"


def parse_namespace(text: str) -> tuple[str, ...]:
    """Parse a `--namespace` value: the guard's namespace parts separated by '/'.

    `replay_guard/acme` is the namespace `("replay_guard", "acme")`. Leading, trailing
    and doubled slashes are ignored. Used as an argparse `type`, so a bad value is a usage
    error naming the option.

    Args:
        text: The option's value.

    Returns:
        The namespace parts.

    Raises:
        argparse.ArgumentTypeError: The value holds a ',' (the parts are separated by '/')
            or has no part.
    """
    if "," in text:
        parts = "/".join(part.strip() for part in text.split(",") if part.strip())
        right = f"--namespace {parts}" if parts else _EXAMPLE
        msg = f"{text!r} holds a ','; separate the namespace's parts with '/', as in {right}"
        raise argparse.ArgumentTypeError(msg)
    namespace = tuple(part for part in text.split("/") if part)
    if not namespace:
        msg = f"{text!r} has no part; give the guard's namespace, as in {_EXAMPLE}"
        raise argparse.ArgumentTypeError(msg)
    return namespace


def add_namespace_option(parser: argparse.ArgumentParser, what: str) -> None:
    """Add `--namespace` (parsed by `parse_namespace`) to a sub-command.

    Args:
        parser: The sub-command's parser.
        what: What the namespace holds for this command, for the help text.
    """
    parser.add_argument(
        "--namespace",
        type=parse_namespace,
        default=(DEFAULT_NAMESPACE,),
        metavar="PARTS",
        help=(
            f"the guard's namespace ({what}), its parts separated by '/', "
            f"e.g. replay_guard/acme for ReplayGuard(namespace=('replay_guard', 'acme')) "
            f"(default: {DEFAULT_NAMESPACE})"
        ),
    )


def report_undecoded(found: Sequence[Undecoded], name: str, err: TextIO) -> bool:
    """Say on `err` which values a command read but did not decode (one line each, deduplicated).

    Args:
        found: What `collect_undecoded` collected while the command read the databases.
        name: The command's name, for the lines' prefix.
        err: Where to write.

    Returns:
        Whether anything was left undecoded (the command then exits with `EXIT_UNDECODED`).
    """
    seen: dict[str, int] = {}
    for value in found:
        seen[str(value)] = seen.get(str(value), 0) + 1
    # The names are the database's text: escaped, and kept on their line (`export` writes
    # its other lines itself, with `repr`, so its standard error is not wrapped as a whole).
    safe = terminal_safe(err)
    for shown, count in seen.items():
        times = f" ({count} times)" if count > 1 else ""
        print(f"{name}: not decoded, shown opaque: {inline(shown)}{times}", file=safe)
    if seen:
        print(
            f"{name}: {len(found)} value(s) named types off the allow-list (or a format that "
            f"could run code): nothing was imported or run; exit status {EXIT_UNDECODED}",
            file=err,
        )
    return bool(seen)
