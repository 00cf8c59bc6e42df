"""The durable replay ledger: one row per tool call identity, in a LangGraph `BaseStore`."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from langgraph_replay_guard.errors import ReplayConflictError

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore, Item

__all__ = [
    "LEDGER_VERSION",
    "CallIdentity",
    "LedgerEntry",
    "LedgerStatus",
    "ReplayLedger",
    "node_path",
    "store_label",
]

logger = logging.getLogger("langgraph_replay_guard")

LEDGER_VERSION = 1
"""Format version of a ledger row."""

LedgerStatus = Literal["started", "completed", "failed", "interrupted", "blocked", "retry"]
"""Status of a ledger row.

- `started`: a non-`pure` tool is about to run or ran without a recorded outcome.
- `completed` / `failed`: the outcome is known and recorded (`result`).
- `interrupted`: the tool called `interrupt()`; it runs again on resume.
- `blocked`: the tool never ran because an identical unsafe call's outcome is unknown.
- `retry`: a human resolved an unknown outcome with `retry`; the next run executes it.
"""

_OUTCOMES = frozenset({"completed", "failed"})
_UNKNOWN = frozenset({"started", "blocked"})
_KNOWN_STATUSES = frozenset(
    {"started", "completed", "failed", "interrupted", "blocked", "retry", "corrupt"}
)


def node_path(checkpoint_ns: str | None) -> str:
    """The node path of a task without its task ids (`"outer:1a|tools:2b"` -> `"outer|tools"`).

    Task ids change after an async-durability crash and on forks; node names do not.
    """
    if not checkpoint_ns:
        return ""
    return "|".join(part.split(":", 1)[0] for part in checkpoint_ns.split("|"))


def store_label(value: str) -> str:
    """A namespace label the stores accept, for any string (a thread id, a tenant).

    Store namespace labels cannot contain "." or NUL or be empty; they are escaped reversibly.
    """
    if value and "." not in value and "\x00" not in value and "%" not in value:
        return value
    escaped = value.replace("%", "%25").replace(".", "%2E").replace("\x00", "%00")
    return escaped or "%"


def now_iso() -> str:
    """The current UTC time in ISO 8601 (milliseconds)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class CallIdentity:
    """Who a tool call is, across retries, resumes, crashes and workers.

    Attributes:
        thread_id: The LangGraph thread.
        node: Node path without task ids (see `node_path`).
        ai_message_id: Id of the AIMessage that asked for the call.
        tool_call_id: The model's id for the call.
    """

    thread_id: str
    node: str
    ai_message_id: str | None
    tool_call_id: str

    @property
    def key(self) -> str:
        """The row key within the thread's namespace."""
        return f"{self.node}/{self.ai_message_id or '-'}/{self.tool_call_id}"

    @property
    def idempotency_key(self) -> str:
        """A stable idempotency key: identical on every re-run of this call."""
        raw = "\x1f".join((self.thread_id, self.node, self.ai_message_id or "", self.tool_call_id))
        return "rg-" + hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass(frozen=True)
class LedgerEntry:
    """One ledger row.

    Attributes:
        key: Row key (`CallIdentity.key`).
        status: See `LedgerStatus`; `"corrupt"` for a row that could not be read.
        tool: Tool name.
        replay: The call's replay class when it was recorded.
        args_hash: `"sha256:"` hash of the canonical arguments.
        tool_call_id: The model's id for the call.
        ai_message_id: Id of the AIMessage that asked for it.
        idempotency_key: The key given to an idempotent tool.
        started_at: When the tool was last started (UTC ISO 8601).
        finished_at: When the outcome was recorded.
        attempts: How many times the tool body was started for this identity.
        result: The recorded outcome: `content`, `artifact`, `status`.
        args: The arguments (for people resolving an unknown outcome).
        last_error: The last exception that escaped the tool, if any.
        resolved_by: `"human"` when `guard.resolve` settled the row.
    """

    key: str
    status: str
    tool: str = ""
    replay: str = "pure"
    args_hash: str = ""
    tool_call_id: str = ""
    ai_message_id: str | None = None
    idempotency_key: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    attempts: int = 0
    result: Mapping[str, Any] | None = None
    args: Any = None
    last_error: str | None = None
    resolved_by: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def has_outcome(self) -> bool:
        """Whether the outcome is known (`completed` or `failed`)."""
        return self.status in _OUTCOMES

    @property
    def outcome_unknown(self) -> bool:
        """Whether the tool may or may not have had its effect."""
        return self.status in _UNKNOWN or self.status == "corrupt"

    @classmethod
    def from_value(cls, key: str, value: Any) -> LedgerEntry:
        """Read a stored row; an unreadable one becomes a `corrupt` entry, never an error."""
        if not isinstance(value, Mapping) or value.get("v") != LEDGER_VERSION:
            return cls(key=key, status="corrupt", extra={"raw": repr(value)[:200]})
        status = value.get("status")
        if status not in _KNOWN_STATUSES:
            return cls(key=key, status="corrupt", extra={"raw": repr(value)[:200]})
        try:
            return cls(
                key=key,
                status=str(status),
                tool=str(value.get("tool", "")),
                replay=str(value.get("replay", "pure")),
                args_hash=str(value.get("args_hash", "")),
                tool_call_id=str(value.get("tool_call_id", "")),
                ai_message_id=value.get("ai_message_id"),
                idempotency_key=value.get("idempotency_key"),
                started_at=value.get("started_at"),
                finished_at=value.get("finished_at"),
                attempts=int(value.get("attempts", 0)),
                result=value.get("result"),
                args=value.get("args"),
                last_error=value.get("last_error"),
                resolved_by=value.get("resolved_by"),
            )
        except (TypeError, ValueError):
            return cls(key=key, status="corrupt", extra={"raw": repr(value)[:200]})

    def to_value(self) -> dict[str, Any]:
        """The JSON value stored for this row."""
        return {
            "v": LEDGER_VERSION,
            "status": self.status,
            "tool": self.tool,
            "replay": self.replay,
            "args_hash": self.args_hash,
            "tool_call_id": self.tool_call_id,
            "ai_message_id": self.ai_message_id,
            "idempotency_key": self.idempotency_key,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "attempts": self.attempts,
            "result": dict(self.result) if self.result is not None else None,
            "args": self.args,
            "last_error": self.last_error,
            "resolved_by": self.resolved_by,
        }

    def with_status(self, status: str, **changes: Any) -> LedgerEntry:
        """A copy with a new status and other changed fields."""
        return replace(self, status=status, **changes)

    def check_args(self, args_hash: str, identity: CallIdentity) -> None:
        """Raise `ReplayConflictError` when the same identity comes with other arguments."""
        if self.args_hash and args_hash != self.args_hash:
            msg = (
                f"Tool call '{identity.tool_call_id}' of '{self.tool}' in thread "
                f"'{identity.thread_id}' was recorded with other arguments "
                f"({self.args_hash[:19]}..., now {args_hash[:19]}...). The same call identity "
                "must not change its arguments; check for an edited message or a reused "
                "tool_call_id, or clear the row if the old call is void."
            )
            raise ReplayConflictError(msg)


def json_safe_result(content: Any, artifact: Any, status: str) -> dict[str, Any]:
    """A tool result as stored in the ledger; an artifact that is not JSON is dropped (logged)."""
    result: dict[str, Any] = {"content": content, "status": status}
    if artifact is not None:
        try:
            json.dumps(artifact)
        except (TypeError, ValueError):
            logger.warning(
                "langgraph-replay-guard: the tool's artifact (%s) is not JSON; the ledger keeps "
                "its content only, so a replay returns no artifact",
                type(artifact).__name__,
            )
            result["artifact_dropped"] = type(artifact).__name__
        else:
            result["artifact"] = artifact
    return result


class ReplayLedger:
    """Rows of tool call identities and outcomes, in a LangGraph `BaseStore`.

    Each thread has its own namespace, `(*namespace, "ledger", <thread id>)`, so threads
    (and tenants, with distinct `namespace` prefixes) never see each other's rows. Rows are
    written synchronously: `started` before a non-`pure` tool runs, the outcome before the
    tool's message is returned.

    Args:
        store: Any LangGraph store (`InMemoryStore`, `SqliteStore`, `PostgresStore`...).
        namespace: Namespace prefix, e.g. `("replay_guard", "<tenant>")`.
    """

    def __init__(self, store: BaseStore, *, namespace: Sequence[str] = ("replay_guard",)) -> None:
        """Create a ledger over a store."""
        self.store = store
        self.prefix = tuple(store_label(part) for part in namespace)

    def namespace(self, thread_id: str) -> tuple[str, ...]:
        """The namespace holding one thread's rows."""
        return (*self.prefix, "ledger", store_label(thread_id))

    # -- reads ---------------------------------------------------------------------------------

    def get(self, identity: CallIdentity) -> LedgerEntry | None:
        """The row of one call identity, if any."""
        item = self.store.get(self.namespace(identity.thread_id), identity.key)
        return None if item is None else LedgerEntry.from_value(item.key, item.value)

    async def aget(self, identity: CallIdentity) -> LedgerEntry | None:
        """Async twin of `get`."""
        item = await self.store.aget(self.namespace(identity.thread_id), identity.key)
        return None if item is None else LedgerEntry.from_value(item.key, item.value)

    def same_calls(self, thread_id: str, tool: str, args_hash: str) -> list[LedgerEntry]:
        """Rows of the thread for the same tool and arguments (any identity)."""
        items = self.store.search(
            self.namespace(thread_id), filter={"tool": tool, "args_hash": args_hash}, limit=50
        )
        return _entries(items)

    async def asame_calls(self, thread_id: str, tool: str, args_hash: str) -> list[LedgerEntry]:
        """Async twin of `same_calls`."""
        items = await self.store.asearch(
            self.namespace(thread_id), filter={"tool": tool, "args_hash": args_hash}, limit=50
        )
        return _entries(items)

    def by_tool_call_id(self, thread_id: str, tool_call_id: str) -> list[LedgerEntry]:
        """Rows of the thread for one tool_call_id."""
        items = self.store.search(
            self.namespace(thread_id), filter={"tool_call_id": tool_call_id}, limit=10
        )
        return _entries(items)

    async def aby_tool_call_id(self, thread_id: str, tool_call_id: str) -> list[LedgerEntry]:
        """Async twin of `by_tool_call_id`."""
        items = await self.store.asearch(
            self.namespace(thread_id), filter={"tool_call_id": tool_call_id}, limit=10
        )
        return _entries(items)

    def rows(self, thread_id: str, *, limit: int = 1000) -> list[LedgerEntry]:
        """Every row of a thread (for `replay-guard inspect`)."""
        return _entries(self.store.search(self.namespace(thread_id), limit=limit))

    # -- writes --------------------------------------------------------------------------------

    def put(self, thread_id: str, entry: LedgerEntry) -> None:
        """Write a row (synchronously: it is durable when this returns)."""
        self.store.put(self.namespace(thread_id), entry.key, entry.to_value(), index=False)

    async def aput(self, thread_id: str, entry: LedgerEntry) -> None:
        """Async twin of `put`."""
        await self.store.aput(self.namespace(thread_id), entry.key, entry.to_value(), index=False)


def _entries(items: Sequence[Item]) -> list[LedgerEntry]:
    return [LedgerEntry.from_value(item.key, item.value) for item in items]


def started_entry(
    identity: CallIdentity,
    *,
    tool: str,
    replay: str,
    args_hash: str,
    args: Any,
    idempotency_key: str | None,
    previous: LedgerEntry | None = None,
) -> LedgerEntry:
    """The row written right before a tool body starts."""
    return LedgerEntry(
        key=identity.key,
        status="started",
        tool=tool,
        replay=replay,
        args_hash=args_hash,
        tool_call_id=identity.tool_call_id,
        ai_message_id=identity.ai_message_id,
        idempotency_key=idempotency_key,
        started_at=now_iso(),
        attempts=(previous.attempts if previous is not None else 0) + 1,
        args=args,
    )


def finished_entry(entry: LedgerEntry, result: dict[str, Any]) -> LedgerEntry:
    """The row recording a known outcome."""
    status = "failed" if result.get("status") == "error" else "completed"
    return entry.with_status(status, result=result, finished_at=now_iso(), last_error=None)
