"""Text for a terminal: control characters a database holds are shown escaped, never obeyed."""

from __future__ import annotations

import io
import re
from typing import TextIO, cast

__all__ = ["inline", "json_safe", "terminal_safe"]

# C0 controls but tab and newline (ESC starts a terminal escape sequence, CR overwrites a
# line), DEL and C1 controls (0x9b is a one-byte CSI), and the bidi controls that reorder
# what is shown (U+202E shows "exe.txt" for "txt.exe").
# U+2028/2029 (line and paragraph separators) end a line in many viewers and editors.
_CONTROL = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)

# What ends a line for a terminal, a pager or `str.splitlines`: a value printed inside a line
# holding one would start a line of its own (a fake "ok" or "resolved" line).
_LINE_BREAK = re.compile(r"[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
_LINE_BREAK_SHOWN = {"\n": "\\n", "\r": "\\r"}

# What `json.dumps(..., ensure_ascii=False)` leaves as it is and a terminal or a viewer
# obeys: DEL and C1 controls (0x9b is a one-byte CSI, 0x85 a line break), the bidi controls
# and marks, the line and paragraph separators, zero-width characters and the BOM.
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _line_break(match: re.Match[str]) -> str:
    return _LINE_BREAK_SHOWN.get(match.group()) or _escaped(match)


def inline(value: object) -> str:
    r"""`str(value)` for printing inside a line: its line breaks escaped (`\n` as `\\n`).

    The stream of `terminal_safe` lets newlines through (the output's own lines); a value a
    database holds (a tool name, an error text, a record's field) is printed through this
    first, so that it cannot add a line of its own.

    Args:
        value: The value.

    Returns:
        Its text on one line.
    """
    return _LINE_BREAK.sub(_line_break, str(value))


def json_safe(text: str) -> str:
    r"""JSON text with the characters a terminal or a viewer obeys written as `\uXXXX`.

    `json.dumps(..., ensure_ascii=False)` escapes C0 controls only; these characters can
    appear only inside JSON strings, where the escape is the same string.

    Args:
        text: JSON text.

    Returns:
        The same JSON, safe to print.
    """
    return _JSON_UNSAFE.sub(_escaped, text)


class _TerminalSafe(io.TextIOBase):
    def __init__(self, out: TextIO) -> None:
        self._out = out

    def write(self, text: str) -> int:
        self._out.write(_CONTROL.sub(_escaped, text))
        return len(text)

    def flush(self) -> None:
        self._out.flush()


def terminal_safe(out: TextIO) -> TextIO:
    r"""A stream that writes to `out` with control characters escaped (ESC as `\u001b`).

    A database someone else wrote can hold a tool name or an error text with terminal escape
    sequences (clear the screen, set the window title, rewrite the line above); printed as
    they are, the operator's terminal obeys them. Tabs and newlines pass.

    Args:
        out: The stream (stdout).

    Returns:
        The escaping stream.
    """
    return cast("TextIO", _TerminalSafe(out))
