"""Users' regular expressions, matched in linear time with RE2.

`GuardConfig.failure_pattern`, `ToolPolicy.failure_pattern` and `ClassRule.pattern` run on
text the guard does not choose: a tool's result, a model-chosen argument. Python's `re`
backtracks, so a pattern such as `(a+)+$` takes exponential time on a 33-character result,
and the agent hangs after the tool ran. RE2 (Google's engine, through the `google-re2`
binding) matches in time linear in the text, whatever the pattern; it has no backreferences
and no look-around, so a pattern that needs them is refused when the configuration is built,
with an error naming the option and the pattern.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["SafePattern", "compile_pattern"]

_SYNTAX_HINT = (
    "Patterns run on RE2 (linear time, whatever the text), which has no backreferences "
    "(\\1) and no look-around ((?=...), (?!...), (?<=...)); write \\z for Python's \\Z"
)


class SafePattern:
    """A compiled user pattern; `search` runs in time linear in the text.

    Args:
        pattern: The pattern as the user wrote it.
        regexp: The compiled RE2 expression.
    """

    __slots__ = ("_regexp", "pattern")

    def __init__(self, pattern: str, regexp: Any) -> None:
        """Hold a compiled expression."""
        self.pattern = pattern
        self._regexp = regexp

    def search(self, text: str) -> object | None:
        """A match anywhere in `text` (`re.search` semantics), or None.

        Args:
            text: The text (a lone surrogate is kept as its bytes; it matches nothing).

        Returns:
            The match object, or None.
        """
        match: object | None = self._regexp.search(text.encode("utf-8", "surrogatepass"))
        return match

    def __repr__(self) -> str:
        """The pattern, as `re.Pattern` shows it."""
        return f"SafePattern({self.pattern!r})"


def _re2() -> Any:
    try:
        import re2
    except ImportError as exc:  # a dependency: only a broken install lacks it
        msg = (
            "langgraph-replay-guard matches user patterns with RE2: "
            "pip install 'google-re2>=1.1' (a dependency of the package)."
        )
        raise ImportError(msg) from exc
    return re2


@functools.lru_cache(maxsize=256)
def compile_pattern(pattern: str, option: str, *, ignore_case: bool = False) -> SafePattern:
    """Compile a user pattern with RE2, or refuse it with an error naming the option.

    Args:
        pattern: The regular expression.
        option: The setting it comes from, for the error (`"failure_pattern"`).
        ignore_case: Match case-insensitively and let `^`/`$` match at each line
            (the failure patterns' semantics).

    Returns:
        The compiled pattern.

    Raises:
        ValueError: RE2 cannot run the pattern (a backreference, look-around, a syntax
            error, a pattern too large); the message names the option and the pattern.
    """
    re2 = _re2()
    source = f"(?im){pattern}" if ignore_case else pattern
    options = re2.Options()
    options.log_errors = False  # the error below says it; RE2 would also print it to stderr
    try:
        regexp = re2.compile(source.encode("utf-8"), options)
    except UnicodeEncodeError:
        reason = "it holds a lone surrogate"
    except re2.error as exc:
        raw = exc.args[0] if exc.args else "RE2 refused it"
        reason = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    else:
        return SafePattern(pattern, regexp)
    msg = (
        f"{option} {pattern[:200]!r} cannot be used: {reason}. {_SYNTAX_HINT}. Fix the "
        "pattern; in JSON, write a backslash as '\\\\'."
    )
    raise ValueError(msg)
