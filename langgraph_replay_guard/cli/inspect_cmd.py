"""`replay-guard inspect`: a thread's guard state and ledger rows, read from a database."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, TextIO

from langgraph_replay_guard._compat import store_value_sizes
from langgraph_replay_guard.cli.bounded import (
    add_max_item_bytes_option,
    describe,
    read_checkpoints,
    read_ledger,
    read_store_item,
    too_big,
)
from langgraph_replay_guard.cli.common import (
    EXIT_UNDECODED,
    add_namespace_option,
    report_undecoded,
)
from langgraph_replay_guard.cli.store_uri import (
    StoreURIError,
    mask_uri,
    missing_tables,
    not_a_checkpoint_database,
    open_checkpointer,
    open_store,
)
from langgraph_replay_guard.cli.terminal import inline, terminal_safe
from langgraph_replay_guard.decisions.state import GuardView
from langgraph_replay_guard.integrations.callbacks.marks import (
    UnknownOutcome,
    mark_from,
    outcome_of,
)
from langgraph_replay_guard.integrations.callbacks.scopes import scopes_namespace
from langgraph_replay_guard.integrations.calls import GUARD_CHANNEL
from langgraph_replay_guard.integrations.prompt import guard_view
from langgraph_replay_guard.replay.ledger import LedgerEntry, store_label
from langgraph_replay_guard.replay.safe_decode import Undecoded, collect_undecoded
from langgraph_replay_guard.storage.ledger_io import ReplayLedger

_NAME = "replay-guard inspect"

__all__ = ["DESCRIPTION", "add_arguments", "run"]


DESCRIPTION = (
    "Read the latest checkpoint of a thread (every guard channel in it), the callback "
    "handler's state and the replay ledger rows, from a SQLite file or a PostgreSQL "
    "URI: what LangGraph Studio shows, for a terminal. Opens the databases read-only: "
    "nothing is written to them. An item bigger than --max-item-bytes or that cannot be "
    "decoded is left out with one line on standard error. Exit status: 0 when something "
    "was found and nothing left out, 1 when nothing was found or an item was left out, 2 "
    "when a database cannot be opened."
)
"""What `replay-guard inspect --help` says of the command."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `inspect` sub-command's arguments."""
    parser.add_argument(
        "--db",
        required=True,
        help="the checkpointer's database: SQLite file, sqlite:///path, postgresql:// URI or "
        "libpq 'host=... dbname=...'",
    )
    parser.add_argument(
        "--store",
        metavar="URI",
        help="the guard's store (its replay ledger and callback-handler state), when it is "
        "not the --db database: a SQLite file or a PostgreSQL URI (default: --db)",
    )
    parser.add_argument("--thread", required=True, help="thread id")
    add_namespace_option(parser, "its ledger and callback-handler state")
    add_max_item_bytes_option(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Print the guard state and ledger of one thread.

    Both databases are opened read-only. When the store holds no replay ledger at all (no
    store table, or nothing under the namespace), the report says so rather than showing an
    empty ledger: the guard's store may be another database (`--store`).

    Each item (the latest checkpoint, a ledger row, the callback handler's state) is read
    alone: one bigger than `--max-item-bytes` (measured in the database, before it is
    loaded) or one that cannot be decoded is left out with one line on standard error, and
    the rest is shown. Nothing a database names is imported or run: a value of a type off
    the allow-list (or a pickle blob) is shown as `<not decoded: ...>`, one line each on
    standard error.

    Returns:
        0 when anything was found and nothing left out, 1 when the thread has neither or an
        item was left out, 2 for a bad `--db` or `--store` (a missing file, a database
        with no checkpoint table and no store table, or without checkpoints beside a
        `--store`), 3 when the report is otherwise
        complete but some value was not decoded.
    """
    out = out or sys.stdout
    err = terminal_safe(err or sys.stderr)  # its lines quote the database's keys and errors
    with collect_undecoded() as undecoded:
        status = _run(args, out, err)
    if status != 2 and report_undecoded(undecoded, "replay-guard inspect", err):
        return EXIT_UNDECODED
    return status


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    namespace: tuple[str, ...] = args.namespace
    store_uri: str = args.store or args.db
    limit: int = args.max_item_bytes
    problems: list[str] = []  # one line per item left out (too big, or undecodable)
    try:
        with open_checkpointer(args.db, read_only=True) as saver:
            no_checkpoints = missing_tables(saver)
            refusal = not_a_checkpoint_database(args.db, saver)
            latest = list(
                read_checkpoints(saver, args.thread, limit=limit, uri=args.db, latest_only=True)
            )
        option = "--store" if args.store else "--db"
        with open_store(store_uri, read_only=True, option=option) as store:
            # A --db without checkpoints is read only as the guard's store (a callback
            # handler without a checkpointer keeps its state there); anything else is the
            # wrong database, not an empty thread.
            other_store = args.store is not None and args.store != args.db
            if no_checkpoints and (other_store or missing_tables(store)):
                print(f"{_NAME}: {refusal}", file=err)
                return 2
            ledger = ReplayLedger(store, namespace=namespace)
            rows, row_problems = read_ledger(store, ledger, args.thread, limit=limit, uri=store_uri)
            problems += row_problems
            handler_item, handler_problem = read_store_item(
                store, scopes_namespace(namespace), args.thread, limit=limit, uri=store_uri
            )
            if handler_problem is not None:
                problems.append(f"callback handler state: {handler_problem}")
            marks, mark_problems = _handler_marks(store, namespace, args.thread, limit)
            problems += mark_problems
            missing = _ledger_missing(store, ledger, namespace, mask_uri(store_uri), args)
    except StoreURIError as exc:
        print(f"{_NAME}: {exc}", file=err)
        return 2
    channels: dict[str, Any] = {}
    checkpoint_id = None
    for read in latest:
        checkpoint_id = read.checkpoint_id
        if read.problem is not None:
            problems.append(f"latest checkpoint {read.checkpoint_id or '?'}: {read.problem}")
        if read.value is not None:
            checkpoint_id = read.value.config["configurable"].get("checkpoint_id")
            stored: Any = read.value.checkpoint  # a hostile blob may decode to anything
            values = stored.get("channel_values", {}) if isinstance(stored, Mapping) else None
            if isinstance(values, Mapping):
                channels = {k: v for k, v in values.items() if str(k).startswith(GUARD_CHANNEL)}
            else:
                problems.append(f"latest checkpoint {checkpoint_id}: no channel values in it")
    if handler_item is not None:
        channels["callback handler"] = handler_item.value
    # A channel value a blob named off the allow-list was never built: shown as it is.
    opaque = {name: str(value) for name, value in channels.items() if isinstance(value, Undecoded)}
    views: dict[str, GuardView] = {}
    for name, value in sorted(channels.items()):
        if name in opaque:
            continue
        try:
            views[name] = guard_view(value)
        except Exception as exc:  # a hostile channel value: named, the others still shown
            problems.append(f"guard channel {name!r}: cannot read it ({describe(exc, args.db)})")
    ledger_json = [_row_json(row, problems) for row in rows] if args.json else []
    for problem in problems:
        print(f"{_NAME}: left out: {inline(problem)}", file=err)
    found = bool(views or opaque or rows or marks)
    if args.json:
        report = {
            "thread": args.thread,
            "checkpoint_id": checkpoint_id,
            "guard": {name: _view_json(view) for name, view in views.items()},
            "guard_not_decoded": opaque,
            "ledger": ledger_json,
            "ledger_found": missing is None,
            "ledger_missing": missing,
            "handler_unknown_outcomes": [asdict(mark) for mark in marks],
            "left_out": problems,
        }
        json.dump(report, out, indent=2, default=str)
        out.write("\n")
        return 0 if found and not problems else 1
    out = terminal_safe(out)  # tool names, arguments and errors are the database's text
    _print_text(args.thread, checkpoint_id, views, opaque, rows, missing, out)
    _print_marks(marks, out)
    return 0 if found and not problems else 1


MAX_MARKS_SHOWN = 1000
"""Most callback-handler marks `inspect` lists for one thread (it says when there are more)."""


def _handler_marks(
    store: Any, namespace: tuple[str, ...], thread: str, limit: int
) -> tuple[list[UnknownOutcome], list[str]]:
    """The unknown outcomes a callback handler keeps in the store for a thread (its marks).

    Each is an item of its own (`ReplayGuardCallbackHandler` claims an unsafe call there before
    its body runs); an item that is not a mark, or is above `limit` bytes, is left out with a
    line.
    """
    where = (*scopes_namespace(namespace), "unknown", store_label(thread))
    big: list[str] = []
    try:
        # Sizes first, as for ledger rows: a search would load a hostile 300 MB mark whole.
        sizes = store_value_sizes(store, where) or {}
        if not any(size > limit for size in sizes.values()):
            items = store.search(where, limit=MAX_MARKS_SHOWN + 1)
        else:
            items = []
            for (item_ns, key), size in sorted(sizes.items())[: MAX_MARKS_SHOWN + 1]:
                if size > limit:
                    big.append(f"callback handler mark {key!r}: {too_big('it', size, limit)}")
                elif (item := store.get(item_ns, key)) is not None:
                    items.append(item)
    except Exception as exc:  # a damaged table: named, the rest of the report still shown
        return [], [f"callback handler marks: cannot read them ({type(exc).__name__})"]
    marks: list[UnknownOutcome] = []
    problems: list[str] = big
    for item in items[:MAX_MARKS_SHOWN]:
        mark = mark_from(item.value)
        if mark is None:
            problems.append(f"callback handler mark {item.key!r}: not a mark")
        else:
            marks.append(outcome_of(mark))
    if len(items) > MAX_MARKS_SHOWN:
        problems.append(
            f"callback handler marks: more than {MAX_MARKS_SHOWN}; list them all with "
            "handler.unknown_outcomes(thread_id, limit, offset)"
        )
    return marks, problems


def _print_marks(marks: list[UnknownOutcome], out: TextIO) -> None:
    if not marks:
        return
    print(f"\ncallback handler: {len(marks)} unknown outcome(s)", file=out)
    for mark in marks:
        what = mark.error or "its end was never recorded (still running, or its process died)"
        shown = f"{inline(mark.tool)}({inline(mark.args)})  {inline(what)}"
        print(f"  {shown}  <- handler.resolve(...) it", file=out)


def _ledger_missing(
    store: Any,
    ledger: ReplayLedger,
    namespace: tuple[str, ...],
    shown: str,
    args: argparse.Namespace,
) -> str | None:
    """Why no replay ledger at all was found in the store (None when there is one)."""
    hint = "" if args.store else "; if the guard's store is another database, give --store"
    if missing_tables(store):
        return f"{shown} has no LangGraph store table{hint}"
    if store.list_namespaces(prefix=(*ledger.prefix, "ledger"), limit=1):
        return None
    name = "/".join(namespace)
    return f"{shown} holds no replay ledger under the namespace {name!r} (--namespace){hint}"


def _row_json(row: LedgerEntry, problems: list[str]) -> dict[str, Any]:
    """A ledger row for `--json`; one whose values cannot be written is named instead."""
    value = {"key": row.key, **row.to_value()}
    try:
        json.dumps(value, default=str)
    except (ValueError, TypeError, RecursionError) as exc:
        problems.append(f"ledger row {row.key!r}: cannot write it as JSON ({exc})")
        return {"key": row.key, "status": row.status, "tool": row.tool, "unreadable": True}
    return value


def _view_json(view: GuardView) -> dict[str, Any]:
    data = asdict(view)
    data["stop"] = dict(view.stop) if view.stop is not None else None
    return data


def _print_text(
    thread: str,
    checkpoint_id: str | None,
    views: Mapping[str, GuardView],
    opaque: Mapping[str, str],
    rows: list[LedgerEntry],
    missing: str | None,
    out: TextIO,
) -> None:
    where = f"latest checkpoint {checkpoint_id}" if checkpoint_id else "no checkpoint"
    print(f"thread {inline(thread)} ({inline(where)})", file=out)
    if not views and not opaque:
        print("\nno guard state in this thread", file=out)
    for name, view in views.items():
        _print_view(name, view, out)
    for name, shown in sorted(opaque.items()):
        print(f"\n[{inline(name)}]\n  {inline(shown)}", file=out)
    if missing is not None and not rows:
        print(f"\nreplay ledger: NOT FOUND: {inline(missing)}", file=out)
        print("  (an unknown outcome there would not show here)", file=out)
        return
    print(f"\nreplay ledger: {len(rows)} row(s)", file=out)
    for row in rows:
        when = inline(row.finished_at or row.started_at or "-")
        extra = ""
        if row.outcome_unknown:
            extra = "  <- outcome unknown: guard.resolve(...) it"
        if row.resolved_by:
            extra = f"  (resolved by {inline(row.resolved_by)})"
        print(
            f"  {inline(row.status):<11} {inline(row.tool):<24} {inline(row.replay):<10} "
            f"attempts {inline(row.attempts)}  {when}  tool_call_id "
            f"{inline(row.tool_call_id)}{extra}",
            file=out,
        )
        if row.last_error:
            print(f"              last error: {inline(row.last_error)}", file=out)


def _print_view(name: str, view: GuardView, out: TextIO) -> None:
    """One guard state, under the channel's own key names (as Studio and `--json` show them)."""
    print(f"\n[{inline(name)}]", file=out)
    print(
        f"  turn {inline(view.turn)}  epoch {inline(view.epoch)}  calls {inline(view.calls)} "
        "(this turn)",
        file=out,
    )
    totals = view.totals
    print(
        f"  totals: calls {inline(totals.calls)}, blocked {inline(totals.blocked)}, "
        f"aborts {inline(totals.aborts)} "
        "(whole thread)",
        file=out,
    )
    if view.stop is not None:
        print(
            f"  stop: {inline(view.stop_reason)} on '{inline(view.stop.get('tool'))}' "
            f"(count {inline(view.stop.get('count'))})",
            file=out,
        )
    sections = {
        "counters": [f"{inline(c.tool):<28} count {inline(c.count)}" for c in view.counters],
        "recent_calls": [
            f"{inline(c.tool):<28} {inline(c.outcome):<8} epoch {inline(c.epoch)}"
            for c in view.recent_calls
        ],
        "blocked": [
            f"{inline(tool):<28} {inline(reason)} (count {inline(n)})"
            for tool, reason, n in view.blocked
        ],
        "failures (same failure in a row)": [
            f"{inline(tool):<28} count {inline(n)}" for tool, n in view.failures
        ],
        "shadow (what enforcing would have changed, whole thread)": [
            f"{inline(reason):<28} calls blocked {inline(blocked)}, runs stopped {inline(stopped)}"
            for reason, blocked, stopped in view.shadow
        ],
    }
    for title, rows in sections.items():
        if rows:
            print(f"  {title}:", file=out)
        for row in rows:
            print(f"    {row}", file=out)
    if view.cycle:
        print(f"  cycle: {' -> '.join(map(inline, view.cycle))}", file=out)
    if view.reminder:
        print(f"  reminder (for the next model call): {inline(view.reminder)}", file=out)
    if view.notice:
        print(f"  notice: {inline(view.notice)}", file=out)
