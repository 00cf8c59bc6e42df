"""Options the sub-commands share, parsed one way everywhere."""

from __future__ import annotations

import argparse

__all__ = ["DEFAULT_NAMESPACE", "add_namespace_option", "parse_namespace"]

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
