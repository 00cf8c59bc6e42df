"""The same-failure layer's signature: a failure text with its volatile parts removed, hashed."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import xxhash

__all__ = [
    "DEFAULT_MAX_SAME_FAILURES",
    "SAME_FAILURE",
    "failure_signature",
    "normalize_failure",
]

SAME_FAILURE = "same_failure"
"""Reason of a call stopped because its tool kept returning the same failure."""

DEFAULT_MAX_SAME_FAILURES = 4
"""Same failures of one tool in a row before the reminder (`GuardConfig.max_same_failures`)."""

# Only the start of a long error matters (a stack trace repeats its head), and hashing a
# bounded text keeps the cost of a failure flat.
_MAX_CHARS = 2_000
_MIN_ECHO_CHARS = 4  # shorter argument values are words, not echoes
_MAX_ECHOES = 32

# Applied in order, on lowercased text. Shell prefixes first: "bash: line 3: javac: command
# not found" and "javac: command not found" are the same failure.
_SHELL_PREFIX = re.compile(r"(?:^|(?<=\s))(?:/[\w/]*/)?(?:ba|da|z|k|c|tc|fi)?sh: (?:line \d+: )?")
_QUOTED = re.compile(r"'[^'\n]{0,200}'|\"[^\"\n]{0,200}\"|`[^`\n]{0,200}`")
# A path starts where a word starts (the lookbehind) and its runs are possessive (`*+`): each
# character is scanned a bounded number of times. Without both, a 2,000-character word with no
# slash (a token, a base64 blob) was tried from each of its characters to its end, 35 ms a text.
_PATH = re.compile(r"(?<![\w.~-])(?:[a-z]:)?(?:[\w.~-]*+[/\\])++[\w.-]*+")
# A hexadecimal run of 6 or more; it is an id when it has a digit (`_id_or_word`). Checking the
# digit after the match keeps the pattern linear: as a lookahead it read a 2,000-character run
# of hyphenated words to its end from each of its words.
_HEX_ID = re.compile(r"\b0x[0-9a-f]+\b|\b[0-9a-f][0-9a-f-]{5,}\b")
_DIGIT = re.compile(r"[0-9]")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SPACE = re.compile(r"\s+")


def normalize_failure(text: str, args: Any = None) -> str:
    """The stable part of a failure text, what two failures must share to be "the same".

    Lowercased; the shell's own prefix (`bash: line 3: `), echoes of the call's string
    arguments, quoted text, paths, hex ids and numbers are removed, and whitespace is
    collapsed: a retry with other flags, another file or another line gets the same text.

    Args:
        text: The error text (an error ToolMessage's content, an exception's message).
        args: The call's arguments: their string values are removed where the error echoes
            them.

    Returns:
        The normalized text (may be empty).
    """
    text = text[:_MAX_CHARS]
    for echo in sorted(_echoes(args), key=len, reverse=True):
        text = text.replace(echo, " ")
    text = text.lower()
    text = _SHELL_PREFIX.sub("", text)
    text = _QUOTED.sub("<q>", text)
    text = _PATH.sub("<path>", text)
    text = _HEX_ID.sub(_id_or_word, text)  # an id and a number are both "some value"
    text = _NUMBER.sub("#", text)
    return _SPACE.sub(" ", text).strip()


def _id_or_word(match: re.Match[str]) -> str:
    """`#` for a hexadecimal run with a digit (an id), the run itself for one without (a word)."""
    found = match[0]
    return "#" if _DIGIT.search(found) else found


def failure_signature(text: str | None, args: Any = None) -> str:
    """A short hash identifying a failure whatever its volatile parts (see `normalize_failure`).

    Args:
        text: The error text; None (a failure with no text) has a signature too.
        args: The call's arguments.

    Returns:
        16 lowercase hex characters (xxh3_64 of the normalized text).
    """
    normalized = normalize_failure(text or "", args)
    return xxhash.xxh3_64_hexdigest(normalized.encode("utf-8", "surrogatepass"))


def _echoes(args: Any) -> Iterator[str]:
    """String argument values long enough to be recognized when an error repeats them."""
    found = 0
    stack = [args]
    while stack and found < _MAX_ECHOES:
        value = stack.pop()
        if isinstance(value, str):
            if len(value) >= _MIN_ECHO_CHARS:
                found += 1
                yield value
        elif isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
