"""Calibration: search the guard's thresholds on part of the recorded runs, keep what holds out."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langgraph_replay_guard.decisions.state import may_have_written
from langgraph_replay_guard.evaluation import (
    EvalReport,
    LoopTally,
    RecordingReading,
    Trajectory,
    evaluate_trajectories,
    find_loops,
)
from langgraph_replay_guard.policy.config import GuardConfig, ToolPolicy

__all__ = [
    "DEFAULT_BUDGET_SECONDS",
    "DEFAULT_HOLDOUT",
    "GLOBAL_CANDIDATES",
    "LOOP_THRESHOLDS",
    "MIN_TOOL_EVIDENCE_RUNS",
    "TOOL_MAX_REPEATS_CANDIDATES",
    "Calibration",
    "ChangeCheck",
    "PartScores",
    "Score",
    "ToolEvidence",
    "calibrate",
    "config_data",
    "score",
    "split_runs",
    "tool_evidence",
]
# The loop definition (`find_loops`) and `RecordingReading` live in evaluation, shared with
# `eval`; they stay importable from here.

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

_READING = RecordingReading()  # the default reading (a frozen dataclass)

DEFAULT_HOLDOUT = 0.5
"""The share of runs `calibrate` holds out to check its changes (`split_runs`)."""

MIN_TOOL_EVIDENCE_RUNS = 5
"""A tool's own `max_repeats` is searched only when its identical calls were repeated in at
least this many runs of the part calibration chooses on: a per-tool threshold fitted on one or
two runs stops the next run that needs one more try."""

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
        same_results: Identical calls (same tool and arguments, same user turn, no other
            world-changing call since, failed ones included) that returned the previous identical
            call's result; for a world-changing tool, its own identical call repeated (as
            `find_loops` reads it).
        changed_results: Identical calls of a `pure` call, as above, that returned something
            else: the tool's result changes on its own, so it is a volatile candidate (a
            write answering otherwise the second time, a toggle, is not counted).
        example: The first changed result: `(run id, call index, earlier result, result)`.
        repeated_runs: Runs with at least one such identical call of the tool: the evidence
            a tool's own `max_repeats` needs (`MIN_TOOL_EVIDENCE_RUNS`).
    """

    tool: str
    source: str
    replay: str
    volatile: bool
    calls: int = 0
    same_results: int = 0
    changed_results: int = 0
    example: tuple[str, int, str, str] | None = None
    repeated_runs: int = 0

    @property
    def volatile_candidate(self) -> bool:
        """Identical calls with nothing written between them returned different results."""
        return self.changed_results > 0


@dataclass(frozen=True)
class PartScores:
    """How the starting and the calibrated configurations do on one part of the runs.

    Attributes:
        runs: Runs in the part.
        base: The starting configuration's score there.
        calibrated: The calibrated configuration's score there.
    """

    runs: int
    base: Score
    calibrated: Score


@dataclass(frozen=True)
class ChangeCheck:
    """One change the search proposed, checked alone on the held-out part.

    Attributes:
        setting: The setting (`tools.NAME.max_repeats` for a tool's own).
        start: Its starting value.
        value: The value the search chose.
        base: The starting configuration's score on the held-out part.
        alone: The score there of the starting configuration with only this change.
        kept: Whether the calibration keeps it.
        why: Why it is kept or dropped.
    """

    setting: str
    start: Any
    value: Any
    base: Score
    alone: Score
    kept: bool
    why: str

    def gains(self) -> dict[str, int]:
        """What the change gains (positive) or costs on the held-out part, per figure."""
        return {
            "loops stopped": self.alone.loops_stopped - self.base.loops_stopped,
            "calls saved": self.alone.saved - self.base.saved,
            "wrong blocks": self.base.wrong - self.alone.wrong,
            "runs without a loop stopped": self.base.healthy_stopped - self.alone.healthy_stopped,
        }


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
        chosen: The scores on the part of the runs the search ran on.
        held_out: The scores on the part held out to check the changes.
        checks: Every change the search proposed, checked on the held-out part.
        short_evidence: Tools whose own `max_repeats` was not searched: their identical
            calls were repeated in fewer than `min_tool_runs` runs of the choosing part.
        min_tool_runs: The evidence a tool's own `max_repeats` needed.
        holdout: The share of runs held out.
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
    chosen: PartScores | None = None
    held_out: PartScores | None = None
    checks: list[ChangeCheck] = field(default_factory=list)
    short_evidence: list[ToolEvidence] = field(default_factory=list)
    min_tool_runs: int = 0
    holdout: float = 0.0

    @property
    def no_loops(self) -> bool:
        """No run has a loop: every loop threshold was kept."""
        return not self.loop_runs

    @property
    def unknown_tools(self) -> list[ToolEvidence]:
        """The recorded tools the policy does not know (they get `default_policy`)."""
        return [e for e in self.evidence.values() if e.source == "default"]

    @property
    def volatile_candidates(self) -> list[ToolEvidence]:
        """Tools not marked volatile whose identical calls returned different results."""
        return [e for e in self.evidence.values() if e.volatile_candidate and not e.volatile]


def tool_evidence(
    trajectories: Sequence[Trajectory],
    config: GuardConfig,
    reading: RecordingReading = _READING,
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
        repeated: set[str] = set()
        epoch = 0
        background = False  # a call started work that outlives it: reads may change
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
                repeated.add(name)
                if previous[0] == text:
                    entry.same_results += 1
                elif facts.replay != "pure":
                    pass  # a write answering otherwise the 2nd time (a toggle): not volatile
                elif background:
                    pass  # a background job may have written since: no sign of volatility
                else:
                    entry.changed_results += 1
                    if entry.example is None:
                        ident = str(trajectory.get("id", "?"))
                        entry.example = (ident, index, previous[0], text)
            if may_have_written(facts.replay, reading.outcome(text)):
                epoch += 1
            background = background or facts.background
            # The epoch right after the call, its own write included (as `find_loops` reads).
            last[key] = (text, epoch, index)
        for name in repeated:
            evidence[name].repeated_runs += 1
    return dict(sorted(evidence.items()))


def score(
    trajectories: Sequence[Trajectory],
    loops: Sequence[frozenset[Any]],
    config: GuardConfig,
    reading: RecordingReading = _READING,
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
    report = evaluate_trajectories(
        trajectories,
        config,
        error_pattern=reading.error_pattern,
        normalize=reading.normalize,
        tools=reading.tools,
        loops=loops,
    )
    total, counted = report.total, report.loops or LoopTally()
    result = Score(
        runs=total.trajectories,
        loops=sum(1 for turns in loops if turns),
        loops_stopped=counted.stopped,
        saved=total.blocked + total.cut,
        blocked=total.blocked,
        cut=total.cut,
        wrong=total.wrong,
        healthy_stopped=counted.healthy_stopped,
        aborts=total.aborts,
    )
    return result, report


_Setting = tuple[str, str | None]  # (field, tool or None)

LOOP_THRESHOLDS = ("max_repeats", "history_window", "max_same_failures", "max_cycle_period")
"""The settings kept when the runs have no loop: with nothing to stop, a search could only
weigh calls saved against stops it cannot see, and loosen them on no evidence."""


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
    config: GuardConfig,
    evidence: Mapping[str, ToolEvidence],
    *,
    loops: bool = True,
    min_tool_runs: int = 0,
) -> list[tuple[_Setting, tuple[Any, ...]]]:
    """The settings searched, in order, each with the values tried.

    A tool's own settings are searched only for tools the policy knows: the search never
    gives a tool the policy does not know a class. `volatile` is tried on `pure` tools
    classified as a whole whose recordings show changed results; a tool's `max_repeats` on
    tools whose identical calls were repeated in at least `min_tool_runs` runs. Without a
    loop (`loops` False) only `volatile` is searched (`LOOP_THRESHOLDS` are kept).
    """
    found: list[tuple[_Setting, tuple[Any, ...]]] = []
    for tool, entry in evidence.items():
        policy = config.policy_for(tool)
        if entry.source == "default" or policy.per_call or policy.replay != "pure":
            continue
        if entry.volatile_candidate and not policy.volatile:
            found.append((("volatile", tool), (False, True)))
    if not loops:
        return found
    for name, values in GLOBAL_CANDIDATES.items():
        start = getattr(config, name)
        found.append(((name, None), tuple(sorted({*values, start}))))
    for tool, entry in evidence.items():
        if entry.source == "default" or not (entry.same_results or entry.changed_results):
            continue
        if entry.repeated_runs < min_tool_runs:
            continue
        own = config.policy_for(tool).max_repeats
        numbers = {v for v in TOOL_MAX_REPEATS_CANDIDATES if v is not None}
        if own is not None:
            numbers.add(own)
        found.append((("max_repeats", tool), (None, *sorted(numbers))))
    return found


def split_runs(
    trajectories: Sequence[Trajectory],
    loops: Sequence[frozenset[Any]],
    holdout: float = DEFAULT_HOLDOUT,
) -> tuple[list[int], list[int]]:
    """Split runs into the part a calibration is chosen on and the part it is checked on.

    By run, stratified: the runs with a loop form one group, the runs without one a group
    per model, so that each part has every model and, when there are two or more, runs with
    a loop. In each group the runs are ordered by a hash of their id, then of their content
    (deterministic, and independent of the files' order, also when files share ids) and
    the first `holdout` share of them (rounded down, at least one of a group of two or
    more, never a group's last run) is held out: a single run with a loop is always on the
    choosing side, where it can be weighed.

    Args:
        trajectories: Parsed trajectories.
        loops: `find_loops` of the same trajectories.
        holdout: The share of each group held out, from 0 (none) to below 1.

    Returns:
        The indexes of the runs chosen on and of the runs held out, each in input order.
    """
    if not 0 <= holdout < 1:
        msg = f"holdout={holdout}: the share of runs held out must be at least 0 and below 1"
        raise ValueError(msg)
    groups: dict[tuple[bool, str], list[int]] = {}
    for index, (trajectory, turns) in enumerate(zip(trajectories, loops, strict=True)):
        model = "" if turns else str(trajectory.get("model", "unknown"))
        groups.setdefault((bool(turns), model), []).append(index)
    held: set[int] = set()
    for _, members in sorted(groups.items()):

        def order(index: int) -> tuple[str, str, int]:
            ident = str(trajectories[index].get("id", index))
            # Runs of several files may share an id: their content, not their place in
            # the input, breaks the tie, so the files' order never changes the split.
            content = json.dumps(trajectories[index], sort_keys=True, default=str)
            return (
                hashlib.sha256(ident.encode("utf-8", "replace")).hexdigest(),
                hashlib.sha256(content.encode("utf-8", "replace")).hexdigest(),
                index,
            )

        members.sort(key=order)
        count = int(len(members) * holdout)
        if holdout > 0 and len(members) >= 2:
            count = max(count, 1)
        held.update(members[: min(count, len(members) - 1)])
    chosen = [i for i in range(len(trajectories)) if i not in held]
    return chosen, sorted(held)


def _holds(got: Score, start: Score) -> bool:
    """No more wrong blocks, no more runs without a loop stopped, no fewer loops stopped."""
    return (
        got.wrong <= start.wrong
        and got.healthy_stopped <= start.healthy_stopped
        and got.loops_stopped >= start.loops_stopped
    )


def _search(
    runs: Sequence[Trajectory],
    loops: Sequence[frozenset[Any]],
    base: GuardConfig,
    settings: list[tuple[_Setting, tuple[Any, ...]]],
    reading: RecordingReading,
    deadline: float,
    progress: Callable[[str], None],
) -> tuple[GuardConfig, int, bool]:
    """The coordinate search; returns the best configuration, evaluations and completeness."""
    started = time.perf_counter()
    best_score, _ = score(runs, loops, base, reading)
    best, evaluations, complete = base, 1, True
    for number in range(1, _MAX_PASSES + 1):
        changed = False
        for setting, values in settings:
            current = _value(best, setting)
            tried = 0
            for value in values:
                if value == current:
                    continue
                if time.perf_counter() > deadline:
                    complete = False
                    break
                candidate = _with(best, setting, value)
                result, _ = score(runs, loops, candidate, reading)
                evaluations += 1
                tried += 1
                if result.rank() > best_score.rank():
                    best, best_score, changed = candidate, result, True
            progress(
                f"pass {number}: {_label(setting)} = {_value(best, setting)} (tried "
                f"{tried} values; {evaluations} evaluations, "
                f"{time.perf_counter() - started:.1f} s)"
            )
            if not complete:
                break
        if not changed or not complete:
            break
    return best, evaluations, complete


def calibrate(
    trajectories: Sequence[Trajectory],
    base: GuardConfig,
    reading: RecordingReading = _READING,
    *,
    budget_seconds: float = DEFAULT_BUDGET_SECONDS,
    on_progress: Callable[[str], None] | None = None,
    holdout: float = DEFAULT_HOLDOUT,
    min_tool_runs: int = MIN_TOOL_EVIDENCE_RUNS,
) -> Calibration:
    """Search the thresholds on part of the recorded runs and keep what holds on the rest.

    The runs are split (`split_runs`): the search runs on one part, each change it makes is
    checked on the held-out part, and only the changes that hold there are kept.

    The search is a coordinate search from `base`: each setting in turn (per tool
    `volatile` where the recordings show changed results, `max_repeats`, `history_window`,
    `max_same_failures`, `max_cycle_period`, per tool `max_repeats`) is set to the value
    that ranks best (`Score.rank`: no wrong block and no stop in a run without a loop first,
    then the most loops stopped, then the most calls saved), the others held; ties keep the
    current value. Passes repeat until none changes anything (at most 3). Deterministic: the
    same runs and base give the same configuration. A tool's replay class is never changed.

    - With no loop in the choosing part (`find_loops`), only `volatile` is searched: every
      loop threshold (`LOOP_THRESHOLDS`, per tool `max_repeats`) is kept.
    - A tool's own `max_repeats` is searched only when the tool's identical calls were
      repeated in at least `min_tool_runs` runs of the choosing part (`short_evidence`
      lists the others).
    - A change is kept only when, applied alone to `base`, it holds on the held-out part:
      no more wrong blocks, no more runs without a loop stopped, no fewer loops stopped
      than `base` there, and a gain there (a loop stopped, a call saved, a wrong block or a
      stop of a run without a loop avoided): a change that only the choosing part's runs
      reward is fitted to them. The kept changes together must hold on both parts; the last
      kept is dropped until they do.

    Args:
        trajectories: Parsed trajectories.
        base: The configuration to start from (its policies are kept).
        reading: What a failure and a loop are, what results ignore, which tools existed.
        budget_seconds: Stop searching after this long (keeping the best found so far).
        on_progress: Called with a line of progress after each setting.
        holdout: The share of runs held out to check the changes (0: no check, every change
            the search makes is kept; with too few runs to hold any out, a threshold change
            is dropped: nothing confirms it).
        min_tool_runs: Runs with a repeated identical call a tool's own `max_repeats` needs.

    Returns:
        The calibration.
    """
    started = time.perf_counter()
    loops = find_loops(trajectories, base, reading)
    chosen, held = split_runs(trajectories, loops, holdout)
    choose_runs = [trajectories[i] for i in chosen]
    choose_loops = [loops[i] for i in chosen]
    held_runs = [trajectories[i] for i in held]
    held_loops = [loops[i] for i in held]
    evidence = tool_evidence(trajectories, base, reading)
    choose_evidence = tool_evidence(choose_runs, base, reading)
    looping = any(choose_loops)
    progress = on_progress or (lambda _: None)
    deadline = started + budget_seconds
    # `volatile` is a fact the recordings show about a tool (an identical call answered
    # otherwise with nothing written between), not a fit: read from every run. The
    # thresholds are fitted, on the choosing part only.
    volatile = _settings(base, evidence, loops=False)
    start, evaluations, complete = _search(
        trajectories, loops, base, volatile, reading, deadline, progress
    )
    thresholds = _settings(base, choose_evidence, loops=looping, min_tool_runs=min_tool_runs)
    thresholds = [entry for entry in thresholds if entry[0][0] != "volatile"]
    settings = volatile + thresholds
    searched = {setting for setting, _ in settings}
    short = [
        e
        for e in choose_evidence.values()
        if looping
        and e.source != "default"
        and (e.same_results or e.changed_results)
        and ("max_repeats", e.tool) not in searched
    ]
    best, more, complete = _search(
        choose_runs, choose_loops, start, thresholds, reading, deadline, progress
    )
    evaluations += more
    proposed = [
        (setting, _value(best, setting))
        for setting, _ in settings
        if _value(base, setting) != _value(best, setting)
    ]
    # The held-out check: each change alone, then the kept ones together.
    held_base, _ = score(held_runs, held_loops, base, reading)
    choose_base, _ = score(choose_runs, choose_loops, base, reading)
    checks: list[ChangeCheck] = []
    kept: list[tuple[_Setting, Any]] = []
    for setting, value in proposed:
        alone, _ = score(held_runs, held_loops, _with(base, setting, value), reading)
        evaluations += 1
        # A threshold must also gain there; `volatile` (evidence, not a fit) must cost nothing.
        fitted = setting[0] != "volatile"
        holds = _holds(alone, held_base) and (not fitted or alone.rank() > held_base.rank())
        why = "gains on the held-out part, costs nothing there"
        if holds and alone.rank() <= held_base.rank():
            why = "costs nothing on the held-out part (volatile: the recordings show it)"
        if not holds:
            why = _why_not(alone, held_base)
        if not held_runs and holdout == 0:
            holds, why = True, "not checked (--holdout 0)"
        elif not held_runs and fitted:
            why = "no run could be held out (too few runs): unconfirmed"
        checks.append(
            ChangeCheck(_label(setting), _value(base, setting), value, held_base, alone, holds, why)
        )
        if holds:
            kept.append((setting, value))
    while True:
        config = base
        for setting, value in kept:
            config = _with(config, setting, value)
        held_score, _ = score(held_runs, held_loops, config, reading)
        choose_score, _ = score(choose_runs, choose_loops, config, reading)
        evaluations += 2
        if not kept or (_holds(held_score, held_base) and _holds(choose_score, choose_base)):
            break
        dropped = _label(kept.pop()[0])
        for number, check in enumerate(checks):
            if check.setting == dropped:
                checks[number] = replace(
                    check, kept=False, why="holds alone, not with the other changes kept"
                )
    base_score, base_report = score(trajectories, loops, base, reading)
    final_score, final_report = score(trajectories, loops, config, reading)
    evaluations += 2
    return Calibration(
        base=base,
        config=config,
        base_score=base_score,
        score=final_score,
        base_report=base_report,
        report=final_report,
        changes=[(_label(setting), _value(base, setting), value) for setting, value in kept],
        evidence=evidence,
        loop_runs=[
            str(t.get("id", "?")) for t, turns in zip(trajectories, loops, strict=True) if turns
        ],
        evaluations=evaluations,
        seconds=time.perf_counter() - started,
        complete=complete,
        chosen=PartScores(len(choose_runs), choose_base, choose_score),
        held_out=PartScores(len(held_runs), held_base, held_score),
        checks=checks,
        short_evidence=short,
        min_tool_runs=min_tool_runs,
        holdout=holdout,
    )


def _why_not(got: Score, start: Score) -> str:
    """Why a change does not hold on the held-out part, in words."""
    reasons = []
    if got.healthy_stopped > start.healthy_stopped:
        reasons.append(
            f"stops {got.healthy_stopped - start.healthy_stopped} more run(s) without a loop"
        )
    if got.loops_stopped < start.loops_stopped:
        reasons.append(f"stops {start.loops_stopped - got.loops_stopped} fewer loop(s)")
    if got.wrong > start.wrong:
        reasons.append(f"{got.wrong - start.wrong} more wrong block(s)")
    if not reasons:
        # Nothing there it helps (the loops it stops earlier are all on the choosing side):
        # a change no unseen run confirms is fitted to the runs it was chosen on.
        return "no gain on the held-out part: nothing unseen confirms it"
    return "held out, it " + ", ".join(reasons)


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
