"""`replay-guard eval`: score a guard configuration on recorded trajectories."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn, TextIO

from pydantic import ValidationError

from langgraph_replay_guard import json_depth
from langgraph_replay_guard.calibration import (
    DEFAULT_BUDGET_SECONDS,
    DEFAULT_HOLDOUT,
    GLOBAL_CANDIDATES,
    LOOP_THRESHOLDS,
    MIN_TOOL_EVIDENCE_RUNS,
    Calibration,
    Score,
    ToolEvidence,
    calibrate,
    config_data,
)
from langgraph_replay_guard.evaluation import (
    DEDUP_REASONS,
    DEFAULT_ERROR_PATTERN,
    DEFAULT_LOOP_CALLS,
    MISSED_REASONS,
    EvalReport,
    MissedRead,
    RecordingReading,
    Tally,
    Trajectory,
    WrongBlock,
    evaluate_trajectories,
    iter_trajectories,
    loop_definition,
    parse_line,
)
from langgraph_replay_guard.policy.config import GuardConfig
from langgraph_replay_guard.policy.toolkit_data import known_toolkits

__all__ = [
    "DESCRIPTION",
    "add_arguments",
    "load_config",
    "print_calibration",
    "print_report",
    "run",
]

_PROGRESS_BYTES = 1_000_000  # show progress for inputs larger than this, on a terminal

_HINT = "expected one JSON trajectory per line, see --help"

_CLASS_ORDER = {
    "pure": 0,
    "pure volatile": 1,
    "idempotent": 2,
    "idempotent volatile": 3,
    "unsafe": 4,
    "unsafe volatile": 5,
}

_LEGEND = (
    ("runs", "recorded runs (trajectories)"),
    ("calls", "recorded tool calls"),
    ("blocked", "calls the guard would not have executed (denied, short-circuited or aborted)"),
    (
        "redundant",
        "blocked calls whose recorded result equals the earlier identical call's, or is the "
        "tool's previous failure again (same_failure)",
    ),
    ("wrong", "blocked calls whose recorded result was new: the block would have hidden it"),
    ("aborts", "runs the guard would have stopped"),
    ("cut", "calls after an abort, in the same user turn: the run would never have made them"),
    ("cycles", "A-B-A-B loops with identical results detected"),
)
"""One line per column of the tables (`print_report` prints it under the first table)."""

_MODEL_WIDTH = 40  # a longer model name goes on a line of its own above its numbers
_TOOL_WIDTH = 28

_KIND_HELP = {
    "redundant_read": "a pure read, same turn, nothing written since: blockable",
    "volatile_read": "a volatile read (never deduplicated)",
    "side_effect": "a tool with side effects: counted, never deduplicated",
    "after_world_change": "a re-check after a successful write: allowed by design",
    "new_turn": 'asked again in a new user turn: allowed with scope="turn"',
    "unknown_tool": "a tool that does not exist, called again: answered, then stopped",
}


DESCRIPTION = (
    "Replay recorded agent trajectories (JSON lines) through the guard, offline, and "
    "report what it would have blocked, whether each block was redundant (the "
    "recorded result was identical to the earlier identical call) or wrong, and "
    "where it would have aborted. Use it to tune a configuration before deploying. "
    "A call a guard answered itself when it was recorded (marked 'guard' by "
    "`replay-guard export`) is not scored; the report counts it."
)
"""What `replay-guard eval --help` says of the command."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `eval` sub-command's arguments."""
    parser.add_argument(
        "trajectories", type=Path, nargs="+", help="JSONL file(s), one trajectory a line"
    )
    parser.add_argument("--policy", type=Path, help="tool policy file ({'tools': {...}})")
    parser.add_argument("--config", type=Path, help="guard configuration file (JSON or YAML)")
    parser.add_argument(
        "--toolkit",
        action="append",
        default=[],
        metavar="NAME",
        help="add a toolkit's tool policies (repeatable; one of: "
        f"{', '.join(known_toolkits())}); --config and --policy entries win",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--error-pattern",
        default=DEFAULT_ERROR_PATTERN,
        help="regular expression (case-insensitive) marking a failed result "
        f"(default: {DEFAULT_ERROR_PATTERN!r})",
    )
    parser.add_argument(
        "--normalize",
        action="append",
        default=[],
        metavar="REGEX",
        help="remove matches from results before comparing them (repeatable)",
    )
    parser.add_argument(
        "--tools",
        action="append",
        default=None,
        metavar="NAMES",
        help="comma-separated names of the tools the recorded agents had (repeatable): a call "
        "to another name is a call to a tool that does not exist. A trajectory's own 'tools' "
        "list wins; with neither, a result saying 'is not a valid tool' marks one",
    )
    parser.add_argument(
        "--show-aborts", type=int, default=10, metavar="N", help="list the first N aborts"
    )
    parser.add_argument(
        "--show-wrong",
        type=int,
        default=10,
        metavar="N",
        help="list the first N wrong blocks (run id, call index, tool, arguments, the earlier "
        "and the real result); 0 lists none",
    )
    parser.add_argument(
        "--show-missed",
        type=int,
        default=0,
        metavar="N",
        help="list the first N repeated reads the guard let run although they returned the "
        "same result with nothing written since (redundant reads, and volatile ones), each "
        "with the reason it ran: window, epoch, earlier_failed, earlier_blocked, volatile, "
        "dedup_off (default: none)",
    )
    parser.add_argument(
        "--calibrate",
        type=Path,
        metavar="OUT.json",
        help="search max_repeats, history_window, max_same_failures, max_cycle_period and per "
        "tool volatile and max_repeats for the configuration that stops the most loops and "
        "saves the most calls with no wrong block and no stop in a run without a loop, on part "
        "of the runs; keep each change only when it holds on the runs held out; write it to "
        "OUT.json (a --config file) and print its report next to the starting one's, per part",
    )
    parser.add_argument(
        "--holdout",
        type=float,
        default=DEFAULT_HOLDOUT,
        metavar="SHARE",
        help="with --calibrate: the share of runs (of each model, and of the runs with a loop) "
        "held out to check each change; 0 checks nothing (default: %(default)s)",
    )
    parser.add_argument(
        "--allow-no-loops",
        action="store_true",
        help="with --calibrate: exit 0 when no run has a loop (every loop threshold is kept "
        "then, whatever this option; without it the exit status is 1)",
    )
    parser.add_argument(
        "--loop-calls",
        type=int,
        default=DEFAULT_LOOP_CALLS,
        metavar="N",
        help="a run loops when it makes the same call with the same result, whatever the "
        "tool's class, or one tool fails the same way, N times in a turn (default: "
        "%(default)s; see docs/tuning-with-eval.md); eval counts the runs with a loop it stops "
        "and the runs without one it stops, and --calibrate weighs them",
    )
    parser.add_argument(
        "--calibrate-budget",
        type=float,
        default=DEFAULT_BUDGET_SECONDS,
        metavar="SECONDS",
        help="with --calibrate: stop the search after this long, keeping the best found "
        "(default: %(default)s)",
    )


def load_config(
    config: Path | None, policy: Path | None, toolkits: Sequence[str] = ()
) -> GuardConfig:
    """Build the configuration from the optional config and policy files and toolkits.

    Raises:
        SystemExit: With a clear message naming the option and the file when a file is
            missing, unreadable or invalid, or naming the known toolkits.
    """
    cfg = _read_option("--config", config, GuardConfig.from_file) if config else GuardConfig()
    cfg = _read_option("--policy", policy, cfg.with_policies) if policy else cfg
    for name in toolkits:
        if name not in known_toolkits():
            _fail(f"--toolkit {name}: unknown toolkit; known: {', '.join(known_toolkits())}")
    if toolkits:
        # The files' own `tools` entries still win: toolkits only fill in the rest.
        cfg = cfg.model_copy(update={"toolkits": (*cfg.toolkits, *toolkits)})
    return cfg


def _read_option(option: str, path: Path, load: Callable[[Path], GuardConfig]) -> GuardConfig:
    where = f"{option} {path}"
    try:
        return load(path)
    except FileNotFoundError:
        _fail(f"{where}: no such file")
    except OSError as exc:  # a directory, no permission
        _fail(f"{where}: cannot read it ({exc.strerror or exc})")
    except UnicodeDecodeError as exc:
        _fail(f"{where}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})")
    except json.JSONDecodeError as exc:
        _fail(f"{where}: not valid JSON ({json_depth.describe_error(exc, line=True)})")
    except ValidationError as exc:
        _fail(f"{where}: invalid configuration:\n{exc}")
    except RecursionError:  # JSON or YAML nested deeper than the parser can go
        _fail(f"{where}: nested too deeply to be a configuration")
    except (ValueError, ImportError) as exc:
        _fail(f"{where}: {exc}")
    except Exception as exc:
        if type(exc).__module__.startswith("yaml"):  # PyYAML is optional: no import here
            _fail(f"{where}: not valid YAML ({' '.join(str(exc).split())})")
        raise


def _fail(message: str) -> NoReturn:
    print(f"replay-guard eval: {message}", file=sys.stderr)
    raise SystemExit(2)


class _NotJSONLinesError(Exception):
    """The input's first line is not JSON text: it is not a JSON-lines file at all."""


def _checked_lines(lines: Iterable[bytes], path: Path) -> Iterator[bytes]:
    """The lines, refusing at once a file whose first line is not JSON (a binary file)."""
    checked = False
    for number, line in enumerate(lines, start=1):
        if not checked and line.strip():
            checked = True
            _data, problem = parse_line(line)
            if problem is not None:
                msg = f"{path} line {number} is {problem}: {_HINT}"
                raise _NotJSONLinesError(msg)
        yield line


def _evaluate(args: argparse.Namespace, config: GuardConfig, paths: list[Path]) -> EvalReport:
    report = EvalReport()
    for path in paths:
        start, runs = len(report.malformed), report.total.trajectories
        _evaluate_one(args, config, path, report)
        if report.total.trajectories == runs:
            _no_trajectory(path, report.malformed[start:])
        if len(paths) > 1:  # say which file each malformed line is in
            report.malformed[start:] = [
                (number, f"{path.name}: {problem}") for number, problem in report.malformed[start:]
            ]
    return report


def _no_trajectory(path: Path, malformed: list[tuple[int, str]]) -> NoReturn:
    """Refuse a file without a trajectory: empty (or blank), or every line malformed."""
    if not malformed:  # nothing to score: an all-zero report would read as a clean run
        _fail(f"{path} holds no trajectory (it is empty): {_HINT}")
    number, problem = malformed[0]
    skipped = len(malformed)
    _fail(f"{path} holds no trajectory (line {number}: {problem}; {skipped} skipped): {_HINT}")


_ANNOUNCED = 20  # malformed lines said on standard error as they are met (all in the report)


class _Announced(list[tuple[int, str]]):
    """The malformed lines of one file, each said on standard error as soon as it is met.

    A long evaluation used to name a bad line only in the report at its very end. Lines met
    before the file's first trajectory are said when that trajectory comes: a file with no
    trajectory at all is refused in one line naming its first bad line instead.
    """

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._path = path
        self._live = False

    def append(self, item: tuple[int, str]) -> None:
        """Keep the malformed line, and say it (the first `_ANNOUNCED` of them)."""
        super().append(item)
        if self._live:
            self._say(len(self) - 1)

    def trajectory_seen(self) -> None:
        """The file holds a trajectory: say the lines kept so far, and each later one."""
        if not self._live:
            self._live = True
            for index in range(len(self)):
                self._say(index)

    def _say(self, index: int) -> None:
        if index < _ANNOUNCED:
            number, problem = self[index]
            where = f"line {number}" if number else "a call"
            print(f"replay-guard eval: skipped {self._path} {where}: {problem}", file=sys.stderr)
        elif index == _ANNOUNCED:
            print(f"replay-guard eval: more malformed lines in {self._path}...", file=sys.stderr)


def _announcing(trajectories: Iterable[Trajectory], announced: _Announced) -> Iterator[Trajectory]:
    for trajectory in trajectories:
        announced.trajectory_seen()
        yield trajectory


def _evaluate_one(
    args: argparse.Namespace, config: GuardConfig, path: Path, report: EvalReport
) -> None:
    progress = None
    if sys.stderr.isatty() and path.stat().st_size > _PROGRESS_BYTES:

        def progress(done: int) -> None:
            if done % 50 == 0:
                print(f"\r{done} trajectories...", end="", file=sys.stderr, flush=True)

    announced = _Announced(path)
    try:
        with open(path, "rb") as handle:
            evaluate_trajectories(
                _announcing(iter_trajectories(_checked_lines(handle, path), announced), announced),
                config,
                error_pattern=args.error_pattern,
                normalize=args.normalize,
                report=report,
                on_progress=progress,
                tools=_tool_names(args.tools),
                loop_calls=args.loop_calls,
            )
    except _NotJSONLinesError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot read {path} ({exc.strerror or exc})")
    finally:
        if progress is not None:
            print("\r", end="", file=sys.stderr)
        report.malformed.extend(announced)


def _read_all(paths: list[Path]) -> tuple[list[Trajectory], list[tuple[int, str]]]:
    """Every trajectory of the files, in order, and the malformed lines skipped."""
    trajectories: list[Trajectory] = []
    malformed: list[tuple[int, str]] = []
    for path in paths:
        start, runs = len(malformed), len(trajectories)
        announced = _Announced(path)
        try:
            with open(path, "rb") as handle:
                lines = _checked_lines(handle, path)
                trajectories.extend(_announcing(iter_trajectories(lines, announced), announced))
        except _NotJSONLinesError as exc:
            _fail(str(exc))
        except OSError as exc:
            _fail(f"cannot read {path} ({exc.strerror or exc})")
        malformed.extend(announced)
        if len(trajectories) == runs:
            _no_trajectory(path, malformed[start:])
        malformed[start:] = [(n, f"{path.name}: {p}") for n, p in malformed[start:]]
    return trajectories, malformed


def _tool_names(values: list[str] | None) -> frozenset[str] | None:
    """The `--tools` names (each value comma-separated), or None when not given."""
    if values is None:
        return None
    return frozenset(name.strip() for value in values for name in value.split(",") if name.strip())


def run(args: argparse.Namespace) -> int:
    """Run `replay-guard eval`."""
    try:
        config = load_config(args.config, args.policy, args.toolkit)
    except ValueError as exc:  # two toolkits disagree on a tool
        _fail(f"--toolkit: {exc}")
    # Checked for plain eval too: it counts the runs with a loop with --loop-calls, and a
    # negative --show-* count would slice its lists from the end.
    if args.loop_calls < 2:
        _fail(f"--loop-calls {args.loop_calls}: a loop needs at least 2 calls")
    for option in ("show_aborts", "show_wrong", "show_missed"):
        if getattr(args, option) < 0:
            flag = "--" + option.replace("_", "-")
            _fail(f"{flag} {getattr(args, option)}: give how many to list, 0 or more")
    paths: list[Path] = args.trajectories
    for path in paths:
        if path.is_dir():
            _fail(f"{path} is a directory: {_HINT}")
        if not path.exists():
            _fail(f"no such file: {path}")
    source = ", ".join(path.name for path in paths)
    if args.calibrate is not None:
        return _calibrate(args, config, paths, source)
    report = _evaluate(args, config, paths)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        print()
    else:
        print_report(
            report,
            source=source,
            show_aborts=args.show_aborts,
            show_wrong=args.show_wrong,
            show_missed=args.show_missed,
        )
    return 0


def _calibrate(
    args: argparse.Namespace, config: GuardConfig, paths: list[Path], source: str
) -> int:
    """`--calibrate OUT.json`: search, write the configuration, print it against the start."""
    if not 0 <= args.holdout < 1:
        _fail(f"--holdout {args.holdout}: give a share of the runs from 0 to below 1, e.g. 0.5")
    _check_writable(args.calibrate)  # before a search of minutes, not after it
    trajectories, malformed = _read_all(paths)

    def progress(text: str) -> None:
        print(f"calibrate: {text}", file=sys.stderr, flush=True)

    reading = RecordingReading(
        loop_calls=args.loop_calls,
        error_pattern=args.error_pattern,
        normalize=tuple(args.normalize),
        tools=_tool_names(args.tools),
    )
    result = calibrate(
        trajectories,
        config,
        reading,
        budget_seconds=args.calibrate_budget,
        on_progress=progress,
        holdout=args.holdout,
    )
    data = config_data(result.config)
    try:
        args.calibrate.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        _fail(f"--calibrate {args.calibrate}: cannot write it ({exc.strerror or exc})")
    start = "--config" if args.config is not None else "defaults"
    if args.json:
        json.dump(_calibration_json(result, data, malformed), sys.stdout, indent=2)
        print()
    else:
        print_calibration(
            result,
            source=source,
            out_path=str(args.calibrate),
            start=start,
            loop_calls=args.loop_calls,
            malformed=malformed,
            show_wrong=args.show_wrong,
            allow_no_loops=args.allow_no_loops,
        )
    if result.no_loops and not args.allow_no_loops:
        return 1
    return 0 if result.score.safe else 1


def _check_writable(path: Path) -> None:
    """Refuse a `--calibrate` path that cannot be written, without creating anything."""
    where = f"--calibrate {path}"
    if path.is_dir():
        _fail(f"{where}: is a directory; give the configuration file's name (OUT.json)")
    if path.is_fifo() or path.is_socket():
        # Opening it to write the result would wait for a reader, after the whole search
        # (a device such as /dev/null is taken: writing to it returns).
        _fail(f"{where}: is not a regular file; give the configuration file's name (OUT.json)")
    parent = path.parent
    if not parent.is_dir():
        _fail(f"{where}: no directory {str(parent)!r}; create it or give another path")
    if not os.access(path if path.exists() else parent, os.W_OK):
        _fail(f"{where}: cannot write it (permission denied); give a writable path")


def _calibration_json(
    result: Calibration, data: dict[str, Any], malformed: list[tuple[int, str]]
) -> dict[str, Any]:
    return {
        "config": data,
        "start": asdict(result.base_score),
        "calibrated": asdict(result.score),
        "safe": result.score.safe,
        "changes": [{"setting": s, "start": a, "calibrated": b} for s, a, b in result.changes],
        "loop_runs": result.loop_runs,
        "no_loops": result.no_loops,
        "holdout": result.holdout,
        "chosen_on": asdict(result.chosen) if result.chosen is not None else None,
        "held_out": asdict(result.held_out) if result.held_out is not None else None,
        "checks": [
            {
                "setting": c.setting,
                "start": c.start,
                "value": c.value,
                "kept": c.kept,
                "why": c.why,
                "held_out_gains": c.gains(),
            }
            for c in result.checks
        ],
        "min_tool_runs": result.min_tool_runs,
        "short_evidence": [e.tool for e in result.short_evidence],
        "tools": [asdict(e) for e in result.evidence.values()],
        "unknown_tools": [e.tool for e in result.unknown_tools],
        "volatile_candidates": [e.tool for e in result.volatile_candidates],
        "evaluations": result.evaluations,
        "seconds": round(result.seconds, 3),
        "complete": result.complete,
        "malformed": [{"line": n, "error": e} for n, e in malformed],
    }


def _describe_default(config: GuardConfig) -> str:
    """What a tool without a policy gets: `default_policy`, in words."""
    policy = config.default_policy
    if policy.replay == "pure" and policy.volatile:
        return "pure volatile (never deduplicated, still counted and stopped when it loops)"
    if policy.replay == "pure":
        return (
            "pure (an identical call is answered with the earlier result instead of running; "
            "repeats counted and stopped)"
        )
    if policy.replay == "idempotent":
        return "idempotent (runs again with the same idempotency key; never deduplicated)"
    return "unsafe (never deduplicated; an unknown outcome on replay is refused)"


def print_calibration(
    result: Calibration,
    *,
    source: str,
    out_path: str,
    start: str = "defaults",
    loop_calls: int = DEFAULT_LOOP_CALLS,
    malformed: Sequence[tuple[int, str]] = (),
    show_wrong: int = 10,
    allow_no_loops: bool = False,
    out: TextIO | None = None,
) -> None:
    """Print a calibration: settings and figures of each configuration, per part, side by side.

    Args:
        result: The calibration.
        source: The inputs' names, for the heading.
        out_path: Where the configuration was written.
        start: The heading of the starting configuration's column.
        loop_calls: What made a loop, for the explanation.
        malformed: Malformed lines skipped.
        show_wrong: How many wrong blocks of the chosen configuration to list.
        allow_no_loops: Whether `--allow-no-loops` was given (for the explanation).
        out: Where to print (stdout by default).
    """
    out = out or sys.stdout

    def line(text: str = "") -> None:
        print(text, file=out)

    base, best = result.base_score, result.score
    total = result.report.total
    line(
        f"replay-guard eval --calibrate: {base.runs} trajectories, {total.calls:,} calls ({source})"
    )
    line(f"A loop: {loop_definition(loop_calls)}.")
    line(f"Runs with a loop in the recording: {base.loops} of {base.runs}.")
    chosen, held = result.chosen, result.held_out
    if chosen is not None and held is not None:
        if held.runs:
            line(
                f"Chosen on {chosen.runs} runs ({chosen.base.loops} with a loop), checked on "
                f"{held.runs} held out ({held.base.loops} with a loop): split by run, each "
                f"model's runs and the runs with a loop in both parts (--holdout "
                f"{result.holdout:g})."
            )
        elif result.holdout == 0:
            line(f"Chosen on all {chosen.runs} runs: --holdout 0, no change checked.")
        else:
            line(
                f"Chosen on all {chosen.runs} runs: too few to hold any out, so no threshold "
                "change can be confirmed (each is dropped)."
            )
    searched = "" if result.complete else " (time budget reached: best found so far)"
    line(f"Searched {result.evaluations} configurations in {result.seconds:.1f} s{searched}.")
    line()
    rows: list[tuple[str, Any, Any]] = [
        (name, getattr(result.base, name), getattr(result.config, name))
        for name in GLOBAL_CANDIDATES
    ]
    rows += [change for change in result.changes if change[0] not in GLOBAL_CANDIDATES]
    width = max(28, *(len(name) for name, _, _ in rows))
    line(f"{'setting':<{width}} {start:>12} {'calibrated':>12}")
    for name, before, after in rows:
        mark = "" if before == after else "   changed"
        line(f"{name:<{width}} {_setting(before):>12} {_setting(after):>12}{mark}")
    line()
    parts: list[tuple[str, Score, Score]] = []
    if chosen is not None and held is not None and held.runs:
        parts += [
            (f"chosen on ({chosen.runs})", chosen.base, chosen.calibrated),
            (f"held out ({held.runs})", held.base, held.calibrated),
        ]
    parts.append((f"all ({base.runs})", base, best))
    heading = "".join(f" {name:>23}" for name, _, _ in parts)
    line(f"{'report':<{width}}{heading}")
    line(f"{'':<{width}}" + f" {start:>11} {'calibrated':>11}" * len(parts))
    figures: list[tuple[str, Callable[[Score], str]]] = [
        ("loops stopped", lambda s: f"{s.loops_stopped}/{s.loops}"),
        ("calls saved (blocked + cut)", lambda s: f"{s.saved}"),
        ("blocked", lambda s: f"{s.blocked}"),
        ("cut", lambda s: f"{s.cut}"),
        ("aborts", lambda s: f"{s.aborts}"),
        ("wrong blocks", lambda s: f"{s.wrong}"),
        ("runs without a loop stopped", lambda s: f"{s.healthy_stopped}"),
    ]
    for name, show in figures:
        cells = "".join(f" {show(a):>11} {show(b):>11}" for _, a, b in parts)
        line(f"{name:<{width}}{cells}")
    base_total = result.base_report.total
    pad = " " * (24 * (len(parts) - 1))
    for name, before, after in (
        ("  dedup blocks", f"{base_total.dedup.blocked}", f"{total.dedup.blocked}"),
        ("  loop stops", f"{base_total.stops.blocked}", f"{total.stops.blocked}"),
        (
            "identical repeats caught",
            f"{base_total.caught}/{base_total.identical_repeats}",
            f"{total.caught}/{total.identical_repeats}",
        ),
    ):
        line(f"{name:<{width}}{pad} {before:>11} {after:>11}")
    line()
    _print_checks(result, start, line)
    if result.no_loops:
        line(
            f"No run has a loop: every loop threshold is kept ({', '.join(LOOP_THRESHOLDS)}, "
            "each tool's max_repeats); with nothing to stop, the search could only loosen them "
            "on no evidence. Only volatile is searched."
            + ("" if allow_no_loops else " Exit status 1: --allow-no-loops accepts it.")
        )
    if result.short_evidence:
        names = ", ".join(
            f"{e.tool} ({e.repeated_runs} run{'s' if e.repeated_runs != 1 else ''})"
            for e in result.short_evidence
        )
        line(
            f"Evidence short: a tool's own max_repeats needs its identical calls repeated in "
            f"at least {result.min_tool_runs} runs of the part chosen on "
            f"(MIN_TOOL_EVIDENCE_RUNS {MIN_TOOL_EVIDENCE_RUNS}); kept for: {names}."
        )
    if best.safe:
        line(f"Wrote {out_path}: no wrong block, no run without a loop stopped.")
    else:
        line(
            f"Wrote {out_path}, but no configuration tried has 0 wrong blocks and no run "
            f"without a loop stopped: the best has {best.wrong} wrong block(s) and stops "
            f"{best.healthy_stopped} run(s) without a loop. Declare the tools below, or "
            "mark the polled ones volatile, and calibrate again."
        )
    line(f"Use it: replay-guard eval ... --config {out_path}, or GuardConfig.from_file.")
    unknown = result.unknown_tools
    if unknown:
        line()
        line(
            f"Unknown to the policy ({len(unknown)}): treated as "
            f"{_describe_default(result.base)}. Declare them; calibration never changes a "
            "tool's class:"
        )
        _print_evidence(unknown, line)
    candidates = [e for e in result.volatile_candidates if e.source != "default"]
    if candidates:
        line()
        line("Declared tools whose identical calls returned different results (volatile?):")
        _print_evidence(candidates, line)
    if result.report.wrong_blocks and show_wrong > 0:
        line()
        _print_wrong(result.report.wrong_blocks, show_wrong, line)
    if malformed:
        line(f"Skipped {len(malformed)} malformed input(s):")
        for number, problem in malformed[:20]:
            line(f"  line {number}: {problem}")


def _print_loops(report: EvalReport, line: Callable[[str], None]) -> None:
    """The runs with a loop the guard stops, and the runs without one it stops."""
    loops = report.loops
    if loops is None:
        return
    runs = report.total.trajectories
    line(
        f"Runs with a loop: {loops.runs} of {runs}, stopped {loops.stopped}; runs without a "
        f"loop stopped: {loops.healthy_stopped}"
        + (f" ({', '.join(loops.healthy_stopped_runs[:3])}" if loops.healthy_stopped else "")
        + (", ..." if loops.healthy_stopped > 3 else "")
        + (")" if loops.healthy_stopped else "")
    )
    line(f"  a loop: {loop_definition(loops.loop_calls)}")


def _print_checks(result: Calibration, start: str, line: Callable[[str], None]) -> None:
    """Each change the search proposed: what it gains and costs alone on the held-out part."""
    if not result.checks:
        line("The search proposed no change.")
        line("")
        return
    held = result.held_out
    loops = held.base.loops if held is not None else 0
    line(
        f"Changes proposed on the part chosen on, each checked alone on the held-out part "
        f"(+ gains, - costs, against {start} there):"
    )
    width = max(28, *(len(c.setting) + 12 for c in result.checks))
    line(
        f"  {'change':<{width}} {'loops stopped':>13} {'calls saved':>11} {'wrong blocks':>12} "
        f"{'no-loop stops':>13}   verdict"
    )
    for check in result.checks:
        gains = check.gains()
        change = f"{check.setting} {_setting(check.start)} -> {_setting(check.value)}"
        cells = " ".join(
            f"{gains[name]:>+{size}d}"
            for name, size in (
                ("loops stopped", 13),
                ("calls saved", 11),
                ("wrong blocks", 12),
                ("runs without a loop stopped", 13),
            )
        )
        verdict = ("kept: " if check.kept else "dropped: ") + check.why
        line(f"  {change:<{width}} {cells}   {verdict}")
    if held is not None and held.runs and not loops and result.loop_runs:
        line(
            "  The held-out part has no run with a loop: it can only catch stops of runs "
            "without a loop, not loops let through."
        )
    line("")


def _setting(value: Any) -> str:
    return "-" if value is None else str(value)


def _print_evidence(entries: Sequence[ToolEvidence], line: Callable[[str], None]) -> None:
    """Per tool: calls, identical calls with the same and with a changed result, an example."""
    width = _name_width((e.tool for e in entries), "tool", _TOOL_WIDTH)
    line(f"  {'tool':<{width}} {'class':<9} {'calls':>6} {'same result':>12} {'changed':>8}")
    for entry in entries:
        label = _label(entry.tool, width, lambda text: line(f"  {text}"))
        kind = entry.replay + (" volatile" if entry.volatile else "")
        note = "   volatile candidate" if entry.volatile_candidate and not entry.volatile else ""
        line(
            f"  {label:<{width}} {kind:<9} {entry.calls:>6} {entry.same_results:>12} "
            f"{entry.changed_results:>8}{note}"
        )
        if entry.example is not None and note:
            ident, index, earlier, later = entry.example
            line(f"      call {index}: {_short(earlier)} -> {_short(later)}")
            line(f"      {ident}")
    line(
        "  same result / changed: identical calls (same arguments, same turn, nothing written "
        "since) that returned the earlier result again / something else"
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _print_tool_classes(report: EvalReport, line: Callable[[str], None]) -> None:
    """Per tool and per class each call got (a shell tool classified per call has several)."""
    width = _name_width(report.by_tool_class, "tool", _TOOL_WIDTH)
    line(
        f"{'tool':<{width}} {'class':<14} {'calls':>6} {'blocked':>8} {'redundant':>9} "
        f"{'wrong':>6} {'aborts':>6}"
    )
    for tool, classes in sorted(report.by_tool_class.items()):
        label = _label(tool, width, line)
        for name, t in sorted(classes.items(), key=lambda item: _CLASS_ORDER.get(item[0], 9)):
            line(
                f"{label:<{width}} {name:<14} {t.calls:>6} {t.blocked:>8} {t.redundant:>9} "
                f"{t.wrong:>6} {t.aborts:>6}"
            )
            label = ""
    line(
        "class: the replay class each call got (a tool classified per call can have several; "
        "unknown: a tool that does not exist)"
    )
    line("")


def _name_width(names: Iterable[str], heading: str, most: int) -> int:
    """The name column's width: the longest name, up to `most` (longer ones get a line)."""
    return min(max([len(heading), *(len(name) for name in names)]), most)


def _label(name: str, width: int, line: Callable[[str], None]) -> str:
    """The label for a table row; a name too long for the column is printed whole above."""
    if len(name) <= width:
        return name
    line(name)
    return ""


_PREVIEW = 100  # characters of arguments and results in the wrong-block listing


def _short(text: str | None) -> str:
    """One line of at most `_PREVIEW` characters (newlines shown as spaces)."""
    if text is None:
        return "-"
    flat = " ".join(text.split())
    return flat if len(flat) <= _PREVIEW else flat[: _PREVIEW - 3] + "..."


def _print_layers(report: EvalReport, line: Callable[[str], None]) -> None:
    """Dedup blocks apart from loop stops, in total and per tool that had a block."""
    total = report.total
    line(
        f"Blocks by layer: dedup {total.dedup.blocked} ({total.dedup.wrong} wrong), "
        f"loop stops {total.stops.blocked} ({total.stops.wrong} wrong)"
    )
    line(
        f"  dedup: {', '.join(sorted(DEDUP_REASONS))} (answered with an earlier result: a wrong "
        "one hid a new result)"
    )
    line("  stops: any other reason (repeat_limit, cycle, same_failure, unknown_tool, stopped)")
    blocked = [(name, t) for name, t in sorted(report.by_tool.items()) if t.blocked]
    if not blocked:
        line("")
        return
    width = _name_width((name for name, _ in blocked), "tool", _TOOL_WIDTH)
    line(f"  {'tool':<{width}} {'dedup':>6} {'wrong':>6} {'stops':>6} {'wrong':>6}   stop reasons")
    for name, t in blocked:
        label = _label(name, width, lambda text: line(f"  {text}"))
        stops = ", ".join(
            f"{r} {n}" for r, n in sorted(t.by_reason.items()) if r not in DEDUP_REASONS
        )
        line(
            f"  {label:<{width}} {t.dedup.blocked:>6} {t.dedup.wrong:>6} {t.stops.blocked:>6} "
            f"{t.stops.wrong:>6}   {stops}".rstrip()
        )
    line("")


def _print_wrong(wrong: list[WrongBlock], show: int, line: Callable[[str], None]) -> None:
    """The first `show` wrong blocks: where, what was called, what it would have hidden."""
    shown = min(show, len(wrong))
    line(f"Wrong blocks ({len(wrong)}; first {shown}), each with its run's id below:")
    for block in wrong[:show]:
        line(f"  call {block.call_index:>3} {block.tool} ({block.reason}) {_short(block.args)}")
        where = "-" if block.earlier_index is None else f"call {block.earlier_index}"
        line(f"      earlier ({where}): {_short(block.earlier_result)}")
        line(f"      real (call {block.call_index}): {_short(block.result)}")
        line(f"      {block.trajectory}")


def _print_missed(missed: list[MissedRead], show: int, line: Callable[[str], None]) -> None:
    """The first `show` missed reads: where, what was called, why the guard let it run."""
    shown = min(show, len(missed))
    reasons = Counter(m.reason for m in missed)
    counts = ", ".join(f"{r} {n}" for r, n in sorted(reasons.items())) or "none"
    line(f"Missed repeated reads ({len(missed)}: {counts}; first {shown}), with the run's id:")
    for m in missed[:show]:
        line(f"  call {m.call_index:>3} {m.tool} ({m.kind}, {m.reason}) {_short(m.args)}")
        line(f"      same result as call {m.earlier_index}: {_short(m.result)}")
        line(f"      why: {m.detail}")
        line(f"      {m.trajectory}")
    if missed[:show]:
        line("  reasons:")
        for reason in sorted(reasons):
            line(f"    {reason:<16} {MISSED_REASONS[reason]}")
    line("")


def print_report(
    report: EvalReport,
    *,
    source: str,
    show_aborts: int = 10,
    show_wrong: int = 10,
    out: TextIO | None = None,
    show_missed: int = 0,
) -> None:
    """Print a report as tables a person can read.

    Args:
        report: The report.
        source: The input's name, for the heading.
        show_aborts: How many aborts to list.
        show_wrong: How many wrong blocks to list.
        out: Where to print (stdout by default).
        show_missed: How many missed repeated reads to list (`EvalReport.missed_reads`).
    """
    out = out or sys.stdout
    total = report.total

    def line(text: str = "") -> None:
        print(text, file=out)

    line(f"replay-guard eval: {total.trajectories} trajectories, {total.calls:,} calls ({source})")
    if total.guard_answered:
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(total.guard_answered_by_reason.items()))
        line(
            f"Not scored: {total.guard_answered:,} calls the recorded run's guard answered "
            f"itself ({reasons}; marked 'guard' by replay-guard export): the tool never ran them"
        )
    line()
    rows: list[tuple[str, Tally]] = sorted(report.by_model.items())
    width = _name_width(report.by_model, "model", _MODEL_WIDTH)
    header = f"{'model':<{width}} {'runs':>5} {'calls':>6} {'blocked':>8} {'redundant':>9} "
    header += f"{'wrong':>6} {'aborts':>6} {'cut':>5} {'cycles':>6}"
    line(header)
    for name, t in [*rows, ("total", total)]:
        label = _label(name, width, line)
        line(
            f"{label:<{width}} {t.trajectories:>5} {t.calls:>6} {t.blocked:>8} {t.redundant:>9} "
            f"{t.wrong:>6} {t.aborts:>6} {t.cut:>5} {t.cycles:>6}"
        )
    _print_loops(report, line)
    line()
    for column, meaning in _LEGEND:
        line(f"  {column:<10} {meaning}")
    line()
    _print_tool_classes(report, line)
    line(
        f"Identical repeats (same call, same result as the previous identical call): "
        f"{total.identical_repeats}"
    )
    line(f"  {'kind':<20} {'total':>6} {'caught':>7} {'rate':>7}   what the guard does")
    for kind, help_text in _KIND_HELP.items():
        if kind in total.repeat_kinds:
            count, caught = total.repeat_kinds[kind]
            line(f"  {kind:<20} {count:>6} {caught:>7} {_pct(caught / count):>7}   {help_text}")
    line(
        f"  {'all':<20} {total.identical_repeats:>6} {total.caught:>7} "
        f"{_pct(total.catch_rate()):>7}"
    )
    line("  (caught = blocked, or never made because an abort ended that turn)")
    if "same_failure" in total.repeat_kinds:
        count, caught = total.repeat_kinds["same_failure"]
        line(
            f"Same failure again with other arguments (the tool's previous failure, "
            f"normalized): {count}, caught {caught} ({_pct(caught / count)})"
        )
    line()
    line(f"Wrong blocks: {total.wrong} of {total.blocked} blocked ({_pct(total.wrong_rate())})")
    reasons = ", ".join(f"{r} {n}" for r, n in sorted(total.by_reason.items())) or "none"
    line(f"Blocked by reason: {reasons}")
    if total.unknown_tools:
        line(
            f"Calls to tools that do not exist: {total.unknown_tools} (reason unknown_tool: "
            "answered by the guard, counted as one loop per turn whatever the name)"
        )
    line()
    _print_layers(report, line)
    if report.wrong_blocks and show_wrong > 0:
        _print_wrong(report.wrong_blocks, show_wrong, line)
    if show_missed > 0:
        _print_missed(report.missed_reads, show_missed, line)
    if report.aborts and show_aborts:
        shown = min(show_aborts, len(report.aborts))
        line(f"Aborts ({len(report.aborts)}; first {shown}), each with its run's id below:")
        for abort in report.aborts[:show_aborts]:
            line(f"  call {abort.call_index:>3} {abort.tool} ({abort.reason})")
            line(f"      {abort.trajectory}")
    if report.malformed:
        line(f"Skipped {len(report.malformed)} malformed input(s):")
        for number, problem in report.malformed[:20]:
            where = f"line {number}" if number else "call"
            line(f"  {where}: {problem}")
