"""Calibration: search the guard's thresholds for the best configuration on recorded runs."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_replay_guard.decisions.engine import CallFacts, call_facts
from langgraph_replay_guard.decisions.failures import failure_signature
from langgraph_replay_guard.errors import InvalidArgumentsError
from langgraph_replay_guard.evaluation import (
    DEFAULT_ERROR_PATTERN,
    GUARD_FIELD,
    EvalReport,
    Trajectory,
    evaluate_trajectories,
)
from langgraph_replay_guard.policy.config import GuardConfig, ToolPolicy

__all__ = [
    "DEFAULT_BUDGET_SECONDS",
    "DEFAULT_LOOP_CALLS",
    "GLOBAL_CANDIDATES",
    "TOOL_MAX_REPEATS_CANDIDATES",
    "Calibration",
    "RecordingReading",
    "Score",
    "ToolEvidence",
    "calibrate",
    "config_data",
    "find_loops",
    "score",
    "tool_evidence",
]

DEFAULT_LOOP_CALLS = 4
"""How many times a run must do the same thing in one user turn for the recording to count as a
loop (see `find_loops`)."""

DEFAULT_BUDGET_SECONDS = 120.0
"""The search stops after this long and keeps the best configuration found so far."""

GLOBAL_CANDIDATES: dict[str, tuple[int, ...]] = {
    "max_repeats": (2, 3, 4, 5, 6, 8),
    "history_window": (1, 2, 3, 5, 8, 10, 15, 20, 30),
    "max_same_failures": (0, 2, 3, 4, 5, 6, 8),
    "max_cycle_period": (2, 3, 4, 6, 8),
}
"""The values tried for each `GuardConfig` setting (the starting value is always tried too)."""

TOOL_MAX_REPEATS_CANDIDATES: tuple[int | None, ...] = (None, 2, 3, 4, 5, 6, 8)
"""The values tried for a tool's own `max_repeats` (None: the configuration's). 1 is not tried
(nor for the configuration's): it stops a run at its first identical repeat, which dedup
already answers, and fits a small set's loops too closely."""

_MAX_PASSES = 3


@dataclass(frozen=True)
class Score:
    """How one configuration does on the recorded runs.

    Attributes:
        runs: Runs evaluated.
        loops: Runs whose recording has a loop (`find_loops`).
        loops_stopped: Runs with a loop that the guard stops (an abort) in a turn that loops.
        saved: Calls the guard would not have run: blocked, or cut by an abort.
        blocked: Blocked calls.
        cut: Calls never made because an abort ended their turn.
        wrong: Wrong blocks (the eval's: a blocked call whose recorded result was new).
        healthy_stopped: Runs without a loop that the guard stops (an abort) or where it
            makes a loop stop (any block but a dedup answer or a call to a tool that does
            not exist).
        aborts: Aborts.
    """

    runs: int = 0
    loops: int = 0
    loops_stopped: int = 0
    saved: int = 0
    blocked: int = 0
    cut: int = 0
    wrong: int = 0
    healthy_stopped: int = 0
    aborts: int = 0

    @property
    def safe(self) -> bool:
        """No wrong block and no stop in a run without a loop."""
        return self.wrong == 0 and self.healthy_stopped == 0

    def rank(self) -> tuple[int, int, int]:
        """What the search maximizes: safety first, then loops stopped, then calls saved."""
        return (-(self.wrong + self.healthy_stopped), self.loops_stopped, self.saved)


@dataclass
class ToolEvidence:
    """What the recordings say about one tool.

    Attributes:
        tool: Tool name.
        source: Where its policy comes from (`GuardConfig.policy_source`): `"default"` is a
            tool the policy does not know.
        replay: The replay class it gets (`"pure"`, `"unsafe"`...; `"per call"` for a tool
            classified per call).
        volatile: Whether its policy marks it volatile.
        calls: Recorded calls.
        same_results: Identical calls (same tool and arguments, same user turn, no successful
            world-changing call since) that returned the previous identical call's result.
        changed_results: Identical calls, as above, that returned something else: the tool's
            result changes on its own, so it is a volatile candidate.
        example: The first changed result: `(run id, call index, earlier result, result)`.
    """

    tool: str
    source: str
    replay: str
    volatile: bool
    calls: int = 0
    same_results: int = 0
    changed_results: int = 0
    example: tuple[str, int, str, str] | None = None

    @property
    def volatile_candidate(self) -> bool:
        """Identical calls with nothing written between them returned different results."""
        return self.changed_results > 0


@dataclass
class Calibration:
    """The result of `calibrate`.

    Attributes:
        base: The configuration the search started from.
        config: The configuration chosen.
        base_score: How `base` does.
        score: How `config` does.
        base_report: The eval report of `base`.
        report: The eval report of `config`.
        changes: The settings changed, as `(setting, base value, chosen value)`; a tool's own
            setting reads `tools.NAME.max_repeats`.
        evidence: What the recordings say about each tool, by name.
        loop_runs: The ids of the runs whose recording has a loop.
        evaluations: Configurations evaluated.
        seconds: Time the search took.
        complete: False when the time budget ended the search early.
    """

    base: GuardConfig
    config: GuardConfig
    base_score: Score
    score: Score
    base_report: EvalReport
    report: EvalReport
    changes: list[tuple[str, Any, Any]] = field(default_factory=list)
    evidence: dict[str, ToolEvidence] = field(default_factory=dict)
    loop_runs: list[str] = field(default_factory=list)
    evaluations: int = 0
    seconds: float = 0.0
    complete: bool = True

    @property
    def unknown_tools(self) -> list[ToolEvidence]:
        """The recorded tools the policy does not know (they get `default_policy`)."""
        return [e for e in self.evidence.values() if e.source == "default"]

    @property
    def volatile_candidates(self) -> list[ToolEvidence]:
        """Tools not marked volatile whose identical calls returned different results."""
        return [e for e in self.evidence.values() if e.volatile_candidate and not e.volatile]


@dataclass(frozen=True)
class RecordingReading:
    """How recorded runs are read: what a failure is, what a loop is, what results ignore.

    Attributes:
        loop_calls: How many times makes a loop (see `find_loops`).
        error_pattern: Regular expression (case-insensitive) marking failed results.
        normalize: Regular expressions removed from results before comparing them.
        tools: The tool names the agents had, for runs that do not list theirs.
    """

    loop_calls: int = DEFAULT_LOOP_CALLS
    error_pattern: str = DEFAULT_ERROR_PATTERN
    normalize: tuple[str, ...] = ()
    tools: frozenset[str] | None = None
    _patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _failed: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Compiled once per reading, not once per pass over the runs.
        object.__setattr__(self, "_patterns", tuple(re.compile(p) for p in self.normalize))
        object.__setattr__(self, "_failed", re.compile(self.error_pattern, re.IGNORECASE))

    def result(self, call: Mapping[str, Any]) -> str:
        """The call's result text, `str(result)` with the `normalize` patterns removed."""
        text = str(call.get("result", ""))
        for pattern in self._patterns:
            text = pattern.sub("", text)
        return text

    def failed(self, text: str) -> bool:
        """Whether a result text marks a failure (`error_pattern`)."""
        return self._failed.search(text) is not None

    def calls(
        self, trajectory: Trajectory, config: GuardConfig
    ) -> Iterator[tuple[int, Mapping[str, Any], str, CallFacts]]:
        """The run's calls to existing tools with valid arguments, as the guard sees them.

        Calls to tools that do not exist are left out: the guard answers those itself,
        whatever the thresholds. So are calls a guard answered when they were recorded
        (`GUARD_FIELD`): their result is that guard's message, not the tool's.

        Yields:
            Each call's index in the run, the call, its result text and its facts.
        """
        listed = trajectory.get("tools")
        names = frozenset(listed) if isinstance(listed, list) else self.tools
        for index, call in enumerate(trajectory["calls"]):
            if call.get(GUARD_FIELD):
                continue  # the recording guard's own answer: the tool gave no result
            try:
                facts = call_facts(config, call["name"], call.get("args", {}), tools=names)
            except InvalidArgumentsError:
                continue
            if not facts.unknown:
                yield index, call, self.result(call), facts


def find_loops(
    trajectories: Sequence[Trajectory],
    config: GuardConfig,
    reading: RecordingReading = RecordingReading(),
) -> list[frozenset[Any]]:
    """Which user turns of each recorded run loop, read from the recording alone.

    A turn loops when, in it, the run

    - makes the same call (same tool, same arguments as the guard keys them) and gets the
      same result (after `normalize`) `loop_calls` times in a row: each time the previous
      identical call's result again, with no successful world-changing call (a non-`pure`
      tool whose result does not match `error_pattern`) in between, since that may change
      the answer; other calls may come in between (an A-B-A-B cycle loops on A); or
    - gets the same failure (`error_pattern`, normalized as the same-failure layer does:
      numbers, ids and echoed arguments ignored) from one tool `loop_calls` times in a row,
      whatever the arguments (a success of that tool or a successful world-changing call
      starts the row again), and that tool does not succeed later in the turn: a run that
      got out of its failures by itself does not loop, so stopping it is a stop in a run
      without a loop.

    The guard's settings play no part, only its call keys (`ignore_args`, per-call
    classification) and replay classes: the same runs loop whatever thresholds are tried.

    Args:
        trajectories: Parsed trajectories.
        config: The configuration whose tool policies give the keys and classes.
        reading: What a failure and a loop are, what results ignore, which tools existed.

    Returns:
        For each trajectory, in order, the set of its looping turns (empty: no loop).
    """
    found: list[frozenset[Any]] = []
    for trajectory in trajectories:
        # Per turn, what loops in it: ("same", key) or ("failure", tool).
        looping: dict[Any, set[tuple[str, Any]]] = {}
        same: dict[tuple[Any, str], tuple[str, int, int]] = {}  # key: result, epoch, streak
        failing: dict[tuple[Any, str], tuple[str, int, int]] = {}  # tool: signature, epoch, n
        epoch = 0
        for _, call, text, facts in reading.calls(trajectory, config):
            name, turn = call["name"], call.get("turn", 0)
            ok = not reading.failed(text)
            key = (turn, facts.key)
            previous = same.get(key)
            streak = 1
            if previous is not None and previous[0] == text and previous[1] == epoch:
                streak = previous[2] + 1
            same[key] = (text, epoch, streak)
            if streak >= reading.loop_calls:
                looping.setdefault(turn, set()).add(("same", facts.key))
            if ok:
                failing.pop((turn, name), None)
                # The tool succeeded after its failures: the run got out by itself.
                looping.get(turn, set()).discard(("failure", name))
            else:
                signature = failure_signature(text, call.get("args", {}))
                earlier = failing.get((turn, name))
                row = 1
                if earlier is not None and earlier[0] == signature and earlier[1] == epoch:
                    row = earlier[2] + 1
                failing[(turn, name)] = (signature, epoch, row)
                if row >= reading.loop_calls:
                    looping.setdefault(turn, set()).add(("failure", name))
            if ok and facts.replay != "pure":
                epoch += 1
        found.append(frozenset(turn for turn, why in looping.items() if why))
    return found


def tool_evidence(
    trajectories: Sequence[Trajectory],
    config: GuardConfig,
    reading: RecordingReading = RecordingReading(),
) -> dict[str, ToolEvidence]:
    """What the recordings say about each tool called (see `ToolEvidence`).

    Args:
        trajectories: Parsed trajectories.
        config: The configuration whose policies give the classes and keys.
        reading: What a failure is, what results ignore, which tools existed.

    Returns:
        Evidence by tool name, sorted by name; calls to tools that do not exist are left out.
    """
    evidence: dict[str, ToolEvidence] = {}
    for trajectory in trajectories:
        last: dict[tuple[Any, str], tuple[str, int, int]] = {}
        epoch = 0
        for index, call, text, facts in reading.calls(trajectory, config):
            name, turn = call["name"], call.get("turn", 0)
            entry = evidence.get(name)
            if entry is None:
                policy = config.policy_for(name)
                entry = ToolEvidence(
                    tool=name,
                    source=config.policy_source(name),
                    replay="per call" if policy.per_call else policy.replay,
                    volatile=policy.volatile,
                )
                evidence[name] = entry
            entry.calls += 1
            key = (turn, facts.key)
            previous = last.get(key)
            if previous is not None and previous[1] == epoch:
                if previous[0] == text:
                    entry.same_results += 1
                else:
                    entry.changed_results += 1
                    if entry.example is None:
                        ident = str(trajectory.get("id", "?"))
                        entry.example = (ident, index, previous[0], text)
            last[key] = (text, epoch, index)
            if facts.replay != "pure" and not reading.failed(text):
                epoch += 1
    return dict(sorted(evidence.items()))


def score(
    trajectories: Sequence[Trajectory],
    loops: Sequence[frozenset[Any]],
    config: GuardConfig,
    reading: RecordingReading = RecordingReading(),
) -> tuple[Score, EvalReport]:
    """Evaluate a configuration and score it against the recorded loops.

    Args:
        trajectories: Parsed trajectories.
        loops: `find_loops` of the same trajectories.
        config: The configuration to evaluate.
        reading: What a failure is, what results ignore, which tools existed.

    Returns:
        The score and the eval report.
    """
    report = EvalReport()
    total = report.total
    seen = {"aborts": 0, "stops": 0, "answered": 0}
    stopped = {"loops": 0, "healthy": 0}

    def after_run(done: int) -> None:
        # Called after each trajectory: what it added to the report is this run's.
        index = done - 1
        new_aborts = report.aborts[seen["aborts"] :]
        answered = total.by_reason.get("unknown_tool", 0)
        stops = total.stops.blocked - seen["stops"] - (answered - seen["answered"])
        seen.update(aborts=len(report.aborts), stops=total.stops.blocked, answered=answered)
        looping = loops[index]
        if not looping:
            stopped["healthy"] += bool(new_aborts) or stops > 0
            return
        calls = trajectories[index]["calls"]
        turns = {calls[a.call_index].get("turn", 0) for a in new_aborts}
        stopped["loops"] += bool(turns & looping)

    evaluate_trajectories(
        trajectories,
        config,
        error_pattern=reading.error_pattern,
        normalize=reading.normalize,
        report=report,
        on_progress=after_run,
        tools=reading.tools,
    )
    result = Score(
        runs=total.trajectories,
        loops=sum(1 for turns in loops if turns),
        loops_stopped=stopped["loops"],
        saved=total.blocked + total.cut,
        blocked=total.blocked,
        cut=total.cut,
        wrong=total.wrong,
        healthy_stopped=stopped["healthy"],
        aborts=total.aborts,
    )
    return result, report


_Setting = tuple[str, str | None]  # (field, tool or None)


def _value(config: GuardConfig, setting: _Setting) -> Any:
    name, tool = setting
    if tool is None:
        return getattr(config, name)
    own = config.tools.get(tool)
    return getattr(own, name) if own is not None else getattr(config.policy_for(tool), name)


def _with(config: GuardConfig, setting: _Setting, value: Any) -> GuardConfig:
    name, tool = setting
    if tool is None:
        return config.model_copy(update={name: value})
    policy: ToolPolicy = config.policy_for(tool)
    # A toolkit's policy becomes the tool's own entry, with only this setting changed.
    tools = {**config.tools, tool: policy.model_copy(update={name: value})}
    return config.model_copy(update={"tools": tools})


def _label(setting: _Setting) -> str:
    name, tool = setting
    return name if tool is None else f"tools.{tool}.{name}"


def _settings(
    config: GuardConfig, evidence: Mapping[str, ToolEvidence]
) -> list[tuple[_Setting, tuple[Any, ...]]]:
    """The settings searched, in order, each with the values tried.

    A tool's own settings are searched only for tools the policy knows: the search never
    gives a tool the policy does not know a class. `volatile` is tried on `pure` tools
    classified as a whole whose recordings show changed results; a tool's `max_repeats` on
    tools whose calls were repeated.
    """
    found: list[tuple[_Setting, tuple[Any, ...]]] = []
    for tool, entry in evidence.items():
        policy = config.policy_for(tool)
        if entry.source == "default" or policy.per_call or policy.replay != "pure":
            continue
        if entry.volatile_candidate and not policy.volatile:
            found.append((("volatile", tool), (False, True)))
    for name, values in GLOBAL_CANDIDATES.items():
        start = getattr(config, name)
        found.append(((name, None), tuple(sorted({*values, start}))))
    for tool, entry in evidence.items():
        if entry.source == "default" or not (entry.same_results or entry.changed_results):
            continue
        own = config.policy_for(tool).max_repeats
        numbers = {v for v in TOOL_MAX_REPEATS_CANDIDATES if v is not None}
        if own is not None:
            numbers.add(own)
        found.append((("max_repeats", tool), (None, *sorted(numbers))))
    return found


def calibrate(
    trajectories: Sequence[Trajectory],
    base: GuardConfig,
    reading: RecordingReading = RecordingReading(),
    *,
    budget_seconds: float = DEFAULT_BUDGET_SECONDS,
    on_progress: Callable[[str], None] | None = None,
) -> Calibration:
    """Search the thresholds for the configuration that does best on recorded runs.

    A coordinate search from `base`: each setting in turn (per tool `volatile` where the
    recordings show changed results, `max_repeats`, `history_window`, `max_same_failures`,
    `max_cycle_period`, per tool `max_repeats`) is set to the value that ranks best
    (`Score.rank`: no wrong block and no stop in a run without a loop first, then the most
    loops stopped, then the most calls saved), the others held; ties keep the current value.
    Passes repeat until none changes anything (at most 3). Deterministic: the same runs and
    base give the same configuration. A tool's replay class is never changed.

    Args:
        trajectories: Parsed trajectories.
        base: The configuration to start from (its policies are kept).
        reading: What a failure and a loop are, what results ignore, which tools existed.
        budget_seconds: Stop searching after this long (keeping the best found so far).
        on_progress: Called with a line of progress after each setting.

    Returns:
        The calibration.
    """
    started = time.perf_counter()
    loops = find_loops(trajectories, base, reading)
    evidence = tool_evidence(trajectories, base, reading)
    base_score, base_report = score(trajectories, loops, base, reading)
    best, best_score, best_report = base, base_score, base_report
    evaluations = 1
    complete = True
    settings = _settings(base, evidence)
    for number in range(1, _MAX_PASSES + 1):
        changed = False
        for setting, values in settings:
            current = _value(best, setting)
            tried: list[str] = []
            for value in values:
                if value == current:
                    continue
                if time.perf_counter() - started > budget_seconds:
                    complete = False
                    break
                candidate = _with(best, setting, value)
                result, report = score(trajectories, loops, candidate, reading)
                evaluations += 1
                tried.append(f"{value}")
                if result.rank() > best_score.rank():
                    best, best_score, best_report, changed = candidate, result, report, True
            if on_progress is not None:
                on_progress(
                    f"pass {number}: {_label(setting)} = {_value(best, setting)} (tried "
                    f"{len(tried)} values; {evaluations} evaluations, "
                    f"{time.perf_counter() - started:.1f} s)"
                )
            if not complete:
                break
        if not changed or not complete:
            break
    changes = [
        (_label(setting), _value(base, setting), _value(best, setting))
        for setting, _ in settings
        if _value(base, setting) != _value(best, setting)
    ]
    return Calibration(
        base=base,
        config=best,
        base_score=base_score,
        score=best_score,
        base_report=base_report,
        report=best_report,
        changes=changes,
        evidence=evidence,
        loop_runs=[
            str(t.get("id", "?")) for t, turns in zip(trajectories, loops, strict=True) if turns
        ],
        evaluations=evaluations,
        seconds=time.perf_counter() - started,
        complete=complete,
    )


def config_data(config: GuardConfig) -> dict[str, Any]:
    """The configuration as JSON data for `GuardConfig.from_file`, searched settings explicit.

    Settings left at their defaults are left out, except the ones calibration searches,
    which are always written: the file keeps its meaning if a default changes.

    Args:
        config: The configuration.

    Returns:
        JSON-ready data.
    """
    data = config.model_dump(mode="json", exclude_defaults=True)
    for name in GLOBAL_CANDIDATES:
        data[name] = getattr(config, name)
    return data
