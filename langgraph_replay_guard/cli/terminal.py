"""Text for a terminal: control characters a database holds are shown escaped, never obeyed."""

from __future__ import annotations

import io
import re
from typing import TextIO, cast

__all__ = ["terminal_safe"]

# C0 controls but tab and newline (ESC starts a terminal escape sequence, CR overwrites a
# line), DEL and C1 controls (0x9b is a one-byte CSI), and the bidi controls that reorder
# what is shown (U+202E shows "exe.txt" for "txt.exe").
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


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
