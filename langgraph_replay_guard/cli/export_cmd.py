"""`replay-guard export`: a database's threads or a LangSmith export as eval trajectories."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from langchain_core.messages import HumanMessage

from langgraph_replay_guard._compat import checkpoint_thread_ids
from langgraph_replay_guard.cli.bounded import (
    DEFAULT_MAX_ITEM_BYTES,
    add_max_item_bytes_option,
    describe,
    read_checkpoints,
    read_ledger,
)
from langgraph_replay_guard.cli.common import (
    EXIT_UNDECODED,
    add_namespace_option,
    report_undecoded,
)
from langgraph_replay_guard.cli.store_uri import (
    StoreURIError,
    missing_tables,
    not_a_checkpoint_database,
    open_checkpointer,
    open_store,
)
from langgraph_replay_guard.evaluation import GUARD_FIELD
from langgraph_replay_guard.export import (
    LangSmithExportError,
    parse_langsmith_runs,
    trajectories_from_langsmith,
    trajectory_from_history,
)
from langgraph_replay_guard.replay.safe_decode import collect_undecoded
from langgraph_replay_guard.storage.ledger_io import ReplayLedger

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = ["DESCRIPTION", "add_arguments", "run"]

_PROGRESS_FROM = 10  # show a counter on a terminal from this many threads or traces
_NAME = "replay-guard export"


DESCRIPTION = (
    "Write one JSONL trajectory per thread of a checkpointer database (every tool "
    "call with its arguments, result, error status and user turn, collected from the "
    "thread's whole checkpoint history), or per trace of a LangSmith runs export, "
    "for `replay-guard eval`. A call the guard answered itself (a duplicate, a loop stop) "
    "is marked with its reason in 'guard'; eval does not score it. A checkpoint bigger "
    "than --max-item-bytes is left out, a "
    "thread with a checkpoint that cannot be decoded is skipped, each with one line on "
    "standard error. Exit status: 0 when a trajectory was written, 1 when "
    "none was (no thread, or none readable), 2 when the input cannot be opened, 3 when "
    "trajectories were written but a value was not decoded (a type off the allow-list "
    "or a pickle blob: shown opaque, nothing imported or run)."
)
"""What `replay-guard export --help` says of the command."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `export` sub-command's arguments."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--db",
        help="SQLite file, sqlite:///path, postgresql:// URI or libpq 'host=... dbname=...'",
    )
    source.add_argument(
        "--from-langsmith",
        metavar="FILE",
        help="a LangSmith runs export (a JSON array of runs, or one run a line)",
    )
    parser.add_argument(
        "--thread",
        nargs="+",
        action="extend",
        metavar="ID",
        help="export only these threads (with --db; default: every thread)",
    )
    add_namespace_option(parser, "its replay ledger: results of calls whose ToolMessage is lost")
    add_max_item_bytes_option(parser)
    parser.add_argument("--model", help="the trajectories' model name (default: as recorded)")
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write here instead of standard output"
    )


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Export the trajectories.

    Returns:
        0 when at least one trajectory was written, 1 when none was, 2 when the database or
        the file cannot be opened, or the database is not a checkpoint database (no output
        file is created then) (or `--thread` is given with `--from-langsmith`), 3 when
        trajectories were written but some value was not decoded (shown opaque).
    """
    err = err or sys.stderr
    if args.from_langsmith is not None and args.thread:
        print(
            f"{_NAME}: --thread is for --db; drop it: a LangSmith export gives one "
            "trajectory per trace",
            file=err,
        )
        return 2
    if args.db is not None:
        # Before the output file is created: a wrong --db leaves no empty file behind.
        problem = _db_problem(args.db)
        if problem is not None:
            print(f"{_NAME}: {problem}", file=err)
            return 2
    with ExitStack() as stack:
        if args.output is not None:
            try:
                out = stack.enter_context(open(args.output, "w", encoding="utf-8"))
            except OSError as exc:
                print(f"{_NAME}: cannot write {args.output!r}: {exc.strerror}", file=err)
                return 2
        sink = out or sys.stdout
        if args.from_langsmith is not None:
            return _from_langsmith(args, sink, err)
        with collect_undecoded() as undecoded:
            status = _from_db(args, sink, err)
        if status != 2 and report_undecoded(undecoded, _NAME, err):
            return EXIT_UNDECODED
        return status
    return 2  # pragma: no cover - the ExitStack does not swallow exceptions


def _db_problem(db: str) -> str | None:
    """Why `--db` cannot be exported (it cannot be opened, or holds no checkpoints), or None."""
    try:
        with open_checkpointer(db, read_only=True) as saver:
            return not_a_checkpoint_database(db, saver) if missing_tables(saver) else None
    except StoreURIError as exc:
        return str(exc)


def _line(trajectory: Mapping[str, Any]) -> str:
    return json.dumps(trajectory, ensure_ascii=False, default=str) + "\n"


def _write(trajectory: Mapping[str, Any], out: TextIO) -> None:
    out.write(_line(trajectory))


def _destination(args: argparse.Namespace) -> str:
    return str(args.output) if args.output is not None else "standard output"


def _progress(done: int, total: int, what: str, err: TextIO) -> None:
    if total >= _PROGRESS_FROM and err.isatty():
        end = "\n" if done == total else ""
        print(f"\r{_NAME}: {done}/{total} {what}", end=end, file=err, flush=True)


def _from_langsmith(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    path = Path(args.from_langsmith)
    try:
        text = path.read_text(encoding="utf-8")
        runs = parse_langsmith_runs(text)
    except OSError as exc:
        print(f"{_NAME}: cannot read {str(path)!r}: {exc.strerror}", file=err)
        return 2
    except UnicodeDecodeError:
        print(f"{_NAME}: {str(path)!r} is not UTF-8 text; give a JSON or JSONL export", file=err)
        return 2
    except LangSmithExportError as exc:
        print(f"{_NAME}: {str(path)!r}: {exc}", file=err)
        return 2
    trajectories = trajectories_from_langsmith(runs)
    calls = 0
    for done, trajectory in enumerate(trajectories, start=1):
        if args.model:
            trajectory["model"] = args.model
        _write(trajectory, out)
        calls += len(trajectory["calls"])
        _progress(done, len(trajectories), "traces", err)
    print(
        f"{_NAME}: {len(trajectories)} trajectories, {calls} tool calls "
        f"({len(runs)} runs) to {_destination(args)}",
        file=err,
    )
    return 0 if trajectories else 1


def _from_db(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    written = calls = unanswered = by_guard = 0
    skipped: list[str] = []
    try:
        with open_checkpointer(args.db, read_only=True) as saver:
            threads = list(args.thread) if args.thread else checkpoint_thread_ids(saver)
            outcomes = _ledger_outcomes(
                args.db, args.namespace, threads, limit=args.max_item_bytes, err=err
            )
            for done, thread in enumerate(threads, start=1):
                try:
                    history = list(_history(saver, thread, args, err))
                except Exception as exc:  # a damaged thread is skipped, never fatal
                    why = (
                        str(exc)  # names the checkpoint and why
                        if isinstance(exc, _UnreadableCheckpointError)
                        else f"cannot read it ({describe(exc, args.db)})"
                    )
                    print(f"{_NAME}: skipped thread {thread!r}: {why}", file=err)
                    skipped.append(thread)
                    continue
                if not history:
                    print(f"{_NAME}: skipped thread {thread!r}: no checkpoint", file=err)
                    skipped.append(thread)
                    continue
                try:
                    exported = trajectory_from_history(
                        thread, history, outcomes=outcomes.get(thread), model=args.model
                    )
                    line = _line(exported.trajectory)
                except Exception as exc:  # hostile values in decodable messages: skipped too
                    detail = describe(exc, args.db)
                    print(
                        f"{_NAME}: skipped thread {thread!r}: cannot export it ({detail})",
                        file=err,
                    )
                    skipped.append(thread)
                    continue
                out.write(line)
                written += 1
                calls += len(exported.trajectory["calls"])
                by_guard += sum(GUARD_FIELD in c for c in exported.trajectory["calls"])
                unanswered += exported.unanswered
                _progress(done, len(threads), "threads", err)
    except StoreURIError as exc:
        print(f"{_NAME}: {exc}", file=err)
        return 2
    left_out = f"; {unanswered} call(s) without a result left out" if unanswered else ""
    guarded = (
        f"; {by_guard} answered by the guard itself (marked 'guard': eval does not score them)"
        if by_guard
        else ""
    )
    print(
        f"{_NAME}: {written} trajectories, {calls} tool calls to {_destination(args)}; "
        f"{len(skipped)} thread(s) skipped{left_out}{guarded}",
        file=err,
    )
    return 0 if written else 1


class _UnreadableCheckpointError(Exception):
    """A checkpoint of the thread that cannot be decoded: the thread is skipped."""


def _history(
    saver: BaseCheckpointSaver[Any], thread: str, args: argparse.Namespace, err: TextIO
) -> Iterator[list[Any]]:
    """The messages of each root checkpoint of a thread, oldest first, with pending writes.

    A checkpoint above `--max-item-bytes` is left out with a line (the others still give
    the thread's calls); one that cannot be decoded skips the thread.
    """
    limit: int = args.max_item_bytes
    for read in read_checkpoints(saver, thread, limit=limit, uri=args.db):
        if read.value is None:
            if read.oversized:
                print(
                    f"{_NAME}: thread {thread!r}: left out checkpoint {read.checkpoint_id}: "
                    f"{read.problem}",
                    file=err,
                )
                continue
            msg = f"checkpoint {read.checkpoint_id}: {read.problem}"
            raise _UnreadableCheckpointError(msg)
        item = read.value
        values = item.checkpoint.get("channel_values", {})
        messages = values.get("messages") if isinstance(values, Mapping) else None
        found = list(messages) if isinstance(messages, Sequence) else []
        # Writes not yet applied: the answers of tools that ran before an interrupt. A user
        # message there has no id yet (the reducer gives it one): it is taken once applied.
        for _task, channel, value in item.pending_writes or ():
            if channel == "messages":
                written = value if isinstance(value, list) else [value]
                found += [m for m in written if not isinstance(m, HumanMessage)]
        yield found


def _ledger_outcomes(
    db: str,
    namespace: tuple[str, ...],
    threads: Sequence[str],
    *,
    limit: int = DEFAULT_MAX_ITEM_BYTES,
    err: TextIO | None = None,
) -> dict[str, dict[str, tuple[Any, bool]]]:
    """The recorded outcomes of the replay ledger under `namespace`, by thread and call id.

    A database without a store (a checkpointer only) has no ledger: nothing is found. A row
    above `--max-item-bytes` or unreadable is left out with a line; it only loses what it
    would add.
    """
    found: dict[str, dict[str, tuple[Any, bool]]] = {}
    try:
        with open_store(db, read_only=True) as store:
            ledger = ReplayLedger(store, namespace=namespace)
            for thread in threads:
                rows, problems = read_ledger(store, ledger, thread, limit=limit, uri=db)
                for problem in problems:
                    print(f"{_NAME}: thread {thread!r}: left out {problem}", file=err or sys.stderr)
                for row in rows:
                    if not row.has_outcome or not isinstance(row.result, Mapping):
                        continue
                    failed = row.status == "failed" or row.result.get("status") == "error"
                    content = row.result.get("content", "")
                    found.setdefault(thread, {})[row.tool_call_id] = (content, failed)
    except StoreURIError:
        return found
    return found
