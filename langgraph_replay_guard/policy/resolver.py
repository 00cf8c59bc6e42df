"""The policy resolver: which policy, and so which class, a call of each tool gets."""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from langgraph_replay_guard.policy.patterns import SafePattern, compile_pattern

if TYPE_CHECKING:
    from langgraph_replay_guard.policy.config import GuardConfig, PolicySource, ToolPolicy

__all__ = ["PolicyResolver", "ToolRules", "compile_failure_pattern", "resolver_of"]

_MAX_RULES = 1024
"""Tools whose rules one resolver keeps: a model inventing names must not grow it without end."""

# One lock for every resolver's learning: learning something new is rare (a tool set seen for
# the first time), and a resolver without a lock of its own can be copied like its config.
_LEARNING = threading.Lock()


class ToolRules(NamedTuple):
    """What a tool's policy says about every call of it (`call_facts` reads it per call).

    A named tuple: read on every call, its fields are plain attribute reads.
    """

    policy: ToolPolicy
    replay: str
    volatile: bool
    short_circuit: bool
    max_repeats: int
    ignore_args: tuple[str, ...]
    max_same_failures: int
    failure_pattern: SafePattern | None
    source: PolicySource


class PolicyResolver:
    """Answers which policy a tool has, and where it comes from, for one guard.

    The order, first match wins: the user's own entry (`GuardConfig.tools`), a toolkit's
    (`GuardConfig.toolkits`), the policy a tool's MCP annotations give (learned, see
    `learn`), `GuardConfig.default_policy`. `rules` answers what every call of a tool
    needs (its class, dedup, volatility, limits, its failure pattern), kept per tool until
    the resolver learns something new.

    Each guard and callback handler owns one, so guards that share a configuration never
    share what they learned; the configuration itself is never changed nor copied.
    A `GuardConfig` has a resolver of its own (`GuardConfig.resolver`) that never learns:
    it answers for the configuration alone (`GuardConfig.policy_for`, `call_facts(config,
    ...)`).

    Args:
        config: The configuration (the user's, unchanged).
        learns: False for a configuration's own resolver: `learn` refuses, so that it
            answers as its configuration does, always.
    """

    __slots__ = (
        "_default",
        "_hints",
        "_learns",
        "_rules",
        "_toolkits",
        "_tools",
        "config",
        "version",
    )

    def __init__(self, config: GuardConfig, *, learns: bool = True) -> None:
        """Start with nothing learned."""
        self.config = config
        """The configuration (the user's object: never copied, never changed)."""
        self._learns = learns
        # The configuration's tables, read once (it is frozen): plain attribute reads after.
        self._tools: Mapping[str, ToolPolicy] = config.tools
        self._toolkits: Mapping[str, ToolPolicy] = config.toolkit_tools
        self._default: ToolPolicy = config.default_policy
        self._hints: dict[str, ToolPolicy] = {}
        self._rules: dict[str, ToolRules] = {}
        self.version = 0
        """Counts what was learned: an answer cached with another version is stale."""

    # -- learning -----------------------------------------------------------------------

    def learn(self, policies: Mapping[str, ToolPolicy]) -> bool:
        """Learn the policies tools' hints give (`tool_hints.hinted_tools`).

        A tool the configuration names (`tools`, a toolkit) keeps that policy: a learned
        one is read only for tools it names nowhere.

        Args:
            policies: Policies by tool name.

        Returns:
            True when something new was learned (the cached rules are then dropped).

        Raises:
            TypeError: On a configuration's own resolver, which never learns.
        """
        if not self._learns:
            msg = (
                "GuardConfig.resolver answers for the configuration alone and never learns: "
                "learn in the resolver of the guard (or callback handler) that saw the tools."
            )
            raise TypeError(msg)
        found = {
            name: policy for name, policy in policies.items() if self._hints.get(name) is not policy
        }
        if not found:
            return False
        with _LEARNING:
            # Hints before rules: a reader takes the rules first, so rules built from the
            # old hints can only land in the dropped table, never in the new one.
            self._hints = {**self._hints, **found}
            self._rules = {}
            self.version += 1
        return True

    @property
    def learned(self) -> Mapping[str, ToolPolicy]:
        """The policies learned so far, by tool name (read-only)."""
        return self._hints

    # -- answers --------------------------------------------------------------------------

    def policy_for(self, tool: str) -> ToolPolicy:
        """The policy of a tool: its own, else its toolkit's, else a learned one, else the default.

        Args:
            tool: Tool name.

        Returns:
            The policy.
        """
        policy = self._tools.get(tool)
        if policy is None and self._toolkits:
            policy = self._toolkits.get(tool)
        if policy is None and self._hints:
            policy = self._hints.get(tool)
        return self._default if policy is None else policy

    def policy_source(self, tool: str) -> PolicySource:
        """Where the policy `policy_for` returns for a tool comes from.

        Args:
            tool: Tool name.

        Returns:
            `"tools"`, `"toolkit"`, `"annotations"` (learned from MCP annotations) or
            `"default"`.
        """
        if tool in self._tools:
            return "tools"
        if tool in self._toolkits:
            return "toolkit"
        if tool in self._hints:
            return "annotations"
        return "default"

    def failure_regex_for(self, tool: str) -> SafePattern | None:
        """What makes a result of `tool` a failure: its own pattern and the configuration's.

        The tool's own is its policy's `failure_pattern`, else its preset's.

        Args:
            tool: Tool name.

        Returns:
            The compiled patterns, either matching (case-insensitive), or None.
        """
        policy = self.policy_for(tool)
        own = policy.failure_pattern or _preset_failure_pattern(policy.preset)
        patterns = [p for p in (own, self.config.failure_pattern) if p]
        if not patterns:
            return None
        if len(patterns) == 1:
            return compile_failure_pattern(patterns[0])
        return compile_failure_pattern("|".join(f"(?:{p})" for p in patterns))

    def same_failure_limit(self, tool: str) -> int:
        """The same-failure threshold of a tool (0: the layer is off for it).

        Args:
            tool: Tool name.

        Returns:
            The tool policy's `max_same_failures` when set, else the configuration's.
        """
        own = self.policy_for(tool).max_same_failures
        return self.config.max_same_failures if own is None else own

    def rules(self, tool: str) -> ToolRules:
        """What every call of a tool needs from its policy, kept until something is learned.

        Args:
            tool: Tool name.

        Returns:
            The tool's rules.
        """
        table = self._rules  # first: see `learn`
        rules = table.get(tool)
        if rules is None:
            policy = self.policy_for(tool)
            rules = ToolRules(
                policy=policy,
                replay=policy.replay,
                volatile=policy.volatile,
                short_circuit=policy.short_circuits(),
                max_repeats=policy.max_repeats or self.config.max_repeats,
                ignore_args=tuple(policy.key_ignore_args),
                max_same_failures=self.same_failure_limit(tool),
                failure_pattern=self.failure_regex_for(tool),
                source=self.policy_source(tool),
            )
            if len(table) < _MAX_RULES:
                table[tool] = rules
        return rules


def resolver_of(policies: GuardConfig | PolicyResolver) -> PolicyResolver:
    """The resolver to ask: a guard's own, or a configuration's (which never learns).

    Args:
        policies: A guard's resolver, or a configuration used on its own.

    Returns:
        The resolver.
    """
    return policies if isinstance(policies, PolicyResolver) else policies.resolver


def compile_failure_pattern(pattern: str) -> SafePattern:
    """A failure pattern, compiled: case-insensitive, `^` at each line start, RE2.

    Cached by pattern (`compile_pattern`), not on a configuration: multiline because a
    tool's output has many lines and `^` means "a line that starts with"; RE2 so that
    matching is linear in the result.

    Args:
        pattern: The pattern (already checked when the configuration was built).

    Returns:
        The compiled pattern.
    """
    return compile_pattern(pattern, "failure_pattern", ignore_case=True)


@functools.cache
def _preset_failure_pattern(preset: str | None) -> str | None:
    if preset is None:
        return None
    from langgraph_replay_guard.policy.classify import load_preset

    pattern = load_preset(preset).get("failure_pattern")
    return pattern if isinstance(pattern, str) else None
