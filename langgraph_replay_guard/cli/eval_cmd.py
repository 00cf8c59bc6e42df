"""`replay-guard eval`: score a guard configuration on recorded trajectories."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from pydantic import ValidationError

from langgraph_replay_guard.evaluation import (
    DEDUP_REASONS,
    DEFAULT_ERROR_PATTERN,
    EvalReport,
    Tally,
    WrongBlock,
    evaluate_file,
    parse_line,
)
from langgraph_replay_guard.policy.config import GuardConfig
from langgraph_replay_guard.policy.toolkit_data import known_toolkits

__all__ = ["add_parser", "load_config", "print_report", "run"]

_PROGRESS_BYTES = 1_000_000  # show progress for inputs larger than this, on a terminal

_HINT = "expected one JSON trajectory per line, see --help"

_CLASS_ORDER = {"pure": 0, "pure volatile": 1, "idempotent": 2, "unsafe": 3}

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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `eval` sub-command."""
    parser = sub.add_parser(
        "eval",
        help="replay recorded trajectories through the guard and report what it would block",
        description=(
            "Replay recorded agent trajectories (JSON lines) through the guard, offline, and "
            "report what it would have blocked, whether each block was redundant (the "
            "recorded result was identical to the earlier identical call) or wrong, and "
            "where it would have aborted. Use it to tune a configuration before deploying."
        ),
    )
    parser.add_argument("trajectories", type=Path, help="JSONL file, one trajectory a line")
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
    parser.set_defaults(func=run)


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
        _fail(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")
    except ValidationError as exc:
        _fail(f"{where}: invalid configuration:\n{exc}")
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


def _evaluate(args: argparse.Namespace, config: GuardConfig, path: Path) -> EvalReport:
    progress = None
    if sys.stderr.isatty() and path.stat().st_size > _PROGRESS_BYTES:

        def progress(done: int) -> None:
            if done % 50 == 0:
                print(f"\r{done} trajectories...", end="", file=sys.stderr, flush=True)

    try:
        with open(path, "rb") as handle:
            report = evaluate_file(
                _checked_lines(handle, path),
                config,
                error_pattern=args.error_pattern,
                normalize=args.normalize,
                on_progress=progress,
                tools=_tool_names(args.tools),
            )
    except _NotJSONLinesError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot read {path} ({exc.strerror or exc})")
    finally:
        if progress is not None:
            print("\r", end="", file=sys.stderr)
    return report


def _tool_names(values: list[str] | None) -> list[str] | None:
    """The `--tools` names (each value comma-separated), or None when not given."""
    if values is None:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def run(args: argparse.Namespace) -> int:
    """Run `replay-guard eval`."""
    try:
        config = load_config(args.config, args.policy, args.toolkit)
    except ValueError as exc:  # two toolkits disagree on a tool
        _fail(f"--toolkit: {exc}")
    path: Path = args.trajectories
    if path.is_dir():
        _fail(f"{path} is a directory: {_HINT}")
    if not path.exists():
        _fail(f"no such file: {path}")
    report = _evaluate(args, config, path)
    if report.total.trajectories == 0 and report.malformed:
        number, problem = report.malformed[0]
        skipped = len(report.malformed)
        _fail(f"{path} holds no trajectory (line {number}: {problem}; {skipped} skipped): {_HINT}")
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        print()
    else:
        print_report(
            report, source=path.name, show_aborts=args.show_aborts, show_wrong=args.show_wrong
        )
    return 0


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
        f"Blocks by layer: dedup {total.dedup_blocked} ({total.dedup_wrong} wrong), "
        f"loop stops {total.stop_blocked} ({total.stop_wrong} wrong)"
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
            f"  {label:<{width}} {t.dedup_blocked:>6} {t.dedup_wrong:>6} {t.stop_blocked:>6} "
            f"{t.stop_wrong:>6}   {stops}".rstrip()
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


def print_report(
    report: EvalReport,
    *,
    source: str,
    show_aborts: int = 10,
    show_wrong: int = 10,
    out: TextIO | None = None,
) -> None:
    """Print a report as tables a person can read.

    Args:
        report: The report.
        source: The input's name, for the heading.
        show_aborts: How many aborts to list.
        show_wrong: How many wrong blocks to list.
        out: Where to print (stdout by default).
    """
    out = out or sys.stdout
    total = report.total

    def line(text: str = "") -> None:
        print(text, file=out)

    line(f"replay-guard eval: {total.trajectories} trajectories, {total.calls:,} calls ({source})")
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
