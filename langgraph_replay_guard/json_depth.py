"""JSON from files and stored rows, with a bound on nesting (a hostile file cannot recurse)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "JSONNestingError", "check_depth", "describe_error", "loads"]

MAX_JSON_DEPTH = 200
"""Deepest nesting of arrays and objects read from a file or a stored row.

Far beyond what a trajectory, a configuration, an envelope or a record holds (LangChain's
serialized messages are about ten levels deep), and far below what Python's recursion limit
lets the parser and the code after it walk.
"""


class JSONNestingError(ValueError):
    """JSON nested deeper than `MAX_JSON_DEPTH` (or than the parser can go)."""


def describe_error(exc: json.JSONDecodeError, *, line: bool = False) -> str:
    """A JSON error as one phrase: `Expecting value at column 5` (`at line 2 column 5`).

    Some of `json`'s messages end in "at" already ("Unterminated string starting at"):
    written as is, the position would read "starting at at column 5".

    Args:
        exc: The parser's error.
        line: Say the line too (a multi-line file; a JSON-lines line is one line).

    Returns:
        The message and where.
    """
    where = f"line {exc.lineno} column {exc.colno}" if line else f"column {exc.colno}"
    return f"{exc.msg.removesuffix(' at')} at {where}"


_TOO_DEEP = f"nested deeper than {MAX_JSON_DEPTH} levels"


def check_depth(value: Any, *, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse a decoded JSON value nested deeper than `limit`, without recursion.

    Args:
        value: The decoded value.
        limit: The deepest nesting allowed.

    Raises:
        JSONNestingError: It is nested deeper.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            msg = f"the JSON is {_TOO_DEEP}"
            raise JSONNestingError(msg)
        stack.extend((child, depth + 1) for child in children)


def loads(text: str | bytes | bytearray) -> Any:
    """`json.loads`, refusing nesting deeper than `MAX_JSON_DEPTH` with a `ValueError`.

    Args:
        text: The JSON text.

    Returns:
        The decoded value.

    Raises:
        JSONNestingError: It is nested too deeply (a `ValueError`).
        json.JSONDecodeError: It is not JSON (a `ValueError`).
    """
    try:
        value = json.loads(text)
    except RecursionError:
        msg = f"the JSON is {_TOO_DEEP}"
        raise JSONNestingError(msg) from None
    check_depth(value)
    return value
