"""Per-call classification: rules, a callable and presets give each call of a tool its class."""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from importlib import resources
from typing import TYPE_CHECKING, Any

from langgraph_replay_guard.decisions.call_class import CallClass
from langgraph_replay_guard.policy.patterns import SafePattern, compile_pattern

if TYPE_CHECKING:
    from langgraph_replay_guard.policy.config import ClassRule, ToolPolicy
    from langgraph_replay_guard.policy.shell import PartRule, ShellPreset

__all__ = ["Classifier", "load_preset"]

logger = logging.getLogger("langgraph_replay_guard")

# A value with any of these is not one simple command, so it never matches a prefix rule.
_SHELL_SYNTAX = re.compile(r"[;&|<>`\n]|\$\(")
_CACHE_SIZE = 1024  # command lines whose class is remembered, per tool
_CACHED_CHARS = 4096  # longer command lines are classified every time, not kept


@functools.cache
def load_preset(name: str) -> dict[str, Any]:
    """Load a preset's data file (`langgraph_replay_guard/policy/presets/<name>.json`).

    Args:
        name: `"shell"` or `"editor"`.

    Returns:
        The preset data (shared: do not modify it).
    """
    path = resources.files("langgraph_replay_guard.policy") / "presets" / f"{name}.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@functools.cache
def _shell() -> ShellPreset:
    from langgraph_replay_guard.policy.shell import ShellPreset

    return ShellPreset(load_preset("shell"))


class Classifier:
    """A tool policy's per-call classification, compiled.

    Order: the `classify` rules (first match wins), then the `classifier` callable, then
    the preset; a call none of them recognises gets the policy's own `replay` class,
    which is never `pure` for a classified tool.

    Args:
        policy: The tool's policy (with `classify`, `preset` or `classifier`).
    """

    def __init__(self, policy: ToolPolicy) -> None:
        """Compile the policy's rules and load its preset."""
        self.fallback = CallClass(policy.replay)
        self.rules: list[tuple[ClassRule, tuple[str, ...], SafePattern | None]] = [
            (
                rule,
                tuple(rule.arg.split(".")),
                compile_pattern(rule.pattern, "ClassRule.pattern") if rule.pattern else None,
            )
            for rule in policy.classify
        ]
        self.function = policy.classifier
        self.preset = policy.preset
        self.arguments: tuple[str, ...] = ()
        self.editor: dict[str, CallClass] = {}
        if policy.preset is not None:
            data = load_preset(policy.preset)
            self.arguments = (
                (policy.command_arg,) if policy.command_arg else tuple(data["arguments"])
            )
            if policy.preset == "editor":
                self.editor = self._editor_table(data)
        self._cache: dict[tuple[str, str], CallClass] = {}
        self._warned: set[str] = set()

    def __call__(self, tool: str, args: Any) -> tuple[CallClass, Any]:
        """Classify one call.

        Args:
            tool: Tool name.
            args: The call's arguments.

        Returns:
            The call's class, and the arguments its key is computed from (for the shell
            preset, the command without surrounding whitespace).
        """
        return self._classify(tool, args), self._key_args(args)

    # -- the three sources, in order ---------------------------------------------------------

    def _classify(self, tool: str, args: Any) -> CallClass:
        for rule, path, regex in self.rules:
            value = _lookup(args, path)
            if rule.missing:
                if value is None or (isinstance(value, str) and not value.strip()):
                    return rule.call_class
                continue
            if not isinstance(value, str):
                continue
            if regex is not None:
                if regex.search(value):
                    return rule.call_class
            elif not _SHELL_SYNTAX.search(value) and _starts_with(value.split(), rule.prefixes):
                return rule.call_class
        if self.function is not None:
            found = self._call_function(tool, args)
            if found is not None:
                return found
        if self.preset == "shell":
            return self._shell(args)
        if self.preset == "editor":
            sub = self._argument(args)[0]
            name = sub if isinstance(sub, str) else tool
            return self.editor.get(name, self.fallback)
        return self.fallback

    def _call_function(self, tool: str, args: Any) -> CallClass | None:
        assert self.function is not None
        try:
            found = self.function(args)
        except Exception as exc:
            if type(exc).__module__.startswith("langgraph."):
                raise  # LangGraph control flow (interrupts, bubble-ups) always propagates
            self._warn(
                f"the classifier of tool '{tool}' raised {type(exc).__name__}: {exc}; the "
                "call is treated as unrecognised (never deduplicated). Fix the classifier."
            )
            return self.fallback
        if found is None or isinstance(found, CallClass):
            return found
        self._warn(
            f"the classifier of tool '{tool}' returned {found!r}; it must return a "
            "CallClass or None. The call is treated as unrecognised."
        )
        return self.fallback

    def _warn(self, message: str) -> None:
        if message not in self._warned and len(self._warned) < 100:
            self._warned.add(message)
            logger.warning("langgraph-replay-guard: %s", message)

    # -- presets ---------------------------------------------------------------------------

    def _argument(self, args: Any) -> tuple[Any, str | None]:
        """The preset's argument: its value and name (a plain-string input has no name)."""
        if isinstance(args, str):
            return args, None
        if isinstance(args, Mapping):
            for name in self.arguments:
                value = args.get(name)
                if value is not None:
                    return value, name
        return None, None

    def _shell(self, args: Any) -> CallClass:
        value, name = self._argument(args)
        if isinstance(value, str):
            return self._command_line(value, name)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            worst = self._command_line(value[0], name)
            background = worst.background
            for item in value[1:]:
                found = self._command_line(item, name)
                worst = found if found.rank > worst.rank else worst
                background = background or found.background
            return replace(worst, background=True) if background else worst
        return self.fallback

    def _command_line(self, text: str, name: str | None) -> CallClass:
        cache_key = (name or "", text)
        found = self._cache.get(cache_key)
        if found is not None:
            return found
        part_rule = self._part_rule(name)
        found = _shell().classify(text, fallback=self.fallback, part_rule=part_rule)
        if len(text) <= _CACHED_CHARS:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[cache_key] = found
        return found

    def _part_rule(self, name: str | None) -> PartRule | None:
        """The prefix rules on the preset's argument, applied to each command of a chain."""
        rules = [
            rule for rule, path, regex in self.rules if rule.prefixes and path == (name or "",)
        ]
        if not rules:
            return None

        def part_rule(words: Sequence[str]) -> CallClass | None:
            for rule in rules:
                if _starts_with(words, rule.prefixes):
                    return rule.call_class
            return None

        return part_rule

    def _editor_table(self, data: Mapping[str, Any]) -> dict[str, CallClass]:
        classes = {
            "read": CallClass("pure"),
            "volatile": CallClass("pure", volatile=True),
            "write": self.fallback,
        }
        table: dict[str, CallClass] = {}
        for kind, names in data["commands"].items():
            if kind not in classes:
                msg = f"editor preset: unknown kind {kind!r}; kinds are {', '.join(classes)}."
                raise ValueError(msg)
            for name in names:
                table[name] = classes[kind]
        return table

    # -- keys ------------------------------------------------------------------------------

    def _key_args(self, args: Any) -> Any:
        """Arguments for the call key: a shell command without surrounding whitespace.

        Only surrounding whitespace goes: inside a command line, whitespace can be part of
        a quoted string or a heredoc, and a trailing backslash-escaped space is kept.
        """
        if self.preset != "shell":
            return args
        if isinstance(args, str):
            return _strip(args)
        value, name = self._argument(args)
        if name is None:
            return args
        stripped: Any
        if isinstance(value, str):
            stripped = _strip(value)
        elif isinstance(value, list):
            stripped = [_strip(v) if isinstance(v, str) else v for v in value]
        else:
            return args
        return args if stripped == value else {**args, name: stripped}


def _strip(text: str) -> str:
    stripped = text.strip()
    if stripped.endswith("\\") and len(stripped) < len(text.lstrip()):
        return text.lstrip()  # `echo a\ ` ends in an escaped space: keep it
    return stripped


def _lookup(args: Any, path: tuple[str, ...]) -> Any:
    value = args
    for part in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _starts_with(words: Sequence[str], prefixes: Sequence[str]) -> bool:
    for prefix in prefixes:
        wanted = prefix.split()
        if list(words[: len(wanted)]) == wanted:
            return True
    return False
