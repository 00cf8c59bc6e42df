"""Offline evaluation: replay recorded trajectories through the engine and score its blocks."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from langgraph_replay_guard import json_depth
from langgraph_replay_guard.decisions.engine import (
    CallFacts,
    Verdict,
    call_facts,
    call_failed,
    decide,
    fold_settings,
    make_event,
    stops_on_abort,
)
from langgraph_replay_guard.decisions.failures import failure_signature
from langgraph_replay_guard.decisions.keys import call_key
from langgraph_replay_guard.decisions.state import (
    Outcome,
    fold_events,
    may_have_written,
    new_state,
    state_for_turn,
)
from langgraph_replay_guard.errors import InvalidArgumentsError
from langgraph_replay_guard.policy.config import GuardConfig

__all__ = [
    "DEDUP_REASONS",
    "DEFAULT_ERROR_PATTERN",
    "DEFAULT_LOOP_CALLS",
    "GUARD_FIELD",
    "MISSED_REASONS",
    "UNKNOWN_TOOL_PATTERN",
    "WRONG_PREVIEW_CHARS",
    "Abort",
    "EvalReport",
    "LayerTally",
    "LoopTally",
    "MissedRead",
    "RecordingReading",
    "Tally",
    "WrongBlock",
    "evaluate_file",
    "evaluate_trajectories",
    "find_loops",
    "iter_trajectories",
    "loop_definition",
    "parse_line",
]

DEFAULT_ERROR_PATTERN = r"^\s*(error|exception)\b"
"""A recorded result matching this (case-insensitive) is a failed call, as in tau-bench."""

UNKNOWN_TOOL_PATTERN = r"\bis not a valid tool\b"
"""A recorded result matching this is a call to a tool that does not exist, when the run
lists no tools: LangGraph's `ToolNode` and LangChain's `AgentExecutor` answer such a call with
"<name> is not a valid tool, try one of [...]"."""

DEDUP_REASONS = frozenset({"duplicate", "same_result"})
"""The reasons of dedup blocks: the call is answered with an earlier result instead of running
(`duplicate`: an identical pure read; `same_result`: the short-circuit after the same result
twice in a row). Every other block is a loop stop (`repeat_limit`, `cycle`, `same_failure`,
`unknown_tool`, `stopped`, `stop_ignored`): the call is refused, and the model is told why."""

GUARD_FIELD = "guard"
"""Key of a recorded call that a guard answered itself (`replay-guard export` of a guarded
thread writes the guard's reason there): the tool did not run, so its result is the guard's
message, not the tool's. Such calls are not scored; `Tally.guard_answered` counts them."""

WRONG_PREVIEW_CHARS = 200
"""How much of each result (and of the arguments) a `WrongBlock` keeps."""


@dataclass
class LayerTally:
    """The blocks of one layer of the guard (dedup, or loop stops).

    Attributes:
        blocked: Blocked calls.
        redundant: Those whose block lost nothing (see `Tally.redundant`).
        wrong: Those whose block would have hidden new information (see `Tally.wrong`).
    """

    blocked: int = 0
    redundant: int = 0
    wrong: int = 0

    def count(self, *, redundant: bool, wrong: bool) -> None:
        """Count one block."""
        self.blocked += 1
        self.redundant += redundant
        self.wrong += wrong


@dataclass
class Tally:
    """Counts for one model, one tool, or the total.

    Attributes:
        trajectories: Trajectories evaluated.
        calls: Recorded tool calls.
        repeats: Calls with an identical earlier call (same tool and canonical arguments).
        identical_repeats: Repeats whose recorded result equals the previous identical call's.
        repeat_kinds: Identical repeats by kind, each `[total, caught]`:
            `redundant_read` (a `pure`, non-volatile read in the guard's scope with no
            world-changing call since, failed ones included: what the rules can know is
            redundant), `volatile_read` (also a read after a call that started background
            work), `side_effect` (a non-`pure` tool, never deduplicated),
            `after_world_change` (a re-check after a write: allowed by design),
            `new_turn` (the previous one was in an earlier user turn, `scope="turn"`),
            `unknown_tool` (a call to a tool that does not exist, again).
            Also `same_failure`: calls with other arguments whose recorded result is the
            failure the tool's previous call returned (normalized), not identical repeats.
        blocked: Calls the guard would not have executed (denied, short-circuited, aborted).
        redundant: Blocked calls whose recorded result equals the previous identical
            call's, or is the tool's previous failure again: the block lost nothing.
        wrong: Blocked calls whose recorded result differed (or had no earlier identical
            call): the block would have hidden new information.
        aborts: Runs the guard would have stopped.
        cut: Calls after an abort, in the same turn, that would never have been made.
        cut_identical_repeats: Cut calls that were identical repeats.
        cycles: Cycles detected.
        unknown_tools: Calls to a tool that does not exist (a hallucinated name). The guard
            answers every one of them; such a block is neither redundant nor wrong unless it
            repeats an identical call (nothing could have run).
        by_reason: Blocked calls by decision reason.
        dedup: The dedup blocks (a reason in `DEDUP_REASONS`: the call answered with an
            earlier result); its `wrong` is what dedup would have hidden.
        stops: The loop stops (every other reason: `repeat_limit`, `cycle`,
            `same_failure`, `unknown_tool`, `stopped`...). `dedup.blocked + stops.blocked ==
            blocked`, and the same for `redundant` and `wrong`.
        wrong_by_reason: Wrong blocks by decision reason.
        guard_answered: Recorded calls a guard answered itself (`GUARD_FIELD`, in an export
            of a guarded thread): left out of every other count, since the tool never gave
            a result for them; what the model would have got without that guard is unknown.
        guard_answered_by_reason: Those calls by the recording guard's reason.
    """

    trajectories: int = 0
    calls: int = 0
    repeats: int = 0
    identical_repeats: int = 0
    blocked: int = 0
    redundant: int = 0
    wrong: int = 0
    aborts: int = 0
    cut: int = 0
    cut_identical_repeats: int = 0
    cycles: int = 0
    unknown_tools: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)
    repeat_kinds: dict[str, list[int]] = field(default_factory=dict)
    dedup: LayerTally = field(default_factory=LayerTally)
    stops: LayerTally = field(default_factory=LayerTally)
    wrong_by_reason: dict[str, int] = field(default_factory=dict)
    guard_answered: int = 0
    guard_answered_by_reason: dict[str, int] = field(default_factory=dict)

    @property
    def caught(self) -> int:
        """Identical repeats the guard blocked or that an abort made unnecessary."""
        return sum(caught for kind, (_, caught) in self.repeat_kinds.items() if kind != _SAME_KIND)

    def catch_rate(self) -> float | None:
        """Share of identical repeats caught, or None when there were none."""
        return self.caught / self.identical_repeats if self.identical_repeats else None

    def kind_rate(self, kind: str = "redundant_read") -> float | None:
        """Share of one kind of identical repeats caught, or None when there were none."""
        total, caught = self.repeat_kinds.get(kind, [0, 0])
        return caught / total if total else None

    def wrong_rate(self) -> float | None:
        """Share of blocked calls that were wrong blocks, or None when nothing was blocked."""
        return self.wrong / self.blocked if self.blocked else None

    def dedup_wrong_rate(self) -> float | None:
        """Share of dedup blocks that were wrong, or None when dedup blocked nothing."""
        return self.dedup.wrong / self.dedup.blocked if self.dedup.blocked else None


@dataclass
class LoopTally:
    """Runs read with the loop definition (`find_loops`), and what the guard did in them.

    Attributes:
        loop_calls: How many times made a loop.
        runs: Runs whose recording has a loop.
        stopped: Those the guard stops (an abort) in a turn that loops.
        healthy_stopped: Runs without a loop that the guard stops (an abort) or where it
            makes a loop stop (any block but a dedup answer or the answer to a call to a
            tool that does not exist).
        healthy_stopped_runs: Those runs' ids, in the order met.
    """

    loop_calls: int = 4
    runs: int = 0
    stopped: int = 0
    healthy_stopped: int = 0
    healthy_stopped_runs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Abort:
    """Where the guard would have stopped a run."""

    trajectory: str
    model: str
    call_index: int
    tool: str
    reason: str


@dataclass(frozen=True)
class WrongBlock:
    """A wrong block: a call the guard would have blocked although its real result was new.

    Attributes:
        trajectory: The run's id.
        model: The run's model.
        call_index: The call's position in the run (0 for the first).
        tool: Tool name.
        reason: The decision's reason (`duplicate`, `repeat_limit`...).
        layer: `"dedup"` (a reason in `DEDUP_REASONS`) or `"stop"`.
        args: The call's arguments as JSON, cut to `WRONG_PREVIEW_CHARS`.
        earlier_index: The position of the earlier call whose result the block is judged
            against: the previous identical call, else the tool's previous call (a
            same-failure stop), else None.
        earlier_result: That call's recorded result (after `normalize`), cut.
        result: The blocked call's real recorded result (after `normalize`), cut.
    """

    trajectory: str
    model: str
    call_index: int
    tool: str
    reason: str
    layer: str
    args: str
    earlier_index: int | None
    earlier_result: str | None
    result: str


MISSED_REASONS = {
    "window": "the earlier identical call ran more executed calls back than history_window",
    "epoch": "a call the guard counts as a change (a non-pure call, failed or not) ran since",
    "earlier_failed": "the earlier identical call failed (by the error pattern): a retry runs",
    "earlier_blocked": "the earlier identical call was blocked, so no result of it is known",
    "volatile": "the call is classed volatile (its result may change on its own): always runs",
    "background": "a call that started background work ran before it: reads always run after",
    "dedup_off": "dedup is off in the configuration",
}
"""Why the guard let a redundant (or volatile) read run: `MissedRead.reason` codes."""


@dataclass(frozen=True)
class MissedRead:
    """An identical read the guard let run although it returned the same result again.

    Attributes:
        trajectory: The run's id.
        model: The run's model.
        call_index: The call's position in the run (0 for the first).
        tool: Tool name.
        kind: `"redundant_read"` (blockable: a pure read, nothing written since) or
            `"volatile_read"` (the same, but classed volatile).
        reason: Why the guard let it run: a key of `MISSED_REASONS`.
        detail: The reason in words, naming the calls it depends on.
        args: The call's arguments as JSON, cut to `WRONG_PREVIEW_CHARS`.
        earlier_index: The position of the previous identical call.
        result: The (repeated) recorded result, after `normalize`, cut.
    """

    trajectory: str
    model: str
    call_index: int
    tool: str
    kind: str
    reason: str
    detail: str
    args: str
    earlier_index: int
    result: str


@dataclass
class EvalReport:
    """Result of `replay-guard eval`.

    `by_class` and `by_tool_class` count each call under the class it got: the policy's
    class, or for a tool classified per call (a shell, an editor) the class its rules gave
    that call (`"pure"`, `"pure volatile"`, `"idempotent"`, `"unsafe"`).
    """

    total: Tally = field(default_factory=Tally)
    by_model: dict[str, Tally] = field(default_factory=dict)
    by_tool: dict[str, Tally] = field(default_factory=dict)
    by_class: dict[str, Tally] = field(default_factory=dict)
    by_tool_class: dict[str, dict[str, Tally]] = field(default_factory=dict)
    aborts: list[Abort] = field(default_factory=list)
    malformed: list[tuple[int, str]] = field(default_factory=list)
    wrong_blocks: list[WrongBlock] = field(default_factory=list)
    """Every wrong block, in the order met (`--show-wrong N` prints the first N)."""
    missed_reads: list[MissedRead] = field(default_factory=list)
    """Every redundant or volatile read the guard let run, in the order met, with the
    reason (`--show-missed N` prints the first N)."""
    loops: LoopTally | None = None
    """The runs with a loop and the runs without one stopped, when counted (`loop_calls`)."""

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON data (`--json`)."""

        def tally(t: Tally) -> dict[str, Any]:
            data = asdict(t)
            data["caught"] = t.caught
            data["catch_rate"] = t.catch_rate()
            data["redundant_read_catch_rate"] = t.kind_rate("redundant_read")
            data["wrong_rate"] = t.wrong_rate()
            data["dedup_wrong_rate"] = t.dedup_wrong_rate()
            return data

        return {
            "total": tally(self.total),
            "by_model": {m: tally(t) for m, t in sorted(self.by_model.items())},
            "by_tool": {m: tally(t) for m, t in sorted(self.by_tool.items())},
            "by_class": {m: tally(t) for m, t in sorted(self.by_class.items())},
            "by_tool_class": {
                tool: {c: tally(t) for c, t in sorted(classes.items())}
                for tool, classes in sorted(self.by_tool_class.items())
            },
            "aborts": [asdict(a) for a in self.aborts],
            "malformed": [{"line": n, "error": e} for n, e in self.malformed],
            "dedup_reasons": sorted(DEDUP_REASONS),
            "wrong_blocks": [asdict(w) for w in self.wrong_blocks],
            "missed_reads": [asdict(m) for m in self.missed_reads],
            "loops": asdict(self.loops) if self.loops is not None else None,
        }


_SAME_KIND = "same_failure"
"""The repeat kind of a retry with other arguments that failed as the tool's previous call."""

Trajectory = dict[str, Any]


def iter_trajectories(
    lines: Iterable[str | bytes], malformed: list[tuple[int, str]]
) -> Iterator[Trajectory]:
    """Parse trajectories from JSON lines, one at a time.

    A malformed line is appended to `malformed` as `(line number, problem)` and skipped.

    Args:
        lines: Lines of a JSONL file, as text or as UTF-8 bytes.
        malformed: Receives the problems found.

    Yields:
        Trajectories with `id`, `model` and a list of `calls`.
    """
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        data, problem = parse_line(line)
        if problem is None:
            problem = _trajectory_problem(data)
        if problem:
            malformed.append((number, problem))
            continue
        yield data


def parse_line(line: str | bytes) -> tuple[Any, str | None]:
    """Decode one JSON line.

    Args:
        line: The line, as text or as UTF-8 bytes.

    Returns:
        `(data, None)`, or `(None, problem)` when the line is not UTF-8 text or not JSON;
        the problem reads after "the line is", e.g. "not JSON (Expecting value at column 1)".
    """
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            return None, f"not UTF-8 text (byte 0x{line[exc.start]:02x} at column {exc.start + 1})"
    try:
        return json_depth.loads(line), None
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({json_depth.describe_error(exc)})"
    except json_depth.JSONNestingError as exc:
        return None, f"not a trajectory ({exc})"


def _trajectory_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return f"expected a JSON object, got {type(data).__name__}"
    calls = data.get("calls")
    if not isinstance(calls, list):
        return "missing 'calls' list"
    for index, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return f"call {index} has no tool 'name'"
        if "args" in call and not isinstance(call["args"], dict):
            return f"call {index} ('{call['name']}') has 'args' that is not an object"
        if call.get(GUARD_FIELD) is not None and not isinstance(call[GUARD_FIELD], str):
            return f"call {index} ('{call['name']}') has '{GUARD_FIELD}' that is not a reason text"
    tools = data.get("tools")
    if tools is not None and (
        not isinstance(tools, list) or not all(isinstance(t, str) for t in tools)
    ):
        return "'tools' is not a list of tool names"
    return None


def evaluate_trajectories(
    trajectories: Iterable[Trajectory],
    config: GuardConfig,
    *,
    error_pattern: str = DEFAULT_ERROR_PATTERN,
    normalize: Iterable[str] = (),
    report: EvalReport | None = None,
    on_progress: Callable[[int], None] | None = None,
    tools: Collection[str] | None = None,
    loop_calls: int | None = None,
    loops: Sequence[frozenset[Any]] | None = None,
) -> EvalReport:
    """Replay recorded trajectories through the engine and score what it would block.

    Each call is decided against the state the guard would have had: executed calls are
    recorded with their recorded result, blocked calls as denied (their recorded result is
    never fed back). After an abort (`exit_behavior` "end" or "error") the rest of that turn is
    cut, since the run would have ended; the next user turn goes on.

    A call a guard answered itself when it was recorded (`GUARD_FIELD`, from `replay-guard
    export` of a guarded thread) is skipped and counted in `Tally.guard_answered`: its result
    is that guard's refusal, and scoring it would count the guard's own answers as results
    the evaluated guard hid.

    Calls to tools that do not exist: a trajectory's own `"tools"` list (the names its agent
    had) says which names exist, else `tools`; with neither, a call whose recorded result
    matches `UNKNOWN_TOOL_PATTERN` ("is not a valid tool") is one.

    Args:
        trajectories: Parsed trajectories.
        config: Guard configuration to evaluate.
        error_pattern: Regular expression (case-insensitive) marking failed results.
        normalize: Regular expressions whose matches are removed from results before they
            are compared (volatile noise such as timestamps). Empty by default.
        report: A report to add to (for several files).
        on_progress: Called with the number of trajectories done so far.
        tools: The names of the tools the recorded agents had, for trajectories that do not
            list theirs.
        loop_calls: Count the runs with a loop (`find_loops`, this many times) and the runs
            without one stopped, in `EvalReport.loops`. None: not counted.
        loops: The `find_loops` of the same trajectories, already read (calibration reads
            them once for every configuration it tries); counted as with `loop_calls`.

    Returns:
        The report.
    """
    report = report or EvalReport()
    normalize = tuple(normalize)
    failed = re.compile(error_pattern, re.IGNORECASE)
    cleaners = [re.compile(p) for p in normalize]
    known = frozenset(tools) if tools is not None else None
    reading: RecordingReading | None = None
    if loop_calls is not None or loops is not None:
        size = loop_calls if loop_calls is not None else DEFAULT_LOOP_CALLS
        reading = RecordingReading(size, error_pattern, normalize, known)
        report.loops = report.loops or LoopTally(loop_calls=size)
    for done, trajectory in enumerate(trajectories, start=1):
        listed = trajectory.get("tools")
        names = frozenset(listed) if isinstance(listed, list) else known
        mark = _stop_mark(report)
        _evaluate_one(trajectory, config, failed, cleaners, report, names)
        if reading is not None:
            turns = loops[done - 1] if loops is not None else None
            if turns is None:
                turns = find_loops([trajectory], config, reading)[0]
            _count_loops(report, trajectory, turns, mark)
        if on_progress is not None:
            on_progress(done)
    return report


def _stop_mark(report: EvalReport) -> tuple[int, int, int]:
    """Where the report's aborts, loop stops and unknown-tool answers stand before a run."""
    total = report.total
    return len(report.aborts), total.stops.blocked, total.by_reason.get("unknown_tool", 0)


def _count_loops(
    report: EvalReport,
    trajectory: Trajectory,
    turns: frozenset[Any],
    mark: tuple[int, int, int],
) -> None:
    """Score one run's stops against its loops (what it added to the report since `mark`)."""
    tally = report.loops
    if tally is None:
        return  # loops are not counted
    aborts, stops, answered = mark
    new_aborts = report.aborts[aborts:]
    now = _stop_mark(report)
    # A call to a tool that does not exist is answered whatever the run: not a stop.
    new_stops = (now[1] - stops) - (now[2] - answered)
    if not turns:
        if new_aborts or new_stops > 0:
            tally.healthy_stopped += 1
            tally.healthy_stopped_runs.append(str(trajectory.get("id", "?")))
        return
    tally.runs += 1
    calls = trajectory["calls"]
    stopped = {calls[a.call_index].get("turn", 0) for a in new_aborts}
    tally.stopped += bool(stopped & turns)


def _evaluate_one(
    trajectory: Trajectory,
    config: GuardConfig,
    failed: re.Pattern[str],
    cleaners: list[re.Pattern[str]],
    report: EvalReport,
    tools: frozenset[str] | None = None,
) -> None:
    model = str(trajectory.get("model", "unknown"))
    ident = str(trajectory.get("id", "?"))
    tally = report.by_model.setdefault(model, Tally())
    tally.trajectories += 1
    report.total.trajectories += 1
    state = new_state()
    settings = fold_settings(config)
    # Per call key: recorded result, turn, recorded world epoch and index of the last identical
    # call; per tool: the index and recorded result of its last call.
    last: dict[str, tuple[str, Any, int, int]] = {}
    last_of_tool: dict[str, tuple[int, str]] = {}
    world_epoch = 0  # non-pure calls that ran in the recording so far (`may_have_written`)
    # Per tool: the failure signature of its last recorded call, when that call failed.
    last_failure: dict[str, str] = {}
    cut_turn: Any = None
    cutting = False
    # For `MissedRead`: per key, the index of its last executed call and how many calls had
    # run before it; and the executed calls that started a guard epoch (index, class).
    ran = 0
    last_run: dict[str, tuple[int, int]] = {}
    epoch_starts: list[tuple[int, str, str]] = []
    for index, call in enumerate(trajectory["calls"]):
        name = call["name"]
        answered_by = call.get(GUARD_FIELD)
        if answered_by:
            # Not a result of the tool: the recording's guard refused or answered the call.
            for t in (tally, report.total, report.by_tool.setdefault(name, Tally())):
                t.guard_answered += 1
                t.guard_answered_by_reason[answered_by] = (
                    t.guard_answered_by_reason.get(answered_by, 0) + 1
                )
            continue
        turn = call.get("turn", 0)
        text = str(call.get("result", ""))
        for cleaner in cleaners:
            text = cleaner.sub("", text)
        try:
            facts = call_facts(config, name, call.get("args", {}), tools=_tools_for(tools, text))
            stats_key = _stats_key(facts)
        except InvalidArgumentsError as exc:
            report.malformed.append((0, f"{ident} call {index}: {exc}"))
            continue
        # The class this very call got: a tool classified per call has several; a tool that
        # does not exist has none.
        if facts.unknown:
            call_class = "unknown"
        else:
            call_class = facts.replay + (" volatile" if facts.volatile else "")
        tallies = (
            tally,
            report.total,
            report.by_tool.setdefault(name, Tally()),
            report.by_class.setdefault(call_class, Tally()),
            report.by_tool_class.setdefault(name, {}).setdefault(call_class, Tally()),
        )
        succeeded = not failed.search(text)
        outcome: Outcome = "success" if succeeded else "failure"
        previous = last.get(stats_key)
        kind = _repeat_kind(previous, text, turn, world_epoch, facts, config)
        if kind == "redundant_read" and state_for_turn(state, str(turn), config.scope).get(
            "background"
        ):
            kind = "volatile_read"  # a job may be writing: the guard cannot know it is not
        last[stats_key] = (text, turn, world_epoch, index)
        # The call a block is judged against: the previous identical one, else the tool's last.
        earlier = (previous[3], previous[0]) if previous is not None else last_of_tool.get(name)
        last_of_tool[name] = (index, text)
        # A tool that does not exist never runs, so it has no failure of its own to repeat.
        failure = call_failed(facts, outcome, text)
        error = text if failure and not facts.unknown else None
        failed_again = _failed_again(last_failure, name, error, call)
        if kind is None and failed_again:
            kind = _SAME_KIND  # not an identical repeat: a retry that failed the same way
        if may_have_written(facts.replay, outcome):
            world_epoch += 1  # as the guard's epoch: a failed write may have written too
        for t in tallies:
            t.calls += 1
            t.unknown_tools += facts.unknown
            t.repeats += previous is not None
            if kind is not None:
                t.identical_repeats += kind != _SAME_KIND
                t.repeat_kinds.setdefault(kind, [0, 0])[0] += 1
        if cutting and turn == cut_turn:
            for t in tallies:
                t.cut += 1
                if kind is not None:
                    t.cut_identical_repeats += kind != _SAME_KIND
                    t.repeat_kinds[kind][1] += 1
            continue
        cutting = False
        decision = decide(state, facts, config, turn=str(turn))
        if decision.executes and kind in _READ_KINDS and previous is not None:
            reason, detail = _missed_reason(
                state, facts, config, kind, previous[3], last_run.get(facts.key), ran, epoch_starts
            )
            report.missed_reads.append(
                MissedRead(
                    trajectory=ident,
                    model=model,
                    call_index=index,
                    tool=name,
                    kind=kind,
                    reason=reason,
                    detail=detail,
                    args=_cut(_args_json(call)),
                    earlier_index=previous[3],
                    result=_cut(text),
                )
            )
        if decision.executes:
            last_run[facts.key] = (index, ran)
            ran += 1
            if may_have_written(facts.replay, outcome):
                epoch_starts.append((index, f"{name} {_args_json(call)}", facts.replay))
            event = make_event(
                facts,
                outcome,
                result=text,
                turn=str(turn),
            )
        else:
            aborts = decision.verdict is Verdict.ABORT
            reason = decision.reason or "denied"
            dedup = reason in DEDUP_REASONS
            # A tool that does not exist hid nothing: neither redundant nor wrong.
            wrong = kind is None and not facts.unknown
            for t in tallies:
                t.blocked += 1
                if kind is not None:
                    t.redundant += 1
                    t.repeat_kinds[kind][1] += 1
                elif wrong:
                    t.wrong += 1
                    t.wrong_by_reason[reason] = t.wrong_by_reason.get(reason, 0) + 1
                t.by_reason[reason] = t.by_reason.get(reason, 0) + 1
                (t.dedup if dedup else t.stops).count(redundant=kind is not None, wrong=wrong)
            if wrong:
                report.wrong_blocks.append(
                    _wrong_block(ident, model, index, call, reason, dedup, earlier, text)
                )
            event = make_event(facts, "denied", reason=reason, abort=aborts, turn=str(turn))
            if aborts and stops_on_abort(config):
                cutting, cut_turn = True, turn
                for t in tallies:
                    t.aborts += 1
                report.aborts.append(Abort(ident, model, index, name, reason))
        had_cycle = state["cycle"] is not None
        fold_events(state, [event], settings)
        if state["cycle"] is not None and not had_cycle:
            for t in tallies:
                t.cycles += 1


_READ_KINDS = frozenset({"redundant_read", "volatile_read"})


def _missed_reason(
    state: Mapping[str, Any],
    facts: CallFacts,
    config: GuardConfig,
    kind: str,
    earlier: int,
    run: tuple[int, int] | None,
    ran: int,
    epoch_starts: list[tuple[int, str, str]],
) -> tuple[str, str]:
    """Why the guard let a repeated read run: a `MISSED_REASONS` code and its details.

    Read from the guard's state just before its decision, as the dedup layer reads it.
    """
    if kind == "volatile_read" and not facts.volatile:
        return "background", "a call that started background work ran earlier in the thread"
    if kind == "volatile_read":
        return "volatile", f"'{facts.tool}' gave this call a volatile class: it always runs"
    if not config.dedup:
        return "dedup_off", "GuardConfig.dedup is False"
    entry = next((e for e in reversed(state["recent_calls"]) if e[0] == facts.key), None)
    if entry is None:
        if run is None:
            return "earlier_blocked", f"call {earlier} was blocked: no result of it is known"
        back = ran - run[1]
        return (
            "window",
            f"call {run[0]} ran {back} executed calls back; history_window="
            f"{config.history_window} looks back over the last {config.history_window}",
        )
    if entry[2] != "success":
        return "earlier_failed", f"call {earlier} failed (error pattern): a retry is allowed"
    since = [start for start in epoch_starts if start[0] > earlier]
    if since:
        index, what, replay = since[0]
        return "epoch", f"call {index} ({replay}) started a new epoch: {_cut(what, 80)}"
    return "epoch", "a new epoch started since"


def _args_json(call: Mapping[str, Any]) -> str:
    try:
        return json.dumps(call.get("args", {}), ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return repr(call.get("args", {}))


def _wrong_block(
    ident: str,
    model: str,
    index: int,
    call: Mapping[str, Any],
    reason: str,
    dedup: bool,
    earlier: tuple[int, str] | None,
    text: str,
) -> WrongBlock:
    """A wrong block's entry, with short previews of its arguments and results."""
    args = _args_json(call)
    return WrongBlock(
        trajectory=ident,
        model=model,
        call_index=index,
        tool=call["name"],
        reason=reason,
        layer="dedup" if dedup else "stop",
        args=_cut(args),
        earlier_index=earlier[0] if earlier is not None else None,
        earlier_result=_cut(earlier[1]) if earlier is not None else None,
        result=_cut(text),
    )


def _cut(text: str, most: int = WRONG_PREVIEW_CHARS) -> str:
    """`text` up to `most` characters, ending with "..." when it was cut."""
    return text if len(text) <= most else text[: most - 3] + "..."


def _failed_again(
    last_failure: dict[str, str], tool: str, error: str | None, call: Mapping[str, Any]
) -> bool:
    """Whether a recorded call failed as the tool's previous recorded call did (normalized).

    Updates `last_failure`: the tool's failure signature, or nothing after a success.
    """
    if error is None:
        last_failure.pop(tool, None)
        return False
    signature = failure_signature(error, call.get("args", {}))
    again = last_failure.get(tool) == signature
    last_failure[tool] = signature
    return again


def _repeat_kind(
    previous: tuple[str, Any, int, int] | None,
    text: str,
    turn: Any,
    world_epoch: int,
    facts: CallFacts,
    config: GuardConfig,
) -> str | None:
    """Classify an identical repeat by what the guard can know about it, or None."""
    if previous is None or previous[0] != text:
        return None
    if config.scope == "turn" and previous[1] != turn:
        return "new_turn"
    if facts.unknown:
        return "unknown_tool"
    if facts.replay != "pure":
        return "side_effect"
    if previous[2] != world_epoch:
        return "after_world_change"
    if facts.volatile:
        return "volatile_read"
    return "redundant_read"


_UNKNOWN_RESULT = re.compile(UNKNOWN_TOOL_PATTERN, re.IGNORECASE)


def _tools_for(tools: frozenset[str] | None, text: str) -> frozenset[str] | None:
    """The tool names a call is decided with: the run's, or none for a recorded refusal."""
    if tools is not None:
        return tools
    return frozenset() if _UNKNOWN_RESULT.search(text) else None


def _stats_key(facts: CallFacts) -> str:
    """The key repeats are counted by: every unknown tool shares one key in the guard."""
    if not facts.unknown:
        return facts.key
    return "unknown:" + call_key(facts.tool, facts.args)


def evaluate_file(
    path: str | Path | Iterable[str | bytes],
    config: GuardConfig,
    *,
    error_pattern: str = DEFAULT_ERROR_PATTERN,
    normalize: Iterable[str] = (),
    on_progress: Callable[[int], None] | None = None,
    tools: Collection[str] | None = None,
) -> EvalReport:
    """Evaluate a JSONL file of trajectories, streaming it line by line.

    Args:
        path: A file path, or the file's lines (an open text or binary file).
        config: Guard configuration to evaluate.
        error_pattern: Regular expression (case-insensitive) marking failed results.
        normalize: Regular expressions removed from results before comparing them.
        on_progress: Called with the number of trajectories done so far.
        tools: The tool names the recorded agents had (see `evaluate_trajectories`).

    Returns:
        The report; malformed lines (not UTF-8, not JSON, not a trajectory) are listed in
        it, not raised.
    """
    report = EvalReport()
    if isinstance(path, str | Path):
        # Bytes, decoded line by line: a stray non-UTF-8 line is one malformed line.
        with open(path, "rb") as handle:
            return evaluate_file(
                handle,
                config,
                error_pattern=error_pattern,
                normalize=normalize,
                on_progress=on_progress,
                tools=tools,
            )
    trajectories = iter_trajectories(path, report.malformed)
    return evaluate_trajectories(
        trajectories,
        config,
        error_pattern=error_pattern,
        normalize=normalize,
        report=report,
        on_progress=on_progress,
        tools=tools,
    )


DEFAULT_LOOP_CALLS = 4
"""How many times a run must do the same thing in one user turn for the recording to count as a
loop (`find_loops`): the 4th identical attempt is where the default `max_repeats=3` stops."""


def loop_definition(loop_calls: int = DEFAULT_LOOP_CALLS) -> str:
    """The loop definition `find_loops` implements, in words (quoted by `eval` and the docs).

    Args:
        loop_calls: How many times makes a loop.

    Returns:
        One sentence.
    """
    return (
        f"the same call (same tool, same arguments as the guard keys them) returning the same "
        f"result {loop_calls} times in a row in one user turn, whatever the tool's class, with "
        f"no other world-changing call (failed ones included) in between; or a cycle of 2 to "
        f"max_cycle_period calls going round {loop_calls} times with the same results; or one "
        f"tool failing the same way (its error, or its own failure pattern) {loop_calls} times "
        f"in a row, never succeeding after in that turn"
    )


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

    def outcome(self, text: str) -> Outcome:
        """The outcome the guard records for a call with this result (`error_pattern`)."""
        return "failure" if self.failed(text) else "success"

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
    trajectories: Iterable[Trajectory],
    config: GuardConfig,
    reading: RecordingReading = RecordingReading(),
) -> list[frozenset[Any]]:
    """Which user turns of each recorded run loop, read from the recording alone.

    This is the project's one loop definition (`loop_definition` words it; `eval`,
    calibration and the docs use it). A turn loops when, in it, the run

    - makes the same call (same tool, same arguments as the guard keys them) and gets the
      same result (after `normalize`) `loop_calls` times in a row, **whatever the tool's
      class**: each time the previous identical call's result again, with no other
      world-changing call in between (a non-`pure` call other than this one, failed or not:
      a failed write may have written part of its effect, `may_have_written`), since that
      may change the answer. An identical successful `unsafe` call repeated
      (`transfer_to_human_agents` 100 times) is a loop: its own earlier runs changed
      nothing it could see. Other calls may come in between (an A-B-A-B cycle of reads
      loops on A); or
    - goes round a cycle of 2 to `max_cycle_period` calls (not all the same call)
      `loop_calls` times in a row with the same results each round, writes included (write
      the same script, run it, the same traceback: the cycle's own writes change nothing
      it sees); or
    - gets the same failure (decided as the guard decides it, `call_failed`: the result
      matches `error_pattern`, or the tool's own `failure_pattern`; normalized as the
      same-failure layer does: numbers, ids and echoed arguments ignored) from one tool
      `loop_calls` times in a row, whatever the arguments (a success of that tool or a
      successful world-changing call starts the row again, as in the guard), and that tool
      does not succeed later in the turn: a run that got out of its failures by itself
      does not loop, so stopping it is a stop in a run without a loop.

    The guard's thresholds play no part, only its call keys (`ignore_args`, per-call
    classification), replay classes, failure patterns and `max_cycle_period` of `config`
    (calibration reads the loops once, with its base configuration): the same runs loop
    whatever thresholds are tried.

    Args:
        trajectories: Parsed trajectories.
        config: The configuration whose tool policies give the keys and classes.
        reading: What a failure and a loop are, what results ignore, which tools existed.

    Returns:
        For each trajectory, in order, the set of its looping turns (empty: no loop).
    """
    found: list[frozenset[Any]] = []
    rounds = reading.loop_calls
    periods = range(2, config.max_cycle_period + 1)
    for trajectory in trajectories:
        # Per turn, what loops in it: ("same", key), ("cycle", keys) or ("failure", tool).
        looping: dict[Any, set[tuple[str, Any]]] = {}
        # Per (turn, key): result, the world epoch right after that call, streak.
        same: dict[tuple[Any, str], tuple[str, int, int]] = {}
        failing: dict[tuple[Any, str], tuple[str, int, int]] = {}  # tool: signature, progress, n
        tails: dict[Any, list[tuple[str, str]]] = {}  # per turn: its last calls, (key, result)
        epoch = 0  # calls that may have written (`may_have_written`)
        progress = 0  # successful world-changing calls: only they end another tool's row
        for _, call, text, facts in reading.calls(trajectory, config):
            name, turn = call["name"], call.get("turn", 0)
            outcome = reading.outcome(text)
            failed = call_failed(facts, outcome, text)
            key = (turn, facts.key)
            previous = same.get(key)
            streak = 1
            # The epoch is compared with the one right after the previous identical call,
            # its own write included: only another call's write can change this answer.
            if previous is not None and previous[0] == text and previous[1] == epoch:
                streak = previous[2] + 1
            if streak >= rounds:
                looping.setdefault(turn, set()).add(("same", facts.key))
            tail = tails.setdefault(turn, [])
            tail.append((facts.key, text))
            del tail[: -config.max_cycle_period * rounds]
            cycle = _cycle(tail, periods, rounds)
            if cycle is not None:
                looping.setdefault(turn, set()).add(("cycle", cycle))
            if not failed:
                failing.pop((turn, name), None)
                # The tool succeeded after its failures: the run got out by itself.
                looping.get(turn, set()).discard(("failure", name))
            else:
                signature = failure_signature(text, call.get("args", {}))
                earlier = failing.get((turn, name))
                row = 1
                if earlier is not None and earlier[0] == signature and earlier[1] == progress:
                    row = earlier[2] + 1
                failing[(turn, name)] = (signature, progress, row)
                if row >= rounds:
                    looping.setdefault(turn, set()).add(("failure", name))
            if may_have_written(facts.replay, outcome):
                epoch += 1
                progress += not failed and outcome == "success"
            same[key] = (text, epoch, streak)
        found.append(frozenset(turn for turn, why in looping.items() if why))
    return found


def _cycle(
    tail: Sequence[tuple[str, str]], periods: Iterable[int], rounds: int
) -> tuple[str, ...] | None:
    """The keys of a cycle the tail ends with, gone round `rounds` times, or None."""
    last = tail[-1]
    for period in periods:
        size = period * rounds
        if len(tail) < size:
            break
        if tail[-1 - period] != last:
            continue  # cheap test before comparing whole rounds
        block = tail[-period:]
        if len({key for key, _ in block}) == 1:
            continue  # a plain repeat: the same-call rule's
        if all(tail[-size + i] == block[i % period] for i in range(size)):
            return tuple(key for key, _ in block)
    return None
