"""Execution records in a LangGraph `BaseStore`: small headers, chunked JSON bodies."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from langgraph.store.base import GetOp, Item, PutOp, SearchOp
from pydantic import ValidationError

from langgraph_replay_guard import json_depth
from langgraph_replay_guard.records.model import (
    ExecutionRecord,
    RecordHeader,
    RecordNotFoundError,
    first_validation_error,
    invalidate_record,
)
from langgraph_replay_guard.replay.ledger import StoreOps, store_label
from langgraph_replay_guard.storage.ledger_io import arun_plan, run_plan

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore, Op

__all__ = [
    "RECORDS_NAMESPACE",
    "UNREADABLE_VALUE",
    "RecordStore",
    "RecordStorePlan",
    "StoredRecordInfo",
    "load_store_value",
]

RECORDS_NAMESPACE: tuple[str, ...] = ("replay_guard", "records")
"""Default namespace of the record headers (bodies go to `<last part>__bodies`)."""

UNREADABLE_VALUE = "__replay_guard_unreadable__"
"""Key of the stand-in value `load_store_value` returns for a row that is not a JSON object."""

T = TypeVar("T")
RecordStorePlan = Generator[StoreOps, list[Any], T]
"""A record-store operation as a generator: yields `StoreOps`, receives their results."""

FORMAT_VERSION = 1
DEFAULT_CHUNK_CHARS = 4 * 1024 * 1024
_PAGE = 100


@dataclass(frozen=True)
class StoredRecordInfo:
    """What `RecordStore.list_records` tells about one record, without loading its body.

    Attributes:
        execution_id: The record's id (the store key).
        header: The header, or None when it cannot be read.
        events: Number of recorded events.
        chars: Size of the record's JSON body in characters.
        failed: Whether the recorded run ended with an error.
        problems: Why the header cannot be read, if it cannot.
    """

    execution_id: str
    header: RecordHeader | None
    events: int
    chars: int
    failed: bool
    problems: tuple[str, ...] = ()


class RecordStore:
    r"""Saves and loads `ExecutionRecord`s in a LangGraph `BaseStore`.

    Works with every store: `InMemoryStore`, `SqliteStore`, `PostgresStore` and their async
    versions. Each record is a small header item (listed without reading bodies) in
    `namespace`, plus its body (envelope, events, response) as ASCII JSON text split into
    chunks of `chunk_chars` characters. ASCII JSON keeps NUL characters and lone
    surrogates storable (PostgreSQL's `jsonb` refuses a raw `\u0000`), keeps the
    payload's exact JSON (NaN, key order), and chunking keeps every stored value far below
    any backend's size limit whatever the payload size. A body digest in the header
    catches a truncated or edited body: such a record loads as `record_corrupted`.

    Args:
        store: The LangGraph store.
        namespace: Namespace of the headers.
        chunk_chars: Largest body chunk, in characters.
    """

    def __init__(
        self,
        store: BaseStore,
        *,
        namespace: tuple[str, ...] = RECORDS_NAMESPACE,
        chunk_chars: int = DEFAULT_CHUNK_CHARS,
    ) -> None:
        """Create the record store."""
        if not namespace:
            msg = "namespace must have at least one part, e.g. ('replay_guard', 'records')"
            raise ValueError(msg)
        if chunk_chars < 1:
            msg = f"chunk_chars must be >= 1, got {chunk_chars}"
            raise ValueError(msg)
        self.store = store
        self.namespace = tuple(store_label(part) for part in namespace)
        self.body_namespace = (*self.namespace[:-1], f"{self.namespace[-1]}__bodies")
        self.chunk_chars = chunk_chars

    # -- public API: each operation is one plan, run by the sync or the async driver --------

    def put(self, record: ExecutionRecord, *, previous_chunks: int | None = None) -> int:
        """Save a record, replacing any record with the same id.

        Args:
            record: The record.
            previous_chunks: How many body chunks the record with this id had, when the
                caller knows (0 for a new id, or what an earlier `put` returned): saves a
                read. None reads it from the store.

        Returns:
            How many body chunks were written.

        Raises:
            ValueError: The record's payload or events are not JSON data.
        """
        return self._run(self.put_plan(record, previous_chunks=previous_chunks))

    def get(self, execution_id: str) -> ExecutionRecord | None:
        """Load a record.

        A record whose stored data is damaged still loads, as not replayable with the
        reason `record_corrupted` and its `problems` set.

        Args:
            execution_id: The record's id.

        Returns:
            The record, or None when there is none with this id.
        """
        return self._run(self._get_plan(execution_id))

    def list_records(self, *, limit: int | None = None) -> list[StoredRecordInfo]:
        """Every record's header, newest first, without reading bodies.

        Args:
            limit: Return at most this many.

        Returns:
            The headers.
        """
        return self._run(self._list_plan(limit))

    def invalidate(self, execution_id: str) -> RecordHeader:
        """Mark a record `manually_invalidated`: it is never replayed unless forced.

        Only the header is rewritten; the events and the response are kept.

        Args:
            execution_id: The record's id.

        Returns:
            The new header.

        Raises:
            RecordNotFoundError: No record has this id.
        """
        return self._run(self._invalidate_plan(execution_id))

    def delete(self, execution_id: str) -> bool:
        """Delete a record and its body.

        Args:
            execution_id: The record's id.

        Returns:
            Whether there was a record.
        """
        return self._run(self._delete_plan(execution_id))

    async def aput(self, record: ExecutionRecord, *, previous_chunks: int | None = None) -> int:
        """Async twin of `put`."""
        return await self._arun(self.put_plan(record, previous_chunks=previous_chunks))

    async def aget(self, execution_id: str) -> ExecutionRecord | None:
        """Async twin of `get`."""
        return await self._arun(self._get_plan(execution_id))

    async def alist_records(self, *, limit: int | None = None) -> list[StoredRecordInfo]:
        """Async twin of `list_records`."""
        return await self._arun(self._list_plan(limit))

    async def ainvalidate(self, execution_id: str) -> RecordHeader:
        """Async twin of `invalidate`."""
        return await self._arun(self._invalidate_plan(execution_id))

    async def adelete(self, execution_id: str) -> bool:
        """Async twin of `delete`."""
        return await self._arun(self._delete_plan(execution_id))

    # -- plans: generators that yield store operations and receive their results -----------

    def put_plan(
        self, record: ExecutionRecord, *, previous_chunks: int | None = None
    ) -> RecordStorePlan[int]:
        """The plan `put` runs (for a caller that runs it inside a plan of its own)."""
        header, chunks = self._encode(record)
        if previous_chunks is None:
            previous = (yield StoreOps((self._header_get(record.execution_id),)))[0]
            previous_chunks = _chunk_count(previous)
        yield StoreOps(tuple(self._put_ops(record.execution_id, header, chunks, previous_chunks)))
        return len(chunks)

    def _get_plan(self, execution_id: str) -> RecordStorePlan[ExecutionRecord | None]:
        try:
            stored = (yield StoreOps((self._header_get(execution_id),)))[0]
        except Exception as exc:  # an undecodable row: the backend fails to parse it
            return _corrupted(execution_id, None, [f"the stored header cannot be read: {exc}"])
        if stored is None:
            return None
        header, count, problems = _read_header(execution_id, stored)
        if header is None or count is None:
            return _corrupted(execution_id, header, problems)
        # A page of chunks at a time, stopping at the first missing one: a header that claims
        # more chunks than are stored (10**12, say) costs one page, not a hang.
        chunks: list[Item | None] = []
        try:
            for start in range(0, count, _PAGE):
                stop = min(count, start + _PAGE)
                page = yield StoreOps(tuple(self._chunk_gets(execution_id, start, stop)))
                chunks.extend(page)
                if any(chunk is None for chunk in page):
                    break
        except Exception as exc:
            return _corrupted(execution_id, header, [f"the stored body cannot be read: {exc}"])
        return _decode(execution_id, header, stored, chunks, count)

    def _list_plan(self, limit: int | None) -> RecordStorePlan[list[StoredRecordInfo]]:
        items: list[Item] = []
        offset = 0
        while True:
            page = (yield StoreOps((SearchOp(self.namespace, limit=_PAGE, offset=offset),)))[0]
            items.extend(page)
            if len(page) < _PAGE:
                return _infos(self.namespace, items, limit)
            offset += _PAGE

    def _invalidate_plan(self, execution_id: str) -> RecordStorePlan[RecordHeader]:
        stored = (yield StoreOps((self._header_get(execution_id),)))[0]
        value, header = _invalidated(execution_id, stored)
        yield StoreOps((PutOp(self.namespace, execution_id, value, index=False),))
        return header

    def _delete_plan(self, execution_id: str) -> RecordStorePlan[bool]:
        stored = (yield StoreOps((self._header_get(execution_id),)))[0]
        if stored is None:
            return False
        yield StoreOps(tuple(self._delete_ops(execution_id, stored)))
        return True

    def _run(self, plan: RecordStorePlan[T]) -> T:
        return run_plan(self.store, plan)

    async def _arun(self, plan: RecordStorePlan[T]) -> T:
        return await arun_plan(self.store, plan)

    def _header_get(self, execution_id: str) -> GetOp:
        return GetOp(self.namespace, execution_id)

    def _chunk_key(self, execution_id: str, index: int) -> str:
        return f"{execution_id}/{index}"

    def _chunk_gets(self, execution_id: str, start: int, stop: int) -> list[GetOp]:
        keys = (self._chunk_key(execution_id, i) for i in range(start, stop))
        return [GetOp(self.body_namespace, key) for key in keys]

    def _encode(self, record: ExecutionRecord) -> tuple[dict[str, Any], list[str]]:
        data = record.to_json_data()
        header = data.pop("header")
        try:
            text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            msg = (
                f"Execution record {record.execution_id!r} is not JSON data ({exc}); record "
                "payloads and events must be plain JSON values."
            )
            raise ValueError(msg) from exc
        chunks = [text[i : i + self.chunk_chars] for i in range(0, len(text), self.chunk_chars)]
        final = record.finalResponse
        value = {
            "format": FORMAT_VERSION,
            "header": header,
            "body": {
                "chunks": len(chunks),
                "chars": len(text),
                "sha256": _digest(text),
            },
            "summary": {
                "events": len(record.events),
                "failed": final is not None and final.failed,
            },
        }
        return value, chunks

    def _put_ops(
        self,
        execution_id: str,
        header: dict[str, Any],
        chunks: list[str],
        previous_chunks: int,
    ) -> list[Op]:
        ops: list[Op] = [
            PutOp(self.body_namespace, self._chunk_key(execution_id, i), {"text": c}, index=False)
            for i, c in enumerate(chunks)
        ]
        for index in range(len(chunks), previous_chunks):  # a shorter body: drop the stale tail
            ops.append(PutOp(self.body_namespace, self._chunk_key(execution_id, index), None))
        ops.append(PutOp(self.namespace, execution_id, header, index=False))  # header last
        return ops

    def _delete_ops(self, execution_id: str, stored: Item) -> list[Op]:
        ops: list[Op] = [
            PutOp(self.body_namespace, self._chunk_key(execution_id, i), None)
            for i in range(_chunk_count(stored))
        ]
        ops.append(PutOp(self.namespace, execution_id, None))
        return ops


def load_store_value(content: Any) -> dict[str, Any]:
    """A store `deserializer` that never fails, so one damaged row cannot fail a whole read.

    `SqliteStore` and `PostgresStore` call their `deserializer` for each stored value that
    is not already a dict; their default raises on a row that is not a JSON object, which
    fails every search that meets the row. Given as `SqliteStore(conn,
    deserializer=load_store_value)` (as `replay-guard` does), such a row reads as
    `{UNREADABLE_VALUE: "<why>"}` instead, and `RecordStore` reports it as a damaged record.

    Args:
        content: The stored value: JSON text (SQLite), or a decoded non-object (PostgreSQL).

    Returns:
        The JSON object, or the stand-in value.
    """
    value = content
    if isinstance(content, bytes | bytearray | str):
        try:
            value = json_depth.loads(content)
        except json_depth.JSONNestingError as exc:
            return {UNREADABLE_VALUE: str(exc)}
        except ValueError as exc:  # UnicodeDecodeError included
            return {UNREADABLE_VALUE: f"not JSON ({exc})"}
    if isinstance(value, dict):
        return value
    return {UNREADABLE_VALUE: _not_an_object(value)}


_JSON_KINDS = {str: "string", list: "array", bool: "boolean", int: "number", float: "number"}


def _not_an_object(value: Any) -> str:
    kind = "null" if value is None else _JSON_KINDS.get(type(value), type(value).__name__)
    return f"not a JSON object (a JSON {kind})"


def _value_problem(value: Any) -> str | None:
    """Why a stored value is no record header, when it is not even shaped like one."""
    if not isinstance(value, dict):
        return f"the stored value is {_not_an_object(value)}"
    if UNREADABLE_VALUE in value:
        return f"the stored value is {value[UNREADABLE_VALUE]}"
    if "header" not in value:
        keys = ", ".join(sorted(map(str, value))[:5]) or "none"
        return f"the stored value is not a record header (its keys: {keys})"
    return None


def _as_dict(item: Item | None) -> dict[str, Any]:
    value = item.value if item is not None else None
    return value if isinstance(value, dict) else {}


# -- decoding (shared by the sync and async paths) ------------------------------------------


def _chunk_count(item: Item | None) -> int:
    body = _as_dict(item).get("body")
    count = body.get("chunks") if isinstance(body, dict) else None
    chars = body.get("chars") if isinstance(body, dict) else None
    if not isinstance(count, int) or not isinstance(chars, int) or not 0 <= count <= max(chars, 1):
        return 0
    return count


def _read_header(
    execution_id: str, stored: Item
) -> tuple[RecordHeader | None, int | None, list[str]]:
    value = stored.value
    problem = _value_problem(value)
    if problem is not None:
        return None, None, [problem]
    problems: list[str] = []
    header: RecordHeader | None = None
    try:
        header = RecordHeader.model_validate(value.get("header"))
    except ValidationError as exc:
        problems.append(f"the stored header is invalid: {first_validation_error(exc)}")
    if header is not None and header.executionId != execution_id:
        problems.append(f"the stored header belongs to {header.executionId!r}")
    if value.get("format") != FORMAT_VERSION:
        problems.append(f"unknown record format {value.get('format')!r} (expected 1)")
    body = value.get("body")
    count = body.get("chunks") if isinstance(body, dict) else None
    chars = body.get("chars") if isinstance(body, dict) else None
    if type(count) is not int or count < 0:
        problems.append("the stored header does not say how the body is stored")
        count = None
    elif type(chars) is not int or count > max(chars, 1):
        problems.append(f"the stored header claims {count} body chunks for {chars!r} characters")
        count = None
    return (None, None, problems) if problems else (header, count, problems)


def _decode(
    execution_id: str, header: RecordHeader, stored: Item, chunks: list[Item | None], count: int
) -> ExecutionRecord:
    problems: list[str] = []
    parts: list[str] = []
    for index, chunk in enumerate(chunks):
        value = _as_dict(chunk)
        text = value.get("text")
        if UNREADABLE_VALUE in value:
            problems.append(f"body chunk {index + 1} of {count} is {value[UNREADABLE_VALUE]}")
            continue
        if not isinstance(text, str):
            problems.append(f"body chunk {index + 1} of {count} is missing")
            continue
        parts.append(text)
    text = "".join(parts)
    body = stored.value["body"]
    if not problems:
        if len(text) != body.get("chars"):
            problems.append(
                f"the body has {len(text)} characters instead of {body.get('chars')} (truncated)"
            )
        elif _digest(text) != body.get("sha256"):
            problems.append("the body does not match its recorded digest (it was changed)")
    try:
        data = json_depth.loads(text)
        if not isinstance(data, dict):
            msg = "the body is not a JSON object"
            raise TypeError(msg)
        record = ExecutionRecord.model_validate({**data, "header": header.model_dump()})
    except (ValueError, TypeError) as exc:
        detail = first_validation_error(exc) if isinstance(exc, ValidationError) else str(exc)
        problems.append(f"the body is not a valid record: {detail}")
        return _corrupted(execution_id, header, problems)
    if problems:
        return _corrupted(execution_id, header, problems, record)
    return record


def _corrupted(
    execution_id: str,
    header: RecordHeader | None,
    problems: list[str],
    record: ExecutionRecord | None = None,
) -> ExecutionRecord:
    """A damaged record: not replayable, `record_corrupted`, with what could be read."""
    if header is None:
        header = RecordHeader(
            executionId=execution_id, createdUtcIso="", envelopeHash="", replayable=False
        )
    header = header.model_copy(update={"replayable": False, "replayableReason": "record_corrupted"})
    if record is None:
        return ExecutionRecord(header=header, envelope={}, problems=list(problems))
    return record.model_copy(update={"header": header, "problems": list(problems)})


def _invalidated(execution_id: str, stored: Item | None) -> tuple[dict[str, Any], RecordHeader]:
    if stored is None:
        msg = f"No execution record {execution_id!r}; `replay-guard records list` shows the ids."
        raise RecordNotFoundError(msg, execution_id=execution_id)
    try:
        header = RecordHeader.model_validate(_as_dict(stored).get("header"))
    except ValidationError as exc:
        problem = _value_problem(stored.value) or first_validation_error(exc)
        msg = f"Execution record {execution_id!r} has an unreadable header: {problem}"
        raise ValueError(msg) from exc
    placeholder = ExecutionRecord(header=header, envelope={})
    new_header = invalidate_record(placeholder).header
    return {**stored.value, "header": new_header.model_dump()}, new_header


def _infos(
    namespace: tuple[str, ...], items: Iterable[Item], limit: int | None
) -> list[StoredRecordInfo]:
    infos: list[StoredRecordInfo] = []
    for item in items:
        if tuple(item.namespace) != namespace:
            continue  # a deeper namespace under the same prefix
        header, _count, problems = _read_header(item.key, item)
        body = _as_dict(item).get("body")
        summary = _as_dict(item).get("summary")
        infos.append(
            StoredRecordInfo(
                execution_id=item.key,
                header=header,
                events=int(summary.get("events", 0)) if isinstance(summary, dict) else 0,
                chars=int(body.get("chars", 0)) if isinstance(body, dict) else 0,
                failed=bool(summary.get("failed")) if isinstance(summary, dict) else False,
                problems=tuple(problems),
            )
        )
    infos.sort(key=lambda i: (i.header.createdUtcIso if i.header else "", i.execution_id))
    infos.reverse()
    return infos if limit is None else infos[:limit]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
