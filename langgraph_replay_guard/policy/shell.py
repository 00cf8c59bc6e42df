"""The `shell` preset: split a POSIX shell command line into commands and classify each."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langgraph_replay_guard.decisions.call_class import CallClass

__all__ = [
    "MAX_SCRIPT_CHARS",
    "Command",
    "PartRule",
    "Script",
    "ShellPreset",
    "Unparsable",
    "parse_script",
]

MAX_SCRIPT_CHARS = 100_000
"""Longest command line analysed; a longer one is unrecognised (never `pure`)."""

_MAX_DEPTH = 8  # nesting of substitutions, `bash -c` and wrappers followed before giving up
# `$(...)` and `${...}` nested in the text itself: the lexer reads each level with a lexer of
# its own (a few Python frames each), so a deeper line is unparsable (the fallback class)
# instead of a RecursionError out of the guard's decision.
_MAX_NESTING = 32

_BLANK = " \t\r"
_BLANKS = re.compile(r"[ \t\r]+")
_OPERATOR_CHARS = ";&|()<>"
# Longest first, so that `&&` is not read as two `&`.
_OPERATORS = (
    ";;&",
    "&>>",
    "<<<",
    "<<-",
    "&&",
    "||",
    ";;",
    ";&",
    "|&",
    "&>",
    ">>",
    ">|",
    ">&",
    "<<",
    "<&",
    "<>",
    "<(",
    ">(",
    ";",
    "&",
    "|",
    "(",
    ")",
    "<",
    ">",
)
_OPERATOR = re.compile("|".join(re.escape(op) for op in _OPERATORS))
_SEPARATORS = frozenset({";", "&", "&&", "||", "|", "|&", "(", ")", "\n"})
_CASE_OPERATORS = frozenset({";;", ";&", ";;&"})
_OUTPUT_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
_INPUT_REDIRECTS = frozenset({"<", "<<", "<<-", "<<<", "<&"})
_HEREDOCS = frozenset({"<<", "<<-"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN = re.compile(r"[^\s;&|()<>\\'\"$`]+")  # word characters with no special meaning
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
_VERSIONED = re.compile(r"(python|pip|pytest)\d+(\.\d+)*")
# A read of these gives another answer each time with nothing written: the shell's own
# changing variables (`echo $RANDOM`, `$$`), the kernel's random devices and its live
# /proc and /sys files. Such a line is volatile (still counted, never answered from memory).
_VOLATILE_SOURCES = re.compile(
    r"\$\{?(?:RANDOM|SRANDOM|BASHPID|SECONDS|EPOCHSECONDS|EPOCHREALTIME)\b|\$\$"
    r"|/dev/u?random\b|(?<![\w.])/(?:proc|sys)(?![\w.-])"
)
# Reserved words of compound commands: what follows them (if anything) is a command.
_RESERVED_WORDS = frozenset(
    {"!", "{", "}", "if", "then", "elif", "else", "fi", "do", "done", "while", "until"}
)
_UNSUPPORTED_WORDS = frozenset({"case", "select", "function", "coproc"})


class Unparsable(ValueError):
    """The command line cannot be analysed (an unterminated quote, a missing heredoc end...)."""


@dataclass
class Command:
    """One simple command of a command line.

    Attributes:
        words: The words, unquoted.
        dynamic: For each word, whether it holds an expansion (`$x`, `$(...)`, backticks)
            whose value is only known when the shell runs.
        writes: Whether an output redirection sends something into a file.
    """

    words: list[str] = field(default_factory=list)
    dynamic: list[bool] = field(default_factory=list)
    writes: bool = False


@dataclass
class Script:
    """A parsed command line: its simple commands and the scripts it runs inside them.

    Attributes:
        commands: The simple commands.
        substitutions: Inner scripts of command and process substitutions (`$(...)`,
            backticks, `<(...)`): they run too.
        unsupported: Set when the line uses a construct the parser does not analyse
            (`case`, an expanding heredoc with substitutions).
        background: Set when a command is sent to the background (`cmd &`, not `&&`).
    """

    commands: list[Command] = field(default_factory=list)
    substitutions: list[str] = field(default_factory=list)
    unsupported: bool = False
    background: bool = False


# --- lexer -----------------------------------------------------------------------------------


class _Lexer:
    """Splits shell text into words and operators, the way the shell reads it.

    `shlex` is not enough here: it merges newline-separated commands, cannot tell an
    operator from a quoted `">"`, and does not know heredocs or substitutions.
    """

    def __init__(
        self, text: str, start: int = 0, *, until_paren: bool = False, nesting: int = 0
    ) -> None:
        if nesting > _MAX_NESTING:
            msg = f"substitutions nested more than {_MAX_NESTING} deep"
            raise Unparsable(msg)
        self.nesting = nesting
        self.s = text
        self.i = start
        self.until_paren = until_paren
        self.tokens: list[tuple[str, str, bool]] = []  # (kind "w"/"o", text, dynamic)
        self.substitutions: list[str] = []
        self.unsupported = False
        self._heredocs: list[tuple[str, bool, bool]] = []  # (delimiter, strip tabs, quoted)

    def run(self) -> int:
        """Tokenize from `start`; return the index where scanning stopped."""
        s, n = self.s, len(self.s)
        depth = 0
        while self.i < n:
            c = s[self.i]
            if c in _BLANK:
                self.i = _BLANKS.match(s, self.i).end()  # type: ignore[union-attr]
            elif c == "\\" and s.startswith("\\\n", self.i):
                self.i += 2  # line continuation between words
            elif c == "\n":
                self.tokens.append(("o", "\n", False))
                self.i += 1
                self._read_heredocs()
            elif c == "#":
                end = s.find("\n", self.i)
                self.i = n if end < 0 else end
            elif c in _OPERATOR_CHARS or (c.isdigit() and self._fd_redirect()):
                if c.isdigit():
                    while s[self.i].isdigit():
                        self.i += 1
                op = _OPERATOR.match(s, self.i).group()  # type: ignore[union-attr]
                if self.until_paren and op == ")" and depth == 0:
                    return self.i
                depth += (op == "(") - (op == ")")
                self._operator(op)
            else:
                self.tokens.append(("w", *self._word()))
        if self.until_paren:
            msg = "unterminated '$(' or '(': no closing ')'"
            raise Unparsable(msg)
        if self._heredocs:
            msg = f"heredoc '{self._heredocs[0][0]}' has no body"
            raise Unparsable(msg)
        return self.i

    def _fd_redirect(self) -> bool:
        j = self.i
        while j < len(self.s) and self.s[j].isdigit():
            j += 1
        return j < len(self.s) and self.s[j] in "<>"

    def _operator(self, op: str) -> None:
        self.i += len(op)
        if op in ("<(", ">("):
            # Process substitution: the inner script runs; the word is a /dev/fd path.
            self.substitutions.append(self._inner_parens())
            self.tokens.append(("w", op + "...)", True))
            return
        self.tokens.append(("o", op, False))
        if op in _HEREDOCS:
            while self.i < len(self.s) and self.s[self.i] in _BLANK:
                self.i += 1
            start = self.i
            delimiter, _ = self._word()
            raw = self.s[start : self.i]
            if not delimiter:
                msg = "heredoc without a delimiter"
                raise Unparsable(msg)
            quoted = any(q in raw for q in "'\"\\")
            self._heredocs.append((delimiter, op == "<<-", quoted))
            self.tokens.append(("w", delimiter, False))

    def _read_heredocs(self) -> None:
        """Skip the bodies of the heredocs opened on the line that just ended."""
        s = self.s
        for delimiter, strip_tabs, quoted in self._heredocs:
            while True:
                if self.i >= len(s):
                    msg = f"heredoc '{delimiter}' is not terminated"
                    raise Unparsable(msg)
                end = s.find("\n", self.i)
                line = s[self.i : len(s) if end < 0 else end]
                self.i = len(s) if end < 0 else end + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
                if not quoted and ("$(" in line or "`" in line):
                    self.unsupported = True  # an expanding body runs commands
        self._heredocs = []

    def _word(self) -> tuple[str, bool]:
        s, n = self.s, len(self.s)
        out: list[str] = []
        dynamic = False
        while self.i < n:
            plain = _PLAIN.match(s, self.i)
            if plain is not None:  # a run of ordinary characters in one step
                out.append(plain.group())
                self.i = plain.end()
                continue
            c = s[self.i]
            if c in _BLANK or c == "\n" or c in _OPERATOR_CHARS:
                break
            if c == "\\":
                if s.startswith("\\\n", self.i):
                    self.i += 2
                    continue
                out.append(s[self.i + 1 : self.i + 2])
                self.i += 2
            elif c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    msg = "unterminated single quote"
                    raise Unparsable(msg)
                out.append(s[self.i + 1 : end])
                self.i = end + 1
            elif c == '"':
                self.i += 1
                dynamic |= self._double_quoted(out)
            else:
                dynamic |= self._expansion_or_char(c, out)
        return "".join(out), dynamic

    def _expansion_or_char(self, c: str, out: list[str]) -> bool:
        """Read `$...`, a backtick substitution or one plain character; return dynamic."""
        if c == "$":
            return self._dollar(out)
        if c == "`":
            self._backticks()
            out.append("`...`")
            return True
        out.append(c)
        self.i += 1
        return False

    def _double_quoted(self, out: list[str]) -> bool:
        s, n = self.s, len(self.s)
        dynamic = False
        while self.i < n:
            c = s[self.i]
            if c == '"':
                self.i += 1
                return dynamic
            if c == "\\" and s[self.i + 1 : self.i + 2] in ('"', "\\", "$", "`", "\n"):
                if s[self.i + 1] != "\n":
                    out.append(s[self.i + 1])
                self.i += 2
            else:
                dynamic |= self._expansion_or_char(c, out)
        msg = "unterminated double quote"
        raise Unparsable(msg)

    def _dollar(self, out: list[str]) -> bool:
        """Read an expansion at `$`; return whether it is dynamic."""
        s = self.s
        nxt = s[self.i + 1 : self.i + 2]
        if s.startswith("$((", self.i):
            self.i += 3
            self._inner_parens(keep=True)  # arithmetic runs no command, but may hold `$(...)`
            if not s.startswith(")", self.i):
                msg = "unterminated '$((' arithmetic"
                raise Unparsable(msg)
            self.i += 1
        elif nxt == "(":
            self.i += 2
            self.substitutions.append(self._inner_parens())
        elif nxt == "{":
            end = self._closing_brace(self.i + 2)
            inner = _Lexer(s[self.i + 2 : end], nesting=self.nesting + 1)
            inner.run()
            self.substitutions.extend(inner.substitutions)
            self.unsupported |= inner.unsupported
            self.i = end + 1
        elif nxt == "'":
            end = self.i + 2
            while end < len(s) and s[end] != "'":
                end += 2 if s[end] == "\\" else 1
            if end >= len(s):
                msg = "unterminated $'...' quote"
                raise Unparsable(msg)
            out.append(s[self.i + 2 : end])
            self.i = end + 1
            return False
        elif nxt and (_NAME.match(nxt) or nxt in "0123456789?$!#@*-"):
            match = _NAME.match(s, self.i + 1)
            self.i = match.end() if match else self.i + 2
        else:
            out.append("$")
            self.i += 1
            return False
        out.append("$...")
        return True

    def _inner_parens(self, *, keep: bool = False) -> str:
        """Scan a `(...)` body that starts at `self.i`; return it and move past the `)`.

        With `keep`, the substitutions found inside are added to this lexer's (for a body
        that is not itself classified as a script).
        """
        inner = _Lexer(self.s, self.i, until_paren=True, nesting=self.nesting + 1)
        end = inner.run()
        if keep:
            self.substitutions.extend(inner.substitutions)
            self.unsupported |= inner.unsupported
        text = self.s[self.i : end]
        self.i = end + 1
        return text

    def _closing_brace(self, start: int) -> int:
        depth, j, s = 1, start, self.s
        while j < len(s):
            c = s[j]
            if c == "\\":
                j += 2
                continue
            if c == "'":
                j = s.find("'", j + 1)
                if j < 0:
                    break
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    return j
            j += 1
        msg = "unterminated '${'"
        raise Unparsable(msg)

    def _backticks(self) -> None:
        s, j = self.s, self.i + 1
        chars: list[str] = []
        while j < len(s) and s[j] != "`":
            if s[j] == "\\" and j + 1 < len(s):
                chars.append(s[j + 1] if s[j + 1] in "`\\$" else s[j : j + 2])
                j += 2
            else:
                chars.append(s[j])
                j += 1
        if j >= len(s):
            msg = "unterminated backtick"
            raise Unparsable(msg)
        self.substitutions.append("".join(chars))
        self.i = j + 1


# --- parser ----------------------------------------------------------------------------------


def parse_script(text: str, null_targets: Iterable[str] = ("/dev/null",)) -> Script:
    """Parse a command line into simple commands.

    Args:
        text: The command line (several lines, heredocs and all).
        null_targets: Redirection targets that are not files (`/dev/null`).

    Returns:
        The parsed script.

    Raises:
        Unparsable: If the text is not a well-formed command line, or too long.
    """
    if len(text) > MAX_SCRIPT_CHARS:
        msg = f"longer than {MAX_SCRIPT_CHARS:,} characters"
        raise Unparsable(msg)
    lexer = _Lexer(text)
    lexer.run()
    nulls = frozenset(null_targets)
    script = Script(substitutions=lexer.substitutions, unsupported=lexer.unsupported)
    current = Command()
    tokens = lexer.tokens
    index = 0
    while index < len(tokens):
        kind, value, dynamic = tokens[index]
        index += 1
        if kind == "w":
            current.words.append(value)
            current.dynamic.append(dynamic)
            continue
        if value in _SEPARATORS or value in _CASE_OPERATORS:
            script.unsupported |= value in _CASE_OPERATORS
            script.background |= value == "&"  # `cmd &` (`&&`, `&>`, `>&` are other tokens)
            if current.words or current.writes:
                script.commands.append(current)
            current = Command()
            continue
        if index >= len(tokens) or tokens[index][0] != "w":
            msg = f"redirection {value!r} without a target"
            raise Unparsable(msg)
        _, target, target_dynamic = tokens[index]
        index += 1
        if value in _INPUT_REDIRECTS:
            continue
        if value == ">&" and (target.isdigit() or target == "-"):
            continue  # duplicates a file descriptor (2>&1): writes no file
        if target_dynamic or target not in nulls:
            current.writes = True
    if current.words or current.writes:
        script.commands.append(current)
    return script


# --- classification --------------------------------------------------------------------------

_KINDS = ("read", "volatile", "rerun", "session", "write")
_KIND_RANK = {"read": 0, "volatile": 1, "rerun": 2, "session": 2, "write": 3, "command": -1}

PartRule = Callable[[Sequence[str]], CallClass | None]
"""A user rule for one command of a chain: its words in, a class or None out."""


@dataclass(frozen=True)
class _Spec:
    """A wrapper's or a global option set's shape: which options take a value."""

    with_value: frozenset[str] = frozenset()
    flags: frozenset[str] = frozenset()
    positional: int = 0


class ShellPreset:
    """The shell preset's tables (from `presets/shell.json`), ready for lookups.

    Args:
        data: The preset data.

    Raises:
        ValueError: If the data names an unknown kind.
    """

    def __init__(self, data: Mapping[str, Any]) -> None:
        """Index the tables."""
        self.arguments: tuple[str, ...] = tuple(data["arguments"])
        self.null_targets = frozenset(data["null_targets"])
        self.commands: dict[tuple[str, ...], str] = {}
        for kind, prefixes in data["commands"].items():
            _check_kind(kind, "commands")
            for prefix in prefixes:
                self.commands[tuple(prefix.split())] = kind
        self.longest = max(len(words) for words in self.commands)
        self.known_first_words = frozenset(words[0] for words in self.commands)
        self.options: dict[tuple[str, ...], dict[str, str]] = {}
        for prefix, options in data["options"].items():
            for kind in options.values():
                if kind != "command":
                    _check_kind(kind, f"options of {prefix!r}")
            self.options[tuple(prefix.split())] = dict(options)
        self.patterns: dict[tuple[str, ...], list[tuple[re.Pattern[str], str]]] = {}
        for prefix, patterns in data["argument_patterns"].items():
            for kind in patterns.values():
                _check_kind(kind, f"argument_patterns of {prefix!r}")
            self.patterns[tuple(prefix.split())] = [
                (re.compile(p), kind) for p, kind in patterns.items()
            ]
        self.positional: dict[tuple[str, ...], str] = {
            tuple(prefix.split()): kind for prefix, kind in data["positional_arguments"].items()
        }
        self.positional_exceptions: dict[tuple[str, ...], frozenset[str]] = {
            tuple(prefix.split()): frozenset(words)
            for prefix, words in data["positional_exceptions"].items()
        }
        self.wrappers: dict[tuple[str, ...], _Spec] = {
            tuple(name.split()): _spec(spec) for name, spec in data["wrappers"].items()
        }
        self.global_options = {name: _spec(spec) for name, spec in data["global_options"].items()}
        self.aliases: dict[str, tuple[str, ...]] = {
            name: tuple(target.split()) for name, target in data["aliases"].items()
        }
        self.shells = frozenset(data["shells"])

    # -- scripts ---------------------------------------------------------------------------

    def classify(
        self, text: str, *, fallback: CallClass, part_rule: PartRule | None = None
    ) -> CallClass:
        """Classify a command line: the least safe class of all its commands.

        Args:
            text: The command line.
            fallback: The class of writes and of anything not recognised.
            part_rule: User rules tried on each command before the preset's tables.

        Returns:
            The class. Never `pure` for a line that cannot be parsed or that holds an
            unknown command.
        """
        run = _Classification(self, fallback, part_rule)
        return run.script(text, 0)


class _Classification:
    """One classification: the preset, the fallback class and the user's part rules."""

    def __init__(
        self, preset: ShellPreset, fallback: CallClass, part_rule: PartRule | None
    ) -> None:
        self.p = preset
        self.fallback = fallback
        self.part_rule = part_rule
        self.classes = {
            "read": CallClass("pure"),
            "volatile": CallClass("pure", volatile=True),
            "rerun": CallClass("idempotent"),
            "session": CallClass("idempotent"),
            "write": fallback,
        }

    def script(self, text: str, depth: int) -> CallClass:
        if depth > _MAX_DEPTH:
            return self.fallback
        try:
            parsed = parse_script(text, self.p.null_targets)
        except Unparsable:
            return self.fallback
        if parsed.unsupported:
            return self.fallback
        result = self.classes["read"]
        background = parsed.background
        for inner in parsed.substitutions:
            found = self.script(inner, depth + 1)
            result, background = _worst(result, found), background or found.background
        for command in parsed.commands:
            part = self.fallback if command.writes else self.command(command, depth)
            result = _worst(result, part)
            background = background or part.background or _detaches(command.words)
        if result == self.classes["read"] and _VOLATILE_SOURCES.search(text):
            result = self.classes["volatile"]
        # A job that outlives the call may keep writing: the class says so, the engine
        # stops deduplicating reads after it (see `CallClass.background`).
        return replace(result, background=True) if background else result

    def command(self, command: Command, depth: int) -> CallClass:
        words, dynamic = list(command.words), list(command.dynamic)
        reserved = _leading(words, _RESERVED_WORDS.__contains__)
        del words[:reserved], dynamic[:reserved]
        if words and words[0] in _UNSUPPORTED_WORDS:
            return self.fallback
        if words and words[0] == "for":
            return self.classes["read"]  # a loop header: `for x in a b c`
        assignments = _leading(words, _ASSIGNMENT.match)
        if assignments and assignments == len(words):
            return self.classes["session"]  # `NAME=value` sets a shell variable
        del words[:assignments], dynamic[:assignments]
        return self.words(words, dynamic, depth)

    def words(self, words: list[str], dynamic: list[bool], depth: int) -> CallClass:
        if not words:
            return self.classes["read"]
        if depth > _MAX_DEPTH or dynamic[0]:
            return self.fallback  # `$CMD args`: which program runs is unknown
        if self.part_rule is not None:
            ruled = self.part_rule(words)
            if ruled is not None:
                return ruled
        words = self._normalize(words)
        wrapper = self._match(words, self.p.wrappers)
        if wrapper is not None:
            prefix, spec = wrapper
            rest = _skip_options(words[len(prefix) :], spec)
            rest = rest[_leading(rest, _ASSIGNMENT.match) :]
            return self.words(rest, [False] * len(rest), depth + 1)
        if words[0] in self.p.shells:
            return self._shell(words[1:], depth)
        if words[0] == "python":
            words = [words[0], *_skip_options(words[1:], self.p.global_options["python"], True)]
            if words[1:2] == ["-c"]:
                code = words[2] if len(words) > 2 else ""
                return self.classes["read"] if _python_reads_only(code) else self.fallback
        if words[0] == "git" and "git" in self.p.global_options:
            words = ["git", *_skip_options(words[1:], self.p.global_options["git"], True)]
        known = words[0] in self.p.known_first_words
        if known and len(words) == 2 and words[1] in ("--version", "--help"):
            return self.classes["read"]
        found = self._match(words, self.p.commands)
        if found is None:
            return self.fallback
        prefix, kind = found
        return self._overrides(prefix, kind, words[len(prefix) :], depth)

    def _overrides(
        self, prefix: tuple[str, ...], kind: str, args: list[str], depth: int
    ) -> CallClass:
        """Apply the prefix's option, argument and positional overrides to its base kind."""
        options = self.p.options.get(prefix, {})
        patterns = self.p.patterns.get(prefix, [])
        positional = self.p.positional.get(prefix)
        exceptions = self.p.positional_exceptions.get(prefix, frozenset())
        matched: list[CallClass] = []
        index = 0
        options_done = False
        while index < len(args):
            arg = args[index]
            index += 1
            if arg == "--" and not options_done:
                options_done = True
                continue
            for pattern, pattern_kind in patterns:
                if pattern.search(arg):
                    matched.append(self.classes[pattern_kind])
            if not options_done and arg.startswith("-") and arg != "-":
                option_kind = _option_kind(arg, options)
                if option_kind == "command":
                    end = index
                    while end < len(args) and args[end] not in (";", "+"):
                        end += 1
                    inner = args[index:end]
                    matched.append(self.words(inner, [False] * len(inner), depth + 1))
                    index = end + 1
                elif option_kind is not None:
                    matched.append(self.classes[option_kind])
            elif positional is not None and arg not in exceptions | self.p.null_targets:
                matched.append(self.classes[positional])
        if not matched:
            return self.classes[kind]
        worst = matched[0]
        for item in matched[1:]:
            worst = _worst(worst, item)
        return worst

    def _shell(self, args: list[str], depth: int) -> CallClass:
        """`bash -c SCRIPT` runs SCRIPT: classify it. A script file is unrecognised."""
        for index, arg in enumerate(args):
            if not arg.startswith("-") or arg.startswith("--"):
                break
            if "c" in arg[1:] and index + 1 < len(args):
                return self.script(args[index + 1], depth + 1)
        if args == ["--version"]:
            return self.classes["read"]
        return self.fallback

    def _normalize(self, words: list[str]) -> list[str]:
        head = words[0]
        if "/" in head and tuple(words[:1]) not in self.p.commands:
            directory, _, name = head.rpartition("/")
            if directory.rpartition("/")[2] in ("bin", ".bin"):
                head = name  # /usr/bin/cat, .venv/bin/pytest, node_modules/.bin/jest
        versioned = _VERSIONED.fullmatch(head)
        if versioned:
            head = versioned.group(1)
        return [*self.p.aliases.get(head, (head,)), *words[1:]]

    def _match(
        self, words: list[str], table: Mapping[tuple[str, ...], Any]
    ) -> tuple[tuple[str, ...], Any] | None:
        for size in range(min(len(words), self.p.longest), 0, -1):
            prefix = tuple(words[:size])
            if prefix in table:
                return prefix, table[prefix]
        return None


def _option_kind(arg: str, options: Mapping[str, str]) -> str | None:
    """The kind an option gives: exact, `--opt=value`, `-ivalue`, or in a cluster (`-ni`)."""
    if not options:
        return None
    if arg in options:
        return options[arg]
    if arg.startswith("--"):
        return options.get(arg.partition("=")[0])
    worst: str | None = None
    for option, kind in options.items():
        in_cluster = len(option) == 2 and option[1] in arg[1:]
        if in_cluster and (worst is None or _KIND_RANK[kind] > _KIND_RANK[worst]):
            worst = kind
    return worst


def _leading(words: Sequence[str], test: Callable[[str], object]) -> int:
    """How many words at the start pass `test`, for the caller to cut in one slice.

    A cut per word copied the list each time: quadratic on `{ { { ...` or `sudo A=1 A=1 ...`.
    """
    count = 0
    while count < len(words) and test(words[count]):
        count += 1
    return count


def _skip_options(words: list[str], spec: _Spec, stop_at_unknown: bool = False) -> list[str]:
    """Drop leading options (and their values) and `spec.positional` operands."""
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            index += 1
            break
        if not word.startswith("-") or word == "-":
            break
        known = word in spec.flags or word.partition("=")[0] in spec.with_value
        if stop_at_unknown and not known:
            break
        index += 2 if word in spec.with_value else 1
    return words[index + spec.positional :] if spec.positional else words[index:]


def _spec(data: Mapping[str, Any]) -> _Spec:
    return _Spec(
        with_value=frozenset(data.get("with_value", ())),
        flags=frozenset(data.get("flags", ())),
        positional=int(data.get("positional", 0)),
    )


def _check_kind(kind: str, where: str) -> None:
    if kind not in _KINDS:
        msg = f"shell preset: unknown kind {kind!r} in {where}; kinds are {', '.join(_KINDS)}."
        raise ValueError(msg)


def _worst(a: CallClass, b: CallClass) -> CallClass:
    return b if b.rank > a.rank else a


# Programs that start a job that outlives the command (or let one outlive the shell).
_DETACHING = frozenset({"nohup", "setsid", "disown"})
# Words that may come before such a program on a command line.
_BEFORE_DETACHING = frozenset({"sudo", "env", "nice", "ionice", "exec", "command", "time"})


def _detaches(words: Sequence[str]) -> bool:
    """Whether a simple command starts background work (`nohup cmd`, `sudo setsid cmd`)."""
    for word in words:
        if word in _DETACHING:
            return True
        if (
            word not in _BEFORE_DETACHING
            and not _ASSIGNMENT.match(word)
            and word not in (_RESERVED_WORDS)
            and not word.startswith("-")
        ):
            return False
    return False


# --- `python -c` ------------------------------------------------------------------------------

# Stdlib modules whose import has no effect beyond loading code.
_SAFE_MODULES = frozenset(sys.stdlib_module_names) - {
    "antigravity",
    "this",
    "turtle",
    "turtledemo",
    "tkinter",
    "idlelib",
    "webbrowser",
    "ensurepip",
    "venv",
}
_SAFE_CALLS = frozenset(
    {
        "print",
        "len",
        "repr",
        "str",
        "int",
        "float",
        "bool",
        "list",
        "tuple",
        "dict",
        "set",
        "sorted",
        "type",
        "dir",
        "vars",
        "hasattr",
        "isinstance",
        "sum",
        "min",
        "max",
        "abs",
        "round",
        "range",
        "enumerate",
        "zip",
        "format",
        "hex",
        "ord",
        "chr",
    }
)
_SAFE_METHODS = frozenset(
    {
        "python_version",
        "python_implementation",
        "platform",
        "system",
        "machine",
        "release",
        "version",
        "getcwd",
        "getenv",
        "get",
        "keys",
        "values",
        "items",
        "join",
        "split",
        "strip",
        "upper",
        "lower",
        "startswith",
        "endswith",
        "exists",
        "isfile",
        "isdir",
        "dumps",
        "find_spec",
        "getrecursionlimit",
        "cpu_count",
    }
)
# `platform`'s getters take no argument, and a call with one is another module's function of
# the same name: `os.system("rm -rf x")` runs a shell command.
_NO_ARGUMENT_METHODS = frozenset(
    {"python_version", "python_implementation", "platform", "system", "machine", "release"}
)
_SAFE_NODES = (
    ast.Module,
    ast.Expr,
    ast.Import,
    ast.ImportFrom,
    ast.alias,
    ast.Assign,
    ast.Name,
    ast.Load,
    ast.Store,
    ast.Constant,
    ast.Attribute,
    ast.Call,
    ast.keyword,
    ast.Subscript,
    ast.Slice,
    ast.Tuple,
    ast.List,
    ast.Dict,
    ast.Set,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.JoinedStr,
    ast.FormattedValue,
    ast.operator,
    ast.unaryop,
    ast.boolop,
    ast.cmpop,
    ast.expr_context,
)


_MAX_PYTHON_CHARS = 10_000
"""Longer `python -c` code is not read (not recognisably read-only): CPython parses some
expressions in time that grows with the square of their length (f-strings: 0.5 s at 60 KB),
and nests others deeper than its parser's stack."""


def _python_reads_only(code: str) -> bool:
    """Whether `python -c CODE` recognisably only reads: stdlib imports, prints, lookups."""
    if len(code) > _MAX_PYTHON_CHARS:
        return False
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        # `1+1+...` or `-----1` a few thousand long: too deep for the parser, not a read.
        return False
    for node in ast.walk(tree):
        if not isinstance(node, _SAFE_NODES):
            return False
        if isinstance(node, ast.Import):
            if any(alias.name.partition(".")[0] not in _SAFE_MODULES for alias in node.names):
                return False
        elif isinstance(node, ast.ImportFrom):
            if node.level or (node.module or "").partition(".")[0] not in _SAFE_MODULES:
                return False
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                if func.id not in _SAFE_CALLS:
                    return False
            elif not (isinstance(func, ast.Attribute) and func.attr in _SAFE_METHODS):
                return False
            no_argument = isinstance(func, ast.Attribute) and func.attr in _NO_ARGUMENT_METHODS
            if no_argument and (node.args or node.keywords):
                return False
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            return False  # dunder access is how sandbox escapes start
    return True
