"""Guard configuration: `GuardConfig` and per-tool `ToolPolicy`."""

from __future__ import annotations

import difflib
import functools
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Required, Self, TypedDict, Unpack

import annotated_types
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from langgraph_replay_guard.decisions.call_class import CallClass, ReplayClass
from langgraph_replay_guard.decisions.failures import DEFAULT_MAX_SAME_FAILURES
from langgraph_replay_guard.policy.patterns import SafePattern, compile_pattern
from langgraph_replay_guard.policy.resolver import PolicyResolver, compile_failure_pattern
from langgraph_replay_guard.policy.toolkit_data import (
    known_toolkits,
    load_toolkit,
    toolkit_policies,
)

if TYPE_CHECKING:
    from langgraph_replay_guard.policy.classify import Classifier

__all__ = [
    "CallClass",
    "ClassRule",
    "GuardConfig",
    "GuardOptions",
    "PolicySource",
    "PresetName",
    "ReplayClass",
    "ToolPolicy",
    "ToolkitRef",
    "did_you_mean",
    "keeps_previews",
    "toolkit_window",
]

PolicySource = Literal["tools", "toolkit", "annotations", "default"]
"""Where a tool's policy comes from, first match wins (`PolicyResolver.policy_source`).

- `"tools"`: the user's own entry in `GuardConfig.tools`.
- `"toolkit"`: a toolkit named in `GuardConfig.toolkits`.
- `"annotations"`: the tool's MCP annotations (`readOnlyHint`, `idempotentHint`...), which a
  guard learns from the tools it guards (see `tool_hints`).
- `"default"`: `GuardConfig.default_policy`.
"""

PresetName = Literal["shell", "editor"]
"""Built-in per-call classifications (see `langgraph_replay_guard/policy/presets/` and the README).

- `"shell"`: POSIX shell commands in a `command` argument.
- `"editor"`: sub-commands of file-editor tools (`view` vs `create`, `str_replace`...).
"""

_PRESETS: dict[str, str] = {
    "shell": "POSIX shell commands (bash, execute_command...)",
    "editor": "file-editor sub-commands (str_replace_editor, edit_file, open, scroll_down...)",
}


def _regex_or_none(value: str | None, field: str, *, ignore_case: bool = False) -> str | None:
    """A field holding a regular expression: `value` when RE2 runs it (or it is None).

    User patterns are matched with RE2, in time linear in the text (`policy/patterns.py`);
    one RE2 cannot run (a backreference, look-around) is refused here, naming the field.
    """
    if value is not None:
        compile_pattern(value, field, ignore_case=ignore_case)
    return value


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """` Did you mean 'x'?` for the known name nearest a misspelled one, or `""`."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def _check_keys(model: type[BaseModel], data: Any, extra: Sequence[str] = ()) -> Any:
    """Refuse a key that is no field of `model`, naming the nearest field.

    pydantic's own `extra="forbid"` says only "Extra inputs are not permitted": a config
    file with `max_repeat: 3` deserves the name it meant, as a Python keyword gets.
    """
    if not isinstance(data, Mapping):
        return data
    known = [*model.model_fields, *extra]
    for key in data:
        if isinstance(key, str) and key not in known:
            hint = did_you_mean(key, known) or f" Its options: {', '.join(model.model_fields)}."
            msg = f"unknown option {key!r} for {model.__name__}.{hint}"
            raise ValueError(msg)
    return data


_MAX_COUNT = 1_000_000
"""Upper bound of the counting options (repeats, failures): far past any loop worth allowing."""

_MAX_LEASE = 30 * 24 * 3600.0
"""Upper bound of `in_flight_lease` (30 days): a datetime plus more overflows, or nearly."""


_NUMERIC = {int, float, int | None, float | None}


def _number_range(model: type[BaseModel], name: str) -> tuple[float, bool, float, bool]:
    """The bounds a numeric field's `Field(ge=..., le=...)` gives (each with: inclusive)."""
    low, low_in, high, high_in = -math.inf, False, math.inf, False
    for bound in model.model_fields[name].metadata:
        if isinstance(bound, annotated_types.Ge):
            low, low_in = float(bound.ge), True  # type: ignore[arg-type]
        elif isinstance(bound, annotated_types.Gt):
            low, low_in = float(bound.gt), False  # type: ignore[arg-type]
        elif isinstance(bound, annotated_types.Le):
            high, high_in = float(bound.le), True  # type: ignore[arg-type]
        elif isinstance(bound, annotated_types.Lt):
            high, high_in = float(bound.lt), False  # type: ignore[arg-type]
    return low, low_in, high, high_in


def _plain(number: float) -> str:
    return f"{int(number):,}" if number.is_integer() else f"{number:,}"


def _check_number(model: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    """Refuse a numeric option that is not finite or outside its range, naming both.

    Every field typed `int` or `float` (optional or not) is checked, so a new numeric option
    is covered without being listed. It runs before pydantic's own checks so that `inf`,
    `nan` and JSON `Infinity` (which `gt=0` alone lets through, and which overflow the first
    date computed from them) get one error naming the option and the range it takes.
    """
    name = info.field_name
    if name is None or model.model_fields[name].annotation not in _NUMERIC:
        return value
    if value is None or isinstance(value, bool) or not isinstance(value, int | float | str):
        return value
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return value  # not a number: pydantic's own type error says so
    low, low_in, high, high_in = _number_range(model, name)
    above = number >= low if low_in else number > low
    below = number <= high if high_in else number < high
    if math.isfinite(number) and above and below:
        return value
    allowed = [f"{'>=' if low_in else '>'} {_plain(low)}"] if math.isfinite(low) else []
    allowed += [f"{'<=' if high_in else '<'} {_plain(high)}"] if math.isfinite(high) else []
    msg = (
        f"{model.__name__}.{name}={value!r} is out of range: give a finite number "
        f"{' and '.join(allowed)} (every numeric option is checked when the configuration "
        "is built)."
    )
    raise ValueError(msg)


class ClassRule(BaseModel):
    """One per-call classification rule: match an argument, give the call a class.

    A rule matches when the argument at `arg` is a string and either `pattern` matches
    it (RE2, searched anywhere: anchor with `^` and `$`) or it starts with one of `prefixes`, word
    by word; or, with `missing`, when the call does not give the argument (absent, None
    or blank): SWE-agent's `search_file` without a `file` searches the file open in its
    viewer, so that call depends on the viewer's state and is marked volatile. Prefixes
    match word by word (`"git status"` matches `git status -s`, not `git status-x`), and
    only a simple command: a value with shell operators (`;`, `&`, `|`, `<`, `>`,
    backticks, `$(`, a newline) never does, so `cat a; rm b` cannot pass as `cat`. With
    `preset="shell"`, prefix rules are also applied to each command of a chain, ahead of
    the preset's own tables.

    Attributes:
        arg: The argument to look at: a name or a dotted path into nested dicts.
        pattern: A regular expression.
        prefixes: Command prefixes.
        missing: Match a call that does not give the argument.
        replay: The class of a matching call. Defaults to `"pure"` when `volatile` is set.
        volatile: The matching call depends on state its arguments do not name: a read
            whose result changes on its own, or (with `replay` "idempotent" or "unsafe") a
            command that acts on such state, as SWE-agent's `edit` acts on the file open
            in the viewer (see `ToolPolicy.volatile`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        return _check_keys(cls, data)

    arg: str = Field(min_length=1)
    pattern: str | None = None
    prefixes: tuple[str, ...] = ()
    missing: bool = False
    replay: ReplayClass | None = None
    volatile: bool = False

    if TYPE_CHECKING:
        # The input types, for type checkers (`prefixes=["git "]` as the docs write it).
        def __init__(self, **options: Unpack[ClassRuleOptions]) -> None: ...

    @field_validator("pattern")
    @classmethod
    def _check_pattern(cls, value: str | None) -> str | None:
        return _regex_or_none(value, "ClassRule.pattern")

    @field_validator("prefixes")
    @classmethod
    def _check_prefixes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not prefix.split() for prefix in value):
            msg = "prefixes must not be empty or blank: remove the empty entry."
            raise ValueError(msg)
        return value

    @model_validator(mode="after")
    def _check_rule(self) -> ClassRule:
        if [self.pattern is not None, bool(self.prefixes), self.missing].count(True) != 1:
            msg = (
                f"rule on arg {self.arg!r} needs exactly one of 'pattern' (a regular "
                "expression), 'prefixes' (a list of command prefixes) and 'missing': true "
                "(the call does not give the argument)."
            )
            raise ValueError(msg)
        if self.replay is None and not self.volatile:
            msg = (
                f"rule on arg {self.arg!r} gives no class: set 'replay' ('pure', "
                "'idempotent' or 'unsafe') and/or 'volatile': true."
            )
            raise ValueError(msg)
        return self

    @property
    def call_class(self) -> CallClass:
        """The class a matching call gets."""
        return CallClass(self.replay or "pure", self.volatile)


class ToolPolicy(BaseModel):
    """How the guard treats one tool.

    Attributes:
        replay: The tool's replay class. Tools without a policy use
            `GuardConfig.default_policy`, which is `"pure"` (conservative dedup). For a
            tool classified per call (`classify`, `preset` or `classifier`), this is the
            class of every call the classification does not recognise and of the writes
            it recognises: it defaults to `"unsafe"` there and cannot be `"pure"` (an
            unrecognised call is never deduplicated).
        max_repeats: Overrides `GuardConfig.max_repeats` for this tool.
        max_same_failures: Overrides `GuardConfig.max_same_failures` for this tool; 0 turns
            the same-failure layer off for it.
        failure_pattern: A regular expression (RE2, searched anywhere, case-insensitive, `^` at each
            line start): a result of this tool that matches it counts as a failure for the
            same-failure layer, like an error (a shell prints `command not found` in a
            normal result). Added to
            `GuardConfig.failure_pattern`. Default: the preset's own (`preset="shell"`:
            missing programs and files, denied permissions, compiler and interpreter
            errors, non-zero exit codes; `"editor"`: the editors' error lines).
        ignore_args: Argument names (or dotted paths into nested dicts) left out of the
            call key, for volatile fields such as request ids and timestamps.
        idempotency_key_arg: For `"idempotent"` tools, the argument the guard overwrites
            with the stable idempotency key (left out of the call key, like `ignore_args`).
        volatile: A read whose result changes on its own (a clock, a status poll): never
            deduplicated nor short-circuited; a changed result counts as progress and
            starts its own count over. The poll is stopped only once it returned the same
            result `max_repeats` times again in a row (with the default 3: the 5th poll
            after 4 identical answers); raise this tool's `max_repeats` for long jobs.
            With `replay` "idempotent" or "unsafe": a command that acts on state its
            arguments do not name (SWE-agent's `edit 1:1 ...` edits whichever file the
            viewer has open): it is counted the same way, so an identical call whose
            result changed (another file open) is a new call, not a repeat; its replay
            class (and replay safety) is unchanged.
        short_circuit: Whether a call that returned the identical result twice in a row is
            answered from that result instead of running again. `None` (default) means yes
            for `"pure"` calls that are not volatile, and no for volatile reads and calls
            with side effects, which are only counted (side effects also reminded): they
            are never silently suppressed unless you set `True`.
        classify: Per-call rules for a tool that sometimes reads and sometimes writes
            (see `ClassRule`); the first matching rule gives the call's class.
        preset: A built-in classification: `"shell"` or `"editor"` (see `PresetName`).
        command_arg: The argument holding the command the preset reads. Default: the
            preset's usual names (`command`, `cmd`, `commands`, `script` for `shell`;
            `command`, `action`, `cmd`, `operation` for `editor`, else the tool name).
        no_effect_errors: Exception class names (`"ValidationError"`) or dotted paths
            (`"billing.CardDeclined"`) that this tool raises only before any side effect. Such
            an exception leaves the call free to run again. Any other exception from a
            non-`pure` tool leaves its outcome unknown, even when the node turns it into an
            error message: an `unsafe` retry then needs `guard.resolve`, an `idempotent` one
            reuses the idempotency key.
        classifier: A Python callable for code users: it receives the call's arguments
            and returns a `CallClass`, or None to fall through to the preset (then to
            `replay`). Consulted after `classify` and before `preset`. It is not
            serialized: `model_dump` and JSON leave it out, so set it again in code after
            loading a configuration. If it raises or returns something else, the call is
            treated as unrecognised and a warning is logged.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        return _check_keys(cls, data)

    replay: ReplayClass = "pure"
    max_repeats: int | None = Field(default=None, ge=1, le=_MAX_COUNT)
    max_same_failures: int | None = Field(default=None, ge=0, le=_MAX_COUNT)
    failure_pattern: str | None = None
    ignore_args: tuple[str, ...] = ()
    idempotency_key_arg: str | None = None
    volatile: bool = False
    short_circuit: bool | None = None
    classify: tuple[ClassRule, ...] = ()
    preset: PresetName | None = None
    command_arg: str | None = None
    no_effect_errors: tuple[str, ...] = ()
    classifier: SkipJsonSchema[Callable[[Any], CallClass | None] | None] = Field(
        default=None, exclude=True, repr=False
    )

    if TYPE_CHECKING:
        # The input types, for type checkers (`ignore_args=["trace_id"]` as the docs write it).
        def __init__(self, **options: Unpack[ToolPolicyOptions]) -> None: ...

    @field_validator("*", mode="before")
    @classmethod
    def _check_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        return _check_number(cls, value, info)

    @field_validator("failure_pattern")
    @classmethod
    def _check_failure_pattern(cls, value: str | None) -> str | None:
        return _regex_or_none(value, "ToolPolicy.failure_pattern", ignore_case=True)

    @field_validator("preset", mode="before")
    @classmethod
    def _check_preset(cls, value: Any) -> Any:
        if value is not None and value not in _PRESETS:
            known = "; ".join(f"{name!r}: {what}" for name, what in _PRESETS.items())
            msg = f"unknown preset {value!r}. Use one of {known}, or write 'classify' rules."
            raise ValueError(msg)
        return value

    @model_validator(mode="before")
    @classmethod
    def _default_replay(cls, data: Any) -> Any:
        # A classified tool's unrecognised calls must not be pure: default them to unsafe.
        if isinstance(data, dict) and "replay" not in data and _classifies(data):
            return {**data, "replay": "unsafe"}
        return data

    @model_validator(mode="after")
    def _check_consistency(self) -> ToolPolicy:
        if self.per_call:
            if self.volatile:
                msg = (
                    "volatile=True applies to every call, but this tool is classified per "
                    "call. Give 'volatile': true in the classify rules that match its reads."
                )
                raise ValueError(msg)
            if self.replay == "pure" and not self.only_marks_reads_volatile:
                msg = (
                    "replay='pure' with per-call classification would make every call the "
                    "rules do not recognise pure (deduplicated). Use 'unsafe' (the default "
                    "for classified tools) or 'idempotent'; mark the reads with rules."
                )
                raise ValueError(msg)
        if self.command_arg is not None and self.preset is None:
            msg = (
                f"command_arg={self.command_arg!r} tells a preset which argument to read, "
                "but no preset is set. Add preset='shell' or 'editor', or drop command_arg."
            )
            raise ValueError(msg)
        if self.idempotency_key_arg is not None and self.replay != "idempotent":
            msg = (
                f"idempotency_key_arg={self.idempotency_key_arg!r} only applies to "
                f"replay='idempotent' tools, but replay is {self.replay!r}."
            )
            raise ValueError(msg)
        return self

    @property
    def per_call(self) -> bool:
        """Whether calls of this tool are classified one by one."""
        return bool(self.classify) or self.preset is not None or self.classifier is not None

    @property
    def only_marks_reads_volatile(self) -> bool:
        """Whether the classification only marks some reads of a read-only tool volatile.

        Such a tool may keep `replay="pure"`: every call is a read either way (SWE-agent's
        `search_file`, volatile when it searches the file open in the viewer).
        """
        return (
            self.preset is None
            and self.classifier is None
            and all(rule.replay in (None, "pure") for rule in self.classify)
        )

    @functools.cached_property
    def classifier_fn(self) -> Classifier | None:
        """The compiled per-call classification, or None for a tool with one class.

        Built on first use and kept on the instance (a plain attribute read afterwards:
        `call_facts` reads it on every call).
        """
        if not self.per_call:
            return None
        from langgraph_replay_guard.policy.classify import Classifier

        return Classifier(self)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """Copy the policy; the compiled classification is rebuilt for the copy."""
        copy = super().model_copy(update=update, deep=deep)
        copy.__dict__.pop("classifier_fn", None)
        return copy

    @property
    def key_ignore_args(self) -> tuple[str, ...]:
        """Arguments left out of the call key: `ignore_args` and the idempotency key."""
        if self.idempotency_key_arg is None:
            return self.ignore_args
        return (*self.ignore_args, self.idempotency_key_arg)

    def raised_before_effect(self, error: BaseException) -> bool:
        """Whether `no_effect_errors` names this exception (or one of its base classes).

        Args:
            error: The exception that escaped the tool.

        Returns:
            True when the tool raises it only before any side effect.
        """
        if not self.no_effect_errors:
            return False
        names = set(self.no_effect_errors)
        return any(
            cls.__name__ in names or f"{cls.__module__}.{cls.__qualname__}" in names
            for cls in type(error).__mro__
        )

    def short_circuits(self, replay: str | None = None, volatile: bool | None = None) -> bool:
        """Whether the result-diff layer may answer this tool's calls without running them.

        Args:
            replay: The class of one call, when the tool is classified per call.
            volatile: Whether that call is a volatile read, when classified per call.

        Returns:
            `short_circuit` when set, otherwise `True` only for `"pure"` calls that are not
            volatile (a poll is run again until its result changes).
        """
        if self.short_circuit is not None:
            return self.short_circuit
        if volatile if volatile is not None else self.volatile:
            return False
        return (replay or self.replay) == "pure"


def _classifies(data: dict[str, Any]) -> bool:
    return (
        bool(data.get("classify"))
        or data.get("preset") is not None
        or (data.get("classifier") is not None)
    )


class ToolkitRef(BaseModel):
    """A toolkit whose tools carry a name prefix, as `GuardConfig.toolkits` entry.

    `langchain-mcp-adapters` with `tool_name_prefix=True` names a server's tools
    `<server>_<tool>`: `ToolkitRef(name="mcp-reference", prefix="fs_")` gives `fs_read_file`
    the policy of `read_file`. Give one entry per prefix (per server).

    Attributes:
        name: The toolkit's name (see `GuardConfig.toolkits`).
        prefix: Put in front of every tool name of the toolkit.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        return _check_keys(cls, data)

    name: str
    prefix: str = ""

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        return _known_toolkit(value)


_DEFAULT_WINDOW = 5


def toolkit_window(toolkits: Sequence[str | ToolkitRef]) -> int | None:
    """The dedup window (`history_window`) the toolkits set, or None when none sets one.

    A toolkit sets one when its agent shows the model more of its history than the
    default window assumes; with several, the smallest wins (a shorter window only lets
    more re-reads run).

    Args:
        toolkits: `GuardConfig.toolkits` entries.

    Returns:
        The smallest window the toolkits give, or None.
    """
    windows = [
        load_toolkit(ref if isinstance(ref, str) else ref.name).get("history_window")
        for ref in toolkits
    ]
    given = [w for w in windows if isinstance(w, int)]
    return min(given) if given else None


def keeps_previews(config: GuardConfig, *, messages: bool) -> bool:
    """Whether a result's preview goes into the guard channel (`GuardConfig.store_previews`).

    The thread's messages already hold every result the model was given (what a middleware
    left of it), so where the guard reads them (`messages`: `ReplayGuardMiddleware`,
    `guard.wrap`) it quotes an earlier result from them and its channel keeps digests only,
    unless `store_previews=True`. Where there are none (the callback handler,
    `guard.control()`), only `store_previews=False` keeps the text out.

    Args:
        config: The guard's configuration.
        messages: Whether the integration reads the thread's messages.

    Returns:
        Whether the channel keeps previews.
    """
    if config.store_previews is None:
        return not messages
    return config.store_previews


def _known_toolkit(name: str) -> str:
    if name not in known_toolkits():
        msg = (
            f"unknown toolkit {name!r}. Known toolkits: {', '.join(known_toolkits())}. "
            "For other tools, give their policies in tools={...}."
        )
        raise ValueError(msg)
    return name


class GuardConfig(BaseModel):
    """Configuration of a `ReplayGuard`. Every default is the safe choice.

    Attributes:
        history_window: How many recent executed calls the dedup layer looks back over.
            Not given, a toolkit may set it: one whose agent keeps its whole history in
            the model's context (`mini-swe-agent`) widens it (the smallest of the
            toolkits' windows; see `toolkit_window`).
        max_repeats: Identical attempts allowed per turn; the next one aborts.
        result_preview_chars: Length of the earlier result shown to the model when a call
            is answered from it.
        store_previews: Keep a preview of each result in the guard channel (checkpointed with
            the thread). None (the default): only where no messages hold the results (the
            callback handler, `guard.control()`); `ReplayGuardMiddleware` and `guard.wrap`
            keep digests only and cut what the model is told of an earlier result from the
            thread's messages. True: everywhere. False: nowhere; a duplicate read is then
            answered from the thread's messages, or, where there are none (the callback
            handler), says the result is identical without quoting it.
        max_cycle_period: Longest alternating pattern (A-B-A-B is period 2) detected.
        dedup: Enable the dedup layer.
        repeat_limit: Enable the repeat counter and its abort.
        result_diff: Enable the identical-result short-circuit.
        reminder: Enable the loop reminder in the next system prompt.
        cycle_detection: Enable cycle detection.
        max_same_failures: The same-failure layer: after this many calls of one tool in a
            row that fail with the same error (normalized: numbers, ids, paths, quoted text
            and echoed arguments ignored), whatever their arguments, the next model call is
            reminded; if the tool fails the same way once more, its next call stops the run.
            A success of that tool, any successful world-changing call, or a successful call
            that returns something new (progress) starts the count again. 0 turns the layer
            off.
        failure_pattern: A regular expression (RE2, searched anywhere, case-insensitive, `^` at each
            line start): a result that matches it counts as a failure for the same-failure
            layer, for every tool, beside the tools' own (`ToolPolicy.failure_pattern`, the
            presets' patterns). None: only error ToolMessages, exceptions and the tools'
            own patterns make failures. Other layers are not affected.
        repeat_reset: `"progress"`: a successful world-changing call resets the other calls'
            counts; `"turn"`: plain per-turn counting.
        mode: `"enforce"` acts on the decisions; `"shadow"` makes and reports every decision
            (trace metadata, the custom stream, `guard.inspect`, the channel's `shadow`
            counts per reason) but denies, short-circuits, stops and reminds nothing: the
            agent behaves as without the guard. The replay ledger keeps recording and
            keeps refusing a call whose outcome is unknown, in both modes: shadow mode
            never weakens replay safety (give the guard no store to run without it).
        exit_behavior: `"end"` stops the run gracefully, `"error"` raises `LoopAbortedError`,
            `"continue"` blocks only the offending call; a call insisted on `max_repeats`
            more times after it was blocked then stops the run as with `"end"`, so model
            calls stay bounded. On every setting, a run that goes back to the model after
            the stop and asks for more tools in the same turn gets `LoopAbortedError`.
        scope: `"turn"` resets dedup, counters, epochs and reminders at each new user
            message; `"thread"` keeps them for the whole thread.
        on_unsafe: What happens when an `unsafe` call's outcome is unknown on replay:
            `"raise"` (`ReplayUnsafeError`) or `"interrupt"` (ask a human).
        in_flight_wait: Seconds a worker waits for the outcome of a call another live
            worker is running (then replays it) before raising `ReplayInFlightError`.
        in_flight_lease: Seconds a claim on a call counts as alive when its worker runs on
            another machine (one on this machine is checked by its process only, however
            long it runs). After that the
            outcome counts as unknown: an `unsafe` call then needs `guard.resolve`; elapsed
            time never lets it run again by itself.
        tools: Per-tool policies by tool name. A plain string is shorthand for the replay
            class (`{"send_email": "unsafe"}`).
        toolkits: Named tool policies for well-known agent stacks, shipped as data
            (`langgraph_replay_guard/policy/toolkits/<name>.json`, one reason per tool):
            `"deepagents"`, `"langchain"`, `"mcp-reference"`, `"swe-agent"`,
            `"mini-swe-agent"`, `"openhands"`. An entry is a name, or a `ToolkitRef` (a name
            and a tool name prefix). Your own `tools` entry for a tool always wins over a toolkit's,
            as a whole (it replaces the toolkit's policy, it is not merged with it). Two
            toolkits that give one tool different policies are an error unless `tools`
            decides it. Serialized as given: the expanded policies are never written.
        default_policy: Policy of tools not listed in `tools` nor in a toolkit, and
            without MCP annotations (a tool's `readOnlyHint`, `idempotentHint` and
            `destructiveHint` give its class when neither `tools` nor a toolkit names it:
            see `policy_for`).
        strict_tool_names: A name in `tools` that matches no tool of the agent, while one
            of its tools without a policy is a near match (`send_email` for `send_mail`),
            is an error that stops the first invoke before any tool runs (`check(agent)`
            and `control(tools=...)` raise it themselves): the real tool would silently get
            `default_policy`. Only where the guard knows every tool the graph can run
            (`create_agent` without another middleware that has a tool hook, with the tools
            of every agent built from the same guard, at the first model call; the callback
            handler's `check` on such an agent, `control(tools=...)`) and in enforce mode;
            elsewhere (`guard.wrap`, which sees one tools node of maybe several; a
            middleware that may serve tools itself; shadow mode) it is a
            `ReplayGuardWarning` naming both names, once. False makes it a warning
            everywhere.
        require_classes: Refuse to run a tool that nothing classified (no `tools` entry,
            no toolkit, no MCP annotations): a `ValueError` naming the tools and the fix,
            where the guard first sees them (build, wrap, `check(agent)`) and at the call
            itself (the callback handler refuses the call with that text). Off by
            default: the guard is added to working agents, and refusing every tool until
            each is classified would break them on the first run; each guard lists its
            unclassified tools once in an `UnclassifiedToolsWarning` instead. Turn it on
            once every tool is classified, so that a new tool cannot slip in as `pure`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        return _check_keys(cls, data, ("on_abort",))

    history_window: int = Field(default=_DEFAULT_WINDOW, ge=1, le=10_000)
    max_repeats: int = Field(default=3, ge=1, le=_MAX_COUNT)
    result_preview_chars: int = Field(default=200, ge=0, le=100_000)
    store_previews: bool | None = None
    max_cycle_period: int = Field(default=4, ge=2, le=32)
    dedup: bool = True
    repeat_limit: bool = True
    result_diff: bool = True
    reminder: bool = True
    cycle_detection: bool = True
    max_same_failures: int = Field(default=DEFAULT_MAX_SAME_FAILURES, ge=0, le=_MAX_COUNT)
    failure_pattern: str | None = None
    repeat_reset: Literal["progress", "turn"] = "progress"
    exit_behavior: Literal["end", "error", "continue"] = "end"
    mode: Literal["enforce", "shadow"] = "enforce"
    scope: Literal["turn", "thread"] = "turn"
    on_unsafe: Literal["raise", "interrupt"] = "raise"
    in_flight_wait: float = Field(default=10.0, ge=0, le=3600)
    in_flight_lease: float = Field(default=900.0, gt=0, le=_MAX_LEASE)
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)
    toolkits: tuple[str | ToolkitRef, ...] = ()
    default_policy: ToolPolicy = Field(default_factory=ToolPolicy)
    strict_tool_names: bool = True
    require_classes: bool = False

    # The toolkits' policies, expanded once (the user's `tools` are looked up first).
    _toolkit_tools: dict[str, ToolPolicy] = PrivateAttr(default_factory=dict)

    if TYPE_CHECKING:
        # What type checkers see of the constructor: the types it accepts as input (the
        # fields' are what it stores), so the documented `GuardConfig(tools={"send_email":
        # "unsafe"}, toolkits=["deepagents"])` passes `mypy --strict`. Pydantic's own
        # `__init__` runs; `tests/unit/test_typed_options.py` keeps the two in step.
        def __init__(self, **options: Unpack[GuardOptions]) -> None: ...

    @model_validator(mode="before")
    @classmethod
    def _deprecated_on_abort(cls, data: Any) -> Any:
        """Accept `on_abort`, the old name of `exit_behavior`, for one more release."""
        if not isinstance(data, Mapping) or "on_abort" not in data:
            return data
        data = dict(data)
        value = data.pop("on_abort")
        if "exit_behavior" in data and data["exit_behavior"] != value:
            msg = (
                f"on_abort={value!r} and exit_behavior={data['exit_behavior']!r} disagree: "
                "on_abort is the deprecated name of exit_behavior, pass only exit_behavior."
            )
            raise ValueError(msg)
        warnings.warn(
            "GuardConfig(on_abort=...) is deprecated: use exit_behavior=... (LangChain's name, "
            "same values); on_abort will be removed in the next release.",
            DeprecationWarning,
            stacklevel=4,
        )
        data["exit_behavior"] = value
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _check_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        return _check_number(cls, value, info)

    @field_validator("failure_pattern")
    @classmethod
    def _check_failure_pattern(cls, value: str | None) -> str | None:
        return _regex_or_none(value, "GuardConfig.failure_pattern", ignore_case=True)

    @property
    def failure_regex(self) -> SafePattern | None:
        """`failure_pattern`, compiled (case-insensitive; cached by pattern)."""
        if self.failure_pattern is None:
            return None
        return compile_failure_pattern(self.failure_pattern)

    def failure_regex_for(self, tool: str) -> SafePattern | None:
        """What makes a result of `tool` a failure: its own pattern and the configuration's.

        The tool's own is its policy's `failure_pattern`, else its preset's.

        Args:
            tool: Tool name.

        Returns:
            The compiled patterns, either matching (case-insensitive), or None.
        """
        return self.resolver.failure_regex_for(tool)

    def same_failure_limit(self, tool: str) -> int:
        """The same-failure threshold of a tool (0: the layer is off for it).

        Args:
            tool: Tool name.

        Returns:
            The tool policy's `max_same_failures` when set, else the configuration's.
        """
        return self.resolver.same_failure_limit(tool)

    @property
    def on_abort(self) -> str:
        """Deprecated name of `exit_behavior`."""
        return self.exit_behavior

    @field_validator("tools", mode="before")
    @classmethod
    def _expand_shorthand(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                name: {"replay": policy} if isinstance(policy, str) else policy
                for name, policy in value.items()
            }
        return value

    @field_validator("toolkits", mode="before")
    @classmethod
    def _check_toolkits(cls, value: Any) -> Any:
        if isinstance(value, str):
            msg = (
                f"toolkits must be a list of toolkit names, got the string {value!r}; "
                f"write toolkits=[{value!r}]."
            )
            raise ValueError(msg)  # a string is a sequence: "swe-agent" would be 9 names
        if isinstance(value, list | tuple):
            for item in value:
                if isinstance(item, str):
                    _known_toolkit(item)
        return value

    @model_validator(mode="after")
    def _expand_toolkits(self) -> GuardConfig:
        self._toolkit_tools = _expand(self.toolkits, self.tools)
        self._take_toolkit_window()
        return self

    def _take_toolkit_window(self) -> None:
        """Use the toolkits' dedup window when the configuration does not set its own."""
        if "history_window" in self.model_fields_set:
            return
        window = toolkit_window(self.toolkits)
        # Frozen model: set in place, still unset (written by `model_dump`, not "given").
        object.__setattr__(self, "history_window", window or _DEFAULT_WINDOW)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """Copy the configuration; the toolkits are expanded again for the copy."""
        copy = super().model_copy(update=update, deep=deep)
        if update and ("toolkits" in update or "tools" in update):
            copy._toolkit_tools = _expand(copy.toolkits, copy.tools)
            copy._take_toolkit_window()
        copy.__dict__.pop("resolver", None)  # the copy answers through a resolver of its own
        return copy

    @functools.cached_property
    def resolver(self) -> PolicyResolver:
        """The `PolicyResolver` that answers for this configuration alone.

        Its `tools`, then its toolkits, then `default_policy`: it never learns (a guard
        learns the classes MCP annotations give in a resolver of its own, so the
        configuration is never changed nor copied). Built on first use and kept on the
        instance; it keeps the per-tool rules `call_facts(config, ...)` reads.
        """
        return PolicyResolver(self, learns=False)

    @property
    def toolkit_tools(self) -> Mapping[str, ToolPolicy]:
        """The policies the `toolkits` give, by tool name (a `tools` entry wins over these)."""
        return self._toolkit_tools

    def policy_for(self, tool: str) -> ToolPolicy:
        """Return the policy of a tool.

        Args:
            tool: Tool name.

        Returns:
            The tool's own policy (`tools`), else its toolkit policy (`toolkits`), else
            `default_policy`. A guard also reads the policy a tool's MCP annotations give,
            before `default_policy`, in its own `PolicyResolver`.
        """
        return self.resolver.policy_for(tool)

    def policy_source(self, tool: str) -> PolicySource:
        """Say where the policy `policy_for` returns for a tool comes from.

        Args:
            tool: Tool name.

        Returns:
            `"tools"`, `"toolkit"` or `"default"` (a guard's own resolver also says
            `"annotations"`, for a class learned from MCP annotations).
        """
        return self.resolver.policy_source(tool)

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
            first = sorted(unknown)[0]
            hint = did_you_mean(first, ["tools", "default_policy"])
            msg = (
                f"Policy file {path} has unknown keys {sorted(unknown)};{hint} A policy file "
                "holds only 'tools' and 'default_policy'. Put other settings in the config file."
            )
            raise ValueError(msg)
        # Validate only the file's part and keep this configuration's objects as they
        # are: a round trip through JSON would drop Python-only fields (`classifier`).
        loaded = GuardConfig.model_validate(data)
        update: dict[str, Any] = {"tools": {**self.tools, **loaded.tools}}
        if "default_policy" in data:
            update["default_policy"] = loaded.default_policy
        return self.model_copy(update=update)


class ClassRuleOptions(TypedDict, total=False):
    """`ClassRule`'s fields as keyword arguments, typed as it accepts them (for type checkers)."""

    arg: Required[str]
    pattern: str | None
    prefixes: Sequence[str]
    missing: bool
    replay: ReplayClass | None
    volatile: bool


class ToolPolicyOptions(TypedDict, total=False):
    """`ToolPolicy`'s fields as keyword arguments, typed as it accepts them (for type checkers).

    Any sequence where it stores a tuple, a rule as a mapping; the attributes keep the
    fields' types. `tests/integration/test_issue34_attack2.py` checks the keys agree.
    """

    replay: ReplayClass
    max_repeats: int | None
    max_same_failures: int | None
    failure_pattern: str | None
    ignore_args: Sequence[str]
    idempotency_key_arg: str | None
    volatile: bool
    short_circuit: bool | None
    classify: Sequence[ClassRule | Mapping[str, Any]]
    preset: PresetName | None
    command_arg: str | None
    no_effect_errors: Sequence[str]
    classifier: Callable[[Any], CallClass | None] | None


class GuardOptions(TypedDict, total=False):
    """`GuardConfig`'s fields as keyword arguments, for type checkers.

    `ReplayGuard`, `ReplayGuardMiddleware` and `ReplayGuardCallbackHandler` take these as
    typed keyword-only options (`**options: Unpack[GuardOptions]`): `mypy --strict` and IDEs
    flag a misspelled one (`max_repeat=3`) and a wrong type before anything runs, and at run
    time the constructor raises a `TypeError` naming the nearest option. Each option means
    what the `GuardConfig` field of the same name means, with the same default;
    `tests/unit/test_typed_options.py` checks that the two agree. The types are what
    `GuardConfig` accepts as input (a mapping where it stores a dict, any sequence where it
    stores a tuple, a policy as a mapping or a replay class).
    """

    history_window: int
    max_repeats: int
    result_preview_chars: int
    store_previews: bool | None
    max_cycle_period: int
    dedup: bool
    repeat_limit: bool
    result_diff: bool
    reminder: bool
    cycle_detection: bool
    max_same_failures: int
    failure_pattern: str | None
    repeat_reset: Literal["progress", "turn"]
    exit_behavior: Literal["end", "error", "continue"]
    mode: Literal["enforce", "shadow"]
    scope: Literal["turn", "thread"]
    on_unsafe: Literal["raise", "interrupt"]
    in_flight_wait: float
    in_flight_lease: float
    tools: Mapping[str, ToolPolicy | ReplayClass | Mapping[str, Any]]
    toolkits: Sequence[str | ToolkitRef]
    default_policy: ToolPolicy | Mapping[str, Any]
    strict_tool_names: bool
    require_classes: bool


def _expand(
    toolkits: tuple[str | ToolkitRef, ...], decided: Mapping[str, Any]
) -> dict[str, ToolPolicy]:
    """The toolkits' policies by tool name; a tool two toolkits disagree on is an error.

    Raises:
        ValueError: If two toolkits give a tool different policies and `decided` (the
            user's `tools`) does not name it.
    """
    policies: dict[str, ToolPolicy] = {}
    given_by: dict[str, str] = {}
    for entry in toolkits:
        ref = entry if isinstance(entry, ToolkitRef) else ToolkitRef(name=entry)
        label = ref.name if not ref.prefix else f"{ref.name} (prefix {ref.prefix!r})"
        for tool, fields in toolkit_policies(ref.name, ref.prefix).items():
            policy = _toolkit_policy(json.dumps(fields, sort_keys=True))
            earlier = policies.get(tool)
            if earlier is not None and earlier != policy and tool not in decided:
                msg = (
                    f"toolkits {given_by[tool]!r} and {label!r} give tool {tool!r} different "
                    f"policies ({_summary(earlier)} and {_summary(policy)}). Decide it in "
                    f'tools={{"{tool}": ...}} (your entry wins over both), or drop one toolkit.'
                )
                raise ValueError(msg)
            if earlier is None:
                policies[tool] = policy
                given_by[tool] = label
    return policies


@functools.cache
def _toolkit_policy(fields: str) -> ToolPolicy:
    # Validated once per distinct entry and shared: a policy is frozen, and sharing keeps
    # its compiled classification (the shell preset's cache) across configurations.
    return ToolPolicy.model_validate_json(fields)


def _summary(policy: ToolPolicy) -> str:
    if policy.preset is not None:
        return f"preset={policy.preset!r}"
    return f"replay={policy.replay!r}" + (", volatile" if policy.volatile else "")


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
