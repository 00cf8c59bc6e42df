"""`replay-guard records`: list, show, replay, verify and invalidate execution records."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from langgraph_replay_guard import json_depth
from langgraph_replay_guard._compat import store_value_sizes
from langgraph_replay_guard.cli.bounded import (
    add_max_item_bytes_option,
    add_max_record_bytes_option,
    human,
    too_big,
)
from langgraph_replay_guard.cli.common import add_namespace_option
from langgraph_replay_guard.cli.store_uri import StoreURIError, mask_uri, open_store
from langgraph_replay_guard.cli.terminal import inline, json_safe, terminal_safe
from langgraph_replay_guard.errors import NotReplayableError, ReplayHashMismatchError
from langgraph_replay_guard.records.engine import ReplayedRunError, ReplayEngine, load_record
from langgraph_replay_guard.records.files import RecordFileError, RecordFiles
from langgraph_replay_guard.records.integrity import verify_record_integrity
from langgraph_replay_guard.records.model import ExecutionRecord, RecordNotFoundError
from langgraph_replay_guard.records.store import RecordStore, StoredRecordInfo

__all__ = ["DESCRIPTION", "add_arguments", "run"]

EXIT_OK = 0
EXIT_NOT_REPLAYABLE = 1  # also: a replayed error response, a failed verification
EXIT_USAGE = 2  # a bad --db, an unknown id, an unreadable file

_Records = RecordStore | RecordFiles

_PREVIEW_CHARS = 2000


DESCRIPTION = (
    "Execution records of guarded graph runs (ReplayGuard(..., record=True)), read "
    "from a SQLite file or a PostgreSQL database; show, replay and verify also read "
    "record files (--file: this package's records saved as JSON, or IntentusNet's "
    "records/ folder). Exit status: 0 success; 1 a record is not replayable, replays "
    "an error, or fails verification; 2 bad arguments, database, file or id."
)
"""What `replay-guard records --help` says of the command."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `records` sub-command's arguments and its actions."""
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help_text: str, *, files: bool = False) -> argparse.ArgumentParser:
        p = actions.add_parser(name, help=help_text, description=help_text)
        db_help = (
            "SQLite file (path or sqlite:///path), postgresql:// URI or libpq "
            "'host=... dbname=...' string"
        )
        if files:
            source = p.add_mutually_exclusive_group(required=True)
            source.add_argument("--db", metavar="URI", help=db_help)
            source.add_argument(
                "--file",
                dest="files",
                action="append",
                type=Path,
                metavar="PATH",
                help="an execution record JSON file, or a directory of them (IntentusNet's "
                "records/ folder); repeatable, instead of --db",
            )
        else:
            p.add_argument("--db", required=True, metavar="URI", help=db_help)
        add_namespace_option(p, "its records are under PARTS/records")
        p.add_argument("--json", action="store_true", help="print JSON")
        add_max_item_bytes_option(p)  # a record's header and each 4 MB body chunk are items
        if name != "list":  # list reads headers only
            add_max_record_bytes_option(p)  # and all of them together
        return p

    p = action("list", "list records, newest first")
    p.add_argument("--limit", type=int, default=50, help="show at most N records (default 50)")

    id_help = "the record's id (optional with a single --file)"
    p = action("show", "show one record: header, events and response", files=True)
    p.add_argument("execution_id", nargs="?", metavar="ID", help=id_help)

    p = action("replay", "print a record's recorded response, without running anything", files=True)
    p.add_argument("execution_id", nargs="?", metavar="ID", help=id_help)
    p.add_argument(
        "--force", action="store_true", help="print it even if the record is not replayable"
    )
    p.add_argument(
        "--envelope",
        type=Path,
        metavar="FILE",
        help="JSON envelope of the request; refuse if it does not match the record",
    )

    p = action(
        "verify", "check records' integrity (envelope hash, event order, storage)", files=True
    )
    p.add_argument("execution_ids", nargs="*", metavar="ID", help="records to check (all)")

    p = action("invalidate", "mark a record manually_invalidated: never replayed unless forced")
    p.add_argument("execution_id", metavar="ID")


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run one `records` action.

    Args:
        args: Parsed arguments.
        out: Where results go (stdout).
        err: Where problems and warnings go (stderr).

    Returns:
        The exit status.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    handlers: dict[str, Callable[[Any, argparse.Namespace, TextIO, TextIO], int]] = {
        "list": _list,
        "show": _show,
        "replay": _replay,
        "verify": _verify,
        "invalidate": _invalidate,
    }
    if not getattr(args, "json", False):
        out = terminal_safe(out)  # a record's events and errors are the database's text
    err = terminal_safe(err)  # problems and warnings quote the database's text too
    files = getattr(args, "files", None)
    if not files and args.action in {"show", "replay"} and args.execution_id is None:
        print(f"replay-guard records {args.action}: give the record's ID", file=err)
        return EXIT_USAGE
    try:
        if files:  # only show, replay and verify take --file
            # A record file is read whole: bounded like a record in a database.
            source = RecordFiles(files, max_bytes=getattr(args, "max_record_bytes", None))
            return handlers[args.action](source, args, out, err)
        # Only `invalidate` writes; every other action opens the database read-only.
        with open_store(args.db, read_only=args.action != "invalidate") as store:
            namespace = (*args.namespace, "records")
            records = RecordStore(store, namespace=namespace)
            # Sizes first (the database tells them, nothing is loaded): a hostile writer's
            # 300 MB body chunk must not be read whole, as inspect and export refuse it too.
            bodies = args.action != "list"  # list reads headers only
            limits = (args.max_item_bytes, getattr(args, "max_record_bytes", None))
            oversized = _oversized(records, _named_ids(args), *limits, bodies=bodies)
            for line in oversized:
                print(f"replay-guard records: {line}", file=err)
            if oversized:
                return EXIT_USAGE
            return handlers[args.action](records, args, out, err)
    except StoreURIError as exc:
        print(f"replay-guard records: {exc}", file=err)
        return EXIT_USAGE
    except RecordFileError as exc:
        print(f"replay-guard records: {exc}", file=err)
        return EXIT_USAGE
    except RecordNotFoundError as exc:
        where = f"files {', '.join(map(str, files))}" if files else f"database {mask_uri(args.db)}"
        print(f"replay-guard records: {exc} ({where})", file=err)
        return EXIT_USAGE


def _named_ids(args: argparse.Namespace) -> set[str] | None:
    """The record ids an action reads (None: every record, as list and verify without ids)."""
    if args.action == "verify":
        return set(args.execution_ids) or None
    if args.action == "list":
        return None
    return {args.execution_id}


def _oversized(
    records: RecordStore,
    ids: set[str] | None,
    limit: int,
    record_limit: int | None,
    *,
    bodies: bool,
) -> list[str]:
    """One line per item of these records above `limit`, and per record above `record_limit`.

    Nothing is loaded: the database tells the sizes of the header and of each body chunk.
    """
    lines: list[str] = []
    totals: dict[str, list[int]] = {}  # record -> [bytes, body chunks]
    parts = [(records.namespace, "header")]
    if bodies:
        parts.append((records.body_namespace, "body"))
    for namespace, part in parts:
        sizes = store_value_sizes(records.store, namespace) or {}
        for (item_namespace, key), size in sorted(sizes.items()):
            owner = key if part == "header" else key.rpartition("/")[0]
            if item_namespace != namespace or (ids is not None and owner not in ids):
                continue
            total = totals.setdefault(owner, [0, 0])
            total[0] += size
            total[1] += part == "body"
            if size > limit:
                what = "its header" if part == "header" else f"its body chunk {key!r}"
                lines.append(f"record {owner!r}: {too_big(what, size, limit)}")
    if record_limit is None:
        return lines
    for owner, (size, chunks) in sorted(totals.items()):
        # A record made of many chunks each below --max-item-bytes (50 legitimate 4 MB
        # chunks) would be loaded whole: the record as a whole is bounded as well.
        if size > record_limit:
            lines.append(
                f"record {owner!r}: its header and {chunks} body chunks are {human(size)}, "
                f"above --max-record-bytes {human(record_limit)}: not read "
                "(raise --max-record-bytes to read it)"
            )
    return lines


def _load(records: _Records, execution_id: str | None) -> ExecutionRecord:
    """The record an action names: by id, or a single --file's record."""
    if isinstance(records, RecordFiles):
        return records.pick(execution_id)
    assert execution_id is not None  # `run` refuses a --db action without an id
    return load_record(records, execution_id)


def _dump(value: Any, out: TextIO) -> None:
    # Readable non-ASCII text, but the characters a terminal obeys (C1, bidi) escaped.
    out.write(json_safe(json.dumps(value, indent=2, ensure_ascii=False)))
    out.write("\n")


def _status(header_replayable: bool, reason: str | None) -> str:
    return "replayable" if header_replayable else (reason or "not replayable")


def _info_json(info: StoredRecordInfo) -> dict[str, Any]:
    return {
        "executionId": info.execution_id,
        "header": info.header.model_dump() if info.header else None,
        "events": info.events,
        "bodyChars": info.chars,
        "failed": info.failed,
        "problems": list(info.problems),
    }


def _list(records: RecordStore, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    infos = records.list_records(limit=max(args.limit, 0))
    for info in infos:
        if info.problems:  # listed as "unreadable"; `verify` counts it as corrupted
            problems = inline("; ".join(info.problems))
            print(
                f"replay-guard records: warning: record {info.execution_id!r} cannot be read: "
                f"{problems}",
                file=err,
            )
    if args.json:
        _dump([_info_json(i) for i in infos], out)
        return EXIT_OK
    if not infos:
        print("no execution records", file=out)
        return EXIT_OK
    rows = [("EXECUTION ID", "CREATED (UTC)", "STATUS", "EVENTS", "SIZE", "RESPONSE")]
    for info in infos:
        header = info.header
        status = _status(header.replayable, header.replayableReason) if header else "unreadable"
        rows.append(
            (
                inline(info.execution_id),
                inline(header.createdUtcIso) if header else "?",
                inline(status),
                str(info.events),
                _size(info.chars),
                "error" if info.failed else ("ok" if header else "?"),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)), file=out
        )
    return EXIT_OK


def _size(chars: int) -> str:
    if chars >= 1024 * 1024:
        return f"{chars / (1024 * 1024):.1f} MB"
    if chars >= 1024:
        return f"{chars / 1024:.1f} KB"
    return f"{chars} B"


def _preview(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False)
    if len(text) <= _PREVIEW_CHARS:
        return text
    return f"{text[:_PREVIEW_CHARS]}\n... ({len(text) - _PREVIEW_CHARS} more characters; --json)"


def _show(records: _Records, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    record = _load(records, args.execution_id)
    if args.json:
        data = record.to_json_data()
        data["problems"] = list(record.problems)
        _dump(data, out)
        return EXIT_OK
    header = record.header
    engine = ReplayEngine(record)
    reason = engine.not_replayable_reason()
    print(f"execution id:   {inline(header.executionId)}", file=out)
    print(f"created (UTC):  {inline(header.createdUtcIso)}", file=out)
    print(f"envelope hash:  {inline(header.envelopeHash)}", file=out)
    print(f"status:         {inline('replayable' if reason is None else reason)}", file=out)
    for problem in engine.integrity.problems:
        print(f"problem:        {inline(problem)}", file=out)
    for warning in engine.integrity.warnings:
        print(f"warning:        {inline(warning)}", file=out)
    print(f"envelope:\n{_preview(record.envelope)}", file=out)
    print(f"events ({len(record.events)}):", file=out)
    for event in record.events:
        print(f"  {inline(event.seq):>4}  {inline(_event_line(event.model_dump()))}", file=out)
    final = record.finalResponse
    if final is None:
        print("final response: none (the run did not finish)", file=out)
        return EXIT_OK
    if final.error is not None:
        error = f"{inline(final.error.label)}: {inline(final.error.message)}"
        print(f"final response: error {error}", file=out)
    elif final.failed:
        print("final response: error (no details recorded)", file=out)
    else:
        print(f"final response:\n{_preview(final.payload)}", file=out)
    print(f"metadata:\n{_preview(final.metadata)}", file=out)
    return EXIT_OK


def _event_line(event: dict[str, Any]) -> str:
    kind = str(event.get("kind") or event.get("type") or "?")  # `type`: the contract's events
    if kind == "guard_decision":
        return f"{kind}: {event.get('tool')} {event.get('verdict')} ({event.get('reason')})"
    if kind.startswith("tool"):
        return f"{kind}: {event.get('name')} {event.get('toolCallId') or ''}".rstrip()
    if kind == "model_end":
        output = event.get("output")
        kwargs = output.get("kwargs", {}) if isinstance(output, dict) else {}
        calls = [c.get("name") for c in kwargs.get("tool_calls", []) if isinstance(c, dict)]
        return f"{kind}: calls {', '.join(map(str, calls))}" if calls else f"{kind}: answer"
    if kind.startswith("model"):
        return f"{kind}: {event.get('model') or ''}".rstrip()
    return str(kind)


def _replay(records: _Records, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    record = _load(records, args.execution_id)
    env = None
    if args.envelope is not None:
        try:
            env = json_depth.loads(args.envelope.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(
                f"replay-guard records: cannot read the envelope file {str(args.envelope)!r}: "
                f"{exc}",
                file=err,
            )
            return EXIT_USAGE
        if not isinstance(env, dict):
            print("replay-guard records: the envelope file must hold a JSON object", file=err)
            return EXIT_USAGE
    try:
        result = ReplayEngine(record).replay(env, force=args.force)
    except (NotReplayableError, ReplayHashMismatchError) as exc:
        print(f"replay-guard records: {exc}", file=err)
        return EXIT_NOT_REPLAYABLE
    except ReplayedRunError as exc:
        for warning in exc.result.warnings:
            print(f"warning: {inline(warning)}", file=err)
        if args.json:
            _dump({**exc.result.model_dump(), "error": exc.error.model_dump()}, out)
        print(f"replay-guard records: {inline(exc)}", file=err)
        return EXIT_NOT_REPLAYABLE
    for warning in result.warnings:
        print(f"warning: {inline(warning)}", file=err)
    _dump(result.model_dump() if args.json else result.payload, out)
    return EXIT_OK


def _verify_entry(
    execution_id: str, record: ExecutionRecord | RecordFileError, file: Path | None
) -> dict[str, Any]:
    entry: dict[str, Any] = {"executionId": execution_id}
    if file is not None:
        entry["file"] = str(file)
    if isinstance(record, RecordFileError):  # a file that is not a record: corrupted
        entry.update(ok=False, replayable=False, reason="record_corrupted")
        entry.update(problems=[str(record)], warnings=[])
        return entry
    integrity = verify_record_integrity(record)
    reason = ReplayEngine(record).not_replayable_reason()
    entry.update(ok=integrity.ok, replayable=reason is None, reason=reason)
    entry.update(problems=list(integrity.problems), warnings=list(integrity.warnings))
    return entry


def _verify(records: _Records, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    wanted = list(args.execution_ids)
    report: list[dict[str, Any]] = []
    if isinstance(records, RecordFiles):
        for path, loaded in records.entries():
            execution_id = path.stem if isinstance(loaded, RecordFileError) else loaded.execution_id
            if not wanted or execution_id in wanted:
                report.append(_verify_entry(execution_id, loaded, path))
        missing = [i for i in wanted if i not in {e["executionId"] for e in report}]
        if missing:
            msg = f"No execution record {missing[0]!r} in the {len(records.paths)} file(s) given."
            raise RecordNotFoundError(msg, execution_id=missing[0])
    else:
        ids = wanted or [i.execution_id for i in records.list_records()]
        for execution_id in ids:
            report.append(_verify_entry(execution_id, load_record(records, execution_id), None))
    failed = sum(1 for entry in report if not entry["ok"])
    if args.json:
        _dump(report, out)
    else:
        for entry in report:
            name = inline(entry["executionId"] + (f" ({entry['file']})" if "file" in entry else ""))
            if entry["ok"]:
                reason = inline(entry["reason"])
                note = "" if entry["replayable"] else f" (not replayable: {reason})"
                print(f"ok        {name}{note}", file=out)
                for warning in entry["warnings"]:
                    print(f"  warning: {inline(warning)}", file=out)
            else:
                print(f"CORRUPTED {name}: {inline('; '.join(entry['problems']))}", file=out)
        print(f"{len(report) - failed} ok, {failed} corrupted", file=out)
    return EXIT_NOT_REPLAYABLE if failed else EXIT_OK


def _invalidate(records: RecordStore, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        header = records.invalidate(args.execution_id)
    except ValueError as exc:  # a damaged header: nothing to mark
        print(f"replay-guard records: {exc}", file=err)
        return EXIT_NOT_REPLAYABLE
    if args.json:
        _dump(header.model_dump(), out)
    else:
        print(f"invalidated {inline(header.executionId)} (manually_invalidated)", file=out)
    return EXIT_OK
