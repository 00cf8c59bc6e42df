"""Reading someone else's database item by item: a size bound per item, one line per bad item."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langgraph_replay_guard._compat import checkpoint_sizes, store_value_sizes
from langgraph_replay_guard.cli.store_uri import scrub
from langgraph_replay_guard.replay.ledger import LedgerEntry

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
    from langgraph.store.base import BaseStore, Item

    from langgraph_replay_guard.storage.ledger_io import ReplayLedger

__all__ = [
    "DEFAULT_MAX_ITEM_BYTES",
    "DEFAULT_MAX_RECORD_BYTES",
    "Checkpoint",
    "add_max_item_bytes_option",
    "add_max_record_bytes_option",
    "describe",
    "human",
    "parse_bytes",
    "read_checkpoints",
    "read_ledger",
    "read_store_item",
    "too_big",
]

DEFAULT_MAX_ITEM_BYTES = 16 * 1024 * 1024
"""Most bytes the CLI reads for one item (a checkpoint, a ledger row, a store item): 16 MiB.

A guard's checkpoint or ledger row is a few kilobytes to a few megabytes; an item above this
is refused before it is loaded (the database tells its size) and named in one line.
"""

DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024
"""Most bytes `replay-guard records` reads for one execution record, its header and body
chunks together: 64 MiB. Each chunk is at most 4 MB and bounded by `--max-item-bytes` too; a
record of many legitimate chunks would otherwise still be loaded whole.
"""

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2, "g": 1024**3}
_UNITS["gb"] = 1024**3
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
_DETAIL_CHARS = 200
_LEDGER_ROWS = 1000  # as many rows as `ReplayLedger.rows` reads


def parse_bytes(text: str) -> int:
    """Parse a `--max-item-bytes` value: bytes, or a number with K, M or G (powers of 1024).

    Raises:
        argparse.ArgumentTypeError: Not such a size, or below 1 KB.
    """
    match = _SIZE.fullmatch(text)
    unit = _UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        msg = f"{text!r} is not a size; give bytes or a number with K, M or G, as in 64M"
        raise argparse.ArgumentTypeError(msg)
    size = int(float(match.group(1)) * unit)
    if size < 1024:
        msg = f"{text!r} is below 1K; a checkpoint alone is bigger, give e.g. 64M"
        raise argparse.ArgumentTypeError(msg)
    return size


def add_max_item_bytes_option(parser: argparse.ArgumentParser) -> None:
    """Add `--max-item-bytes` (parsed by `parse_bytes`) to a sub-command."""
    parser.add_argument(
        "--max-item-bytes",
        type=parse_bytes,
        default=DEFAULT_MAX_ITEM_BYTES,
        metavar="SIZE",
        help="read no checkpoint or ledger row bigger than this (the database tells the size "
        "before anything is loaded); a bigger one is named and left out "
        f"(default: {human(DEFAULT_MAX_ITEM_BYTES)}; K, M, G accepted, as in 512M)",
    )


def add_max_record_bytes_option(parser: argparse.ArgumentParser) -> None:
    """Add `--max-record-bytes` (parsed by `parse_bytes`) to a `records` action."""
    parser.add_argument(
        "--max-record-bytes",
        type=parse_bytes,
        default=DEFAULT_MAX_RECORD_BYTES,
        metavar="SIZE",
        help="read no execution record whose header and body chunks together are bigger "
        "than this (sizes asked of the database first); a bigger one is named and left out "
        f"(default: {human(DEFAULT_MAX_RECORD_BYTES)}; K, M, G accepted, as in 512M)",
    )


def human(size: int) -> str:
    """A byte count as people read it (`16.0 MB`)."""
    if size >= 1024**2:
        return f"{size / 1024**2:.1f} MB"
    if size >= 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size} B"


def too_big(what: str, size: int, limit: int) -> str:
    """The line naming an item left out for its size."""
    return (
        f"{what} is {human(size)}, above --max-item-bytes {human(limit)}: not read "
        "(raise --max-item-bytes to read it)"
    )


def describe(exc: BaseException, uri: str) -> str:
    """One line saying why an item could not be decoded (no traceback, no password)."""
    if isinstance(exc, RecursionError):
        return "nested too deeply to decode"
    text = " ".join(str(exc).split())
    if len(text) > _DETAIL_CHARS:
        text = f"{text[:_DETAIL_CHARS]}..."
    return scrub(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, uri)


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of a thread, as read (or not).

    Attributes:
        checkpoint_id: Its id (None when the saver cannot list them without loading).
        value: What the saver read; None when it was left out (`problem` says why).
        problem: Why it was not read: too big, or it could not be decoded.
        oversized: It was left out for its size (not loaded at all).
    """

    checkpoint_id: str | None
    value: CheckpointTuple | None
    problem: str | None = None
    oversized: bool = False


def read_checkpoints(
    saver: BaseCheckpointSaver[Any],
    thread: str,
    *,
    limit: int,
    uri: str,
    latest_only: bool = False,
) -> Iterator[Checkpoint]:
    """The root checkpoints of a thread, oldest first (or only the latest), each read alone.

    A checkpoint whose size (measured in the database) is above `limit` is not loaded, and
    one that fails to decode (a pickle-typed or corrupt blob, nesting past the recursion
    limit) is reported: either way the next one is still read.
    """
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    sizes = checkpoint_sizes(saver, thread)
    if sizes is None:  # a saver that cannot be measured: read as it reads
        try:
            found = [saver.get_tuple(config)] if latest_only else list(saver.list(config))
        except Exception as exc:  # a hostile blob: a line, never a traceback
            yield Checkpoint(None, None, f"cannot read it ({describe(exc, uri)})")
            return
        for item in reversed(found) if not latest_only else found:
            if item is not None:
                ident = item.config["configurable"].get("checkpoint_id")
                yield Checkpoint(ident, item)
        return
    chosen = sizes[:1] if latest_only else list(reversed(sizes))
    for checkpoint_id, size in chosen:
        if size > limit:
            yield Checkpoint(checkpoint_id, None, too_big("it", size, limit), oversized=True)
            continue
        one: Any = {"configurable": {**config["configurable"], "checkpoint_id": checkpoint_id}}
        try:
            yield Checkpoint(checkpoint_id, saver.get_tuple(one))
        except Exception as exc:
            yield Checkpoint(checkpoint_id, None, f"cannot read it ({describe(exc, uri)})")


def read_store_item(
    store: BaseStore, namespace: tuple[str, ...], key: str, *, limit: int, uri: str
) -> tuple[Item | None, str | None]:
    """One store item, unless it is too big or unreadable.

    Returns:
        The item (None when absent or left out) and why it was left out.
    """
    sizes = store_value_sizes(store, namespace) or {}
    size = sizes.get((namespace, key))
    if size is not None and size > limit:
        return None, too_big("it", size, limit)
    try:
        return store.get(namespace, key), None
    except Exception as exc:
        return None, f"cannot read it ({describe(exc, uri)})"


def read_ledger(
    store: BaseStore, ledger: ReplayLedger, thread: str, *, limit: int, uri: str
) -> tuple[list[LedgerEntry], list[str]]:
    """A thread's ledger rows, leaving out (and naming) rows too big or unreadable.

    Returns:
        The rows read, and one line per row (or per ledger) left out.
    """
    namespace = ledger.namespace(thread)
    problems: list[str] = []
    try:
        sizes = store_value_sizes(store, namespace)
        big = {name: size for name, size in (sizes or {}).items() if size > limit}
        if not big:
            items: list[Any] = list(store.search(namespace, limit=_LEDGER_ROWS))
        else:  # read the others one by one: a search would load the big ones too
            items = []
            for (where, key), size in sorted((sizes or {}).items())[:_LEDGER_ROWS]:
                if size > limit:
                    problems.append(f"ledger row {key!r}: {too_big('it', size, limit)}")
                    continue
                item = store.get(where, key)
                if item is not None:
                    items.append(item)
    except Exception as exc:  # the store itself fails: the ledger is left out, in one line
        return [], [f"ledger of thread {thread!r}: cannot read it ({describe(exc, uri)})"]
    rows: list[LedgerEntry] = []
    for item in items:
        try:
            rows.append(LedgerEntry.from_value(item.key, item.value))
        except Exception as exc:
            problems.append(f"ledger row {item.key!r}: cannot read it ({describe(exc, uri)})")
    return rows, problems
