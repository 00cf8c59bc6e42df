"""Guard configuration: `GuardConfig` and per-tool `ToolPolicy`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["GuardConfig", "ReplayClass", "ToolPolicy"]

ReplayClass = Literal["pure", "idempotent", "unsafe"]
"""How a tool may be repeated.

- `"pure"`: read-only or deterministic; identical calls can be deduplicated.
- `"idempotent"`: has a side effect that is safe to repeat with the same idempotency key.
- `"unsafe"`: has a side effect that must never run twice by accident.
"""


class ToolPolicy(BaseModel):
    """How the guard treats one tool.

    Attributes:
        replay: The tool's replay class. Tools without a policy use
            `GuardConfig.default_policy`, which is `"pure"` (conservative dedup).
        max_repeats: Overrides `GuardConfig.max_repeats` for this tool.
        ignore_args: Argument names (or dotted paths into nested dicts) left out of the
            call key, for volatile fields such as request ids and timestamps.
        idempotency_key_arg: For `"idempotent"` tools, the argument that receives the
            stable idempotency key on replay.
        volatile: A read whose result changes on its own (a clock, a status poll): never
            deduplicated, still counted and result-diffed; a changed result counts as
            progress.
        short_circuit: Whether a call that returned the identical result twice in a row is
            answered from that result instead of running again. `None` (default) means yes
            for `"pure"` tools and no for tools with side effects, which are only counted
            and reminded: side effects are never silently suppressed unless you set `True`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    replay: ReplayClass = "pure"
    max_repeats: int | None = Field(default=None, ge=1)
    ignore_args: tuple[str, ...] = ()
    idempotency_key_arg: str | None = None
    volatile: bool = False
    short_circuit: bool | None = None

    @model_validator(mode="after")
    def _check_consistency(self) -> ToolPolicy:
        if self.volatile and self.replay != "pure":
            msg = (
                f"volatile=True describes a read whose result changes on its own, but replay is "
                f"{self.replay!r}. Use replay='pure' with volatile=True, or drop volatile."
            )
            raise ValueError(msg)
        if self.idempotency_key_arg is not None and self.replay != "idempotent":
            msg = (
                f"idempotency_key_arg={self.idempotency_key_arg!r} only applies to "
                f"replay='idempotent' tools, but replay is {self.replay!r}."
            )
            raise ValueError(msg)
        return self

    def short_circuits(self) -> bool:
        """Whether the result-diff layer may answer this tool's calls without running them.

        Returns:
            `short_circuit` when set, otherwise `True` only for `"pure"` tools.
        """
        if self.short_circuit is not None:
            return self.short_circuit
        return self.replay == "pure"


class GuardConfig(BaseModel):
    """Configuration of a `ReplayGuard`. Every default is the safe choice.

    Attributes:
        history_window: How many recent executed calls the dedup layer looks back over.
        max_repeats: Identical attempts allowed per turn; the next one aborts.
        result_preview_chars: Length of the earlier result shown to the model when a call
            is answered from it.
        max_cycle_period: Longest alternating pattern (A-B-A-B is period 2) detected.
        dedup: Enable the dedup layer.
        repeat_limit: Enable the repeat counter and its abort.
        result_diff: Enable the identical-result short-circuit.
        reminder: Enable the loop reminder in the next system prompt.
        cycle_detection: Enable cycle detection.
        repeat_reset: `"progress"`: a successful world-changing call resets the other calls'
            counts; `"turn"`: plain per-turn counting.
        on_abort: `"end"` stops the run gracefully, `"error"` raises `LoopAbortedError`,
            `"continue"` blocks only the offending call.
        scope: `"turn"` resets dedup, counters, epochs and reminders at each new user
            message; `"thread"` keeps them for the whole thread.
        on_unsafe: What happens when an `unsafe` call's outcome is unknown on replay:
            `"raise"` (`ReplayUnsafeError`) or `"interrupt"` (ask a human).
        tools: Per-tool policies by tool name. A plain string is shorthand for the replay
            class (`{"send_email": "unsafe"}`).
        default_policy: Policy of tools not listed in `tools`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    history_window: int = Field(default=5, ge=1, le=10_000)
    max_repeats: int = Field(default=3, ge=1)
    result_preview_chars: int = Field(default=200, ge=0, le=100_000)
    max_cycle_period: int = Field(default=4, ge=2, le=32)
    dedup: bool = True
    repeat_limit: bool = True
    result_diff: bool = True
    reminder: bool = True
    cycle_detection: bool = True
    repeat_reset: Literal["progress", "turn"] = "progress"
    on_abort: Literal["end", "error", "continue"] = "end"
    scope: Literal["turn", "thread"] = "turn"
    on_unsafe: Literal["raise", "interrupt"] = "raise"
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)
    default_policy: ToolPolicy = Field(default_factory=ToolPolicy)

    @field_validator("tools", mode="before")
    @classmethod
    def _expand_shorthand(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                name: {"replay": policy} if isinstance(policy, str) else policy
                for name, policy in value.items()
            }
        return value

    def policy_for(self, tool: str) -> ToolPolicy:
        """Return the policy of a tool.

        Args:
            tool: Tool name.

        Returns:
            The tool's own policy, or `default_policy` when it has none.
        """
        return self.tools.get(tool, self.default_policy)

    @classmethod
    def from_json(cls, text: str | bytes) -> GuardConfig:
        """Load a configuration from JSON text.

        Args:
            text: JSON object with `GuardConfig` fields.

        Returns:
            The validated configuration.

        Raises:
            pydantic.ValidationError: If a field is unknown or has an invalid value.
        """
        return cls.model_validate_json(text)

    @classmethod
    def from_file(cls, path: str | Path) -> GuardConfig:
        """Load a configuration from a `.json`, `.yaml` or `.yml` file.

        Args:
            path: File to read.

        Returns:
            The validated configuration.

        Raises:
            FileNotFoundError: If the file does not exist.
            ImportError: For YAML files when PyYAML is not installed.
            pydantic.ValidationError: If a field is unknown or has an invalid value.
        """
        return cls.model_validate(_read_mapping(Path(path)))

    def with_policies(self, path: str | Path) -> GuardConfig:
        """Return a copy with the tool policies of a policy file merged in.

        A policy file holds `{"tools": {...}}` and optionally `"default_policy"`, the
        format of `tau-tools.json`. Its entries override this configuration's.

        Args:
            path: A `.json`, `.yaml` or `.yml` policy file.

        Returns:
            A new configuration.

        Raises:
            ValueError: If the file holds anything but `tools` and `default_policy`.
        """
        data = _read_mapping(Path(path))
        unknown = set(data) - {"tools", "default_policy"}
        if unknown:
            msg = (
                f"Policy file {path} has unknown keys {sorted(unknown)}; a policy file holds "
                "only 'tools' and 'default_policy'. Put other settings in the config file."
            )
            raise ValueError(msg)
        merged = self.model_dump(mode="json")
        merged["tools"] = {**merged["tools"], **data.get("tools", {})}
        if "default_policy" in data:
            merged["default_policy"] = data["default_policy"]
        return GuardConfig.model_validate(merged)


def _read_mapping(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in {".yaml", ".yml"}:
        try:
            import yaml
        except ImportError as exc:
            msg = "Reading YAML needs PyYAML: pip install 'langgraph-replay-guard[yaml]'."
            raise ImportError(msg) from exc
        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        msg = f"{path} must hold a JSON/YAML object, not {type(data).__name__}."
        raise ValueError(msg)
    return data
