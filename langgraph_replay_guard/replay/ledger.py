"""The replay ledger's rows and its state machine, as pure transitions and plans for I/O."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from typing import Any, Literal

from langgraph_replay_guard.decisions.keys import canonical_json
from langgraph_replay_guard.errors import (
    ReplayConflictError,
    ReplayInFlightError,
    ReplayUnsafeError,
)
from langgraph_replay_guard.replay.owners import describe
from langgraph_replay_guard.replay.result_codec import (
    decode_field,
    decode_result,
    decode_update,
    encode_field,
    encode_result,
)

__all__ = [
    "CLAIM_WITH_READ",
    "INTERRUPT_KIND",
    "LEDGER_VERSION",
    "Admission",
    "CallContext",
    "CallIdentity",
    "ClaimIfAbsent",
    "LedgerEntry",
    "LedgerPlan",
    "LedgerRowStatus",
    "Read",
    "Search",
    "Sleep",
    "StoreOps",
    "Update",
    "UpdateRewrite",
    "Write",
    "admit",
    "apply_resolution",
    "args_digest",
    "block",
    "call_anchor",
    "call_scope",
    "escaped_entry",
    "find_by_tool_call_id",
    "finished_entry",
    "given_entry",
    "given_plan",
    "index_namespace",
    "interrupted_entry",
    "nested_key",
    "node_path",
    "now_iso",
    "repeat_lookup_key",
    "resolvable",
    "resolve_plan",
    "row_namespace",
    "settle",
    "started_entry",
    "store_label",
    "unknown_error",
    "unknown_facts",
]

logger = logging.getLogger("langgraph_replay_guard")

LEDGER_VERSION = 1
"""Format version of a ledger row."""

INTERRUPT_KIND = "replay_guard.unknown_outcome"
"""`"kind"` of the value of the guard's `interrupt()` for an unknown outcome."""

LedgerRowStatus = Literal["started", "completed", "failed", "interrupted", "blocked", "retry"]
"""Status of a ledger row.

- `started`: a non-`pure` tool is running (its row names the worker holding the claim) or
  ran without a recorded outcome (no holder: the outcome is unknown).
- `completed` / `failed`: the outcome is known and recorded (`result`).
- `interrupted`: the tool called `interrupt()`; it runs again on resume.
- `blocked`: the tool never ran because an identical unsafe call's outcome is unknown.
- `retry`: it may run (again): a human resolved an unknown outcome with `retry`, or the
  tool raised an exception its policy says happens before any effect.
"""

_OUTCOMES = frozenset({"completed", "failed"})
_KNOWN_STATUSES = frozenset(
    {"started", "completed", "failed", "interrupted", "blocked", "retry", "corrupt"}
)

VARIANT_MARK = "#"
"""Between a call's row key and its argument variant (`CallIdentity.variant`)."""

FIRST_PAUSE = 0.02
"""First pause, in seconds, while waiting for another worker's outcome (doubles each time)."""
LONGEST_PAUSE = 0.5


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


def now_iso(now: dt.datetime | None = None) -> str:
    """A UTC time in ISO 8601 (milliseconds); the current time by default."""
    return (now or dt.datetime.now(dt.UTC)).isoformat(timespec="milliseconds")


def args_digest(args: Any) -> str:
    """The `"sha256:"` hash of a call's canonical arguments, stored to spot an edited call."""
    text = canonical_json(args, root="args")
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def call_scope(label: str, enclosing: str) -> str:
    """The scope part of a call's identity: which guard owns it, which call encloses it.

    Empty for a guard with the default name at the top of the graph, so its rows and
    idempotency keys stay what they were before scopes existed.

    Args:
        label: The guard's label in its namespace (its middleware `name`; "" for the default).
        enclosing: The anchor of the guarded call whose tool body made this call (a deep
            agent's `task` running a sub-agent), "" when none (see `call_anchor`).
    """
    if not enclosing:
        return f"~{label}" if label else ""
    return f"~{label}@{enclosing}" if label else f"@{enclosing}"


def nested_key(enclosing: str, label: str, node: str, tool: str, args_hash: str) -> str:
    """Where a nested call is by what encloses it, not by the ids of the calls around it.

    `enclosing` is the same of the enclosing call ("" at the top of the graph). Identical
    enclosing calls (a fork, or a message lost and asked again with new ids) give the calls
    made inside them the same value, so the ledger finds what an earlier one made.
    """
    raw = "\x1f".join((enclosing, label, node, tool, args_hash))
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def repeat_lookup_key(label: str, enclosing: str, node: str, tool: str, args_hash: str) -> str:
    """Key of a nested call's lookup row by what encloses it (`CallContext.repeat_index_key`).

    Args:
        label: The guard's label in its namespace.
        enclosing: `nested_key` of the enclosing call.
        node: The call's node path.
        tool: The tool's name.
        args_hash: `args_digest` of its arguments.
    """
    return f"call/[~{label}@@{enclosing}]{node}/{tool}/{args_hash}"


def call_anchor(
    thread_id: str, enclosing: str, node: str, ai_message_id: str | None, tool_call_id: str
) -> str:
    """Where a call is, whichever guard owns it: what calls made inside its tool body fold in.

    Two sibling runs of one sub-agent have the same node path; the anchor of the call that
    runs each (its own ids, and its own enclosing anchor) tells them apart, and stays the
    same across resumes because every part of it does.
    """
    raw = "\x1f".join((thread_id, enclosing, node, ai_message_id or "", tool_call_id))
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True)
class CallIdentity:
    """Who a tool call is, across retries, resumes, crashes and workers.

    Attributes:
        thread_id: The LangGraph thread.
        node: Node path without task ids (see `node_path`).
        ai_message_id: Id of the AIMessage that asked for the call.
        tool_call_id: The model's id for the call.
        scope: Which guard owns the call and which guarded call encloses it (`call_scope`);
            "" for a default guard at the top of the graph.
        variant: For a retry under the same ids with other arguments (a middleware's
            corrected retry or fan-out), a short hash of those arguments; "" otherwise.
    """

    thread_id: str
    node: str
    ai_message_id: str | None
    tool_call_id: str
    scope: str = ""
    variant: str = ""

    @property
    def base_key(self) -> str:
        """The row key of the call as the model asked it (without the variant)."""
        key = f"{self.node}/{self.ai_message_id or '-'}/{self.tool_call_id}"
        # A scope is a prefix in brackets: the key of an unscoped call is unchanged.
        return f"[{self.scope}]{key}" if self.scope else key

    @property
    def key(self) -> str:
        """The row key within the thread's namespace."""
        return f"{self.base_key}{VARIANT_MARK}{self.variant}" if self.variant else self.base_key

    @property
    def idempotency_key(self) -> str:
        """A stable idempotency key: identical on every re-run of this call."""
        parts = [self.thread_id, self.node, self.ai_message_id or "", self.tool_call_id]
        if self.scope or self.variant:  # an unscoped call keeps the key it always had
            parts += [self.scope, self.variant]
        raw = "\x1f".join(parts)
        return "rg-" + hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    @property
    def top_level(self) -> bool:
        """Whether the call is a default guard's at the top of the graph (no subgraph path)."""
        return not self.scope and "|" not in self.node


@dataclass(frozen=True)
class LedgerEntry:
    """One ledger row.

    Attributes:
        key: Row key (`CallIdentity.key`).
        status: See `LedgerRowStatus`; `"corrupt"` for a row that could not be read.
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
        owner: The worker running the tool right now (see `owners.py`), None otherwise.
        blocked_on: For a `blocked` row, the key of the identical call it waits on.
        ran_args: The arguments the tool body ran with, when a middleware between the guard
            and the tool changed them (a HITL edit); None when they are `args`.
        rev: Revision token, new on every write: claims compare it (compare-and-set).
        answered_inside: The outcome is the answer of a middleware inside the guard that
            answered the claimed call itself (no tool body the guard could see ran): a
            replay gives it back without handing the call down again.
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
    owner: Mapping[str, Any] | None = None
    blocked_on: str | None = None
    ran_args: Any = None
    rev: str | None = None
    answered_inside: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def has_outcome(self) -> bool:
        """Whether the outcome is known (`completed` or `failed`)."""
        return self.status in _OUTCOMES

    @property
    def outcome_unknown(self) -> bool:
        """Whether the tool may or may not have had its effect."""
        return self.status in ("started", "blocked", "corrupt")

    @classmethod
    def from_value(cls, key: str, value: Any) -> LedgerEntry:
        """Read a stored row; an unreadable one becomes a `corrupt` entry, never an error."""
        if not isinstance(value, Mapping) or value.get("v") != LEDGER_VERSION:
            return cls._corrupt(key, value)
        status = value.get("status")
        if status not in _KNOWN_STATUSES:
            return cls._corrupt(key, value)
        try:
            owner = value.get("owner")
            return cls(
                key=key,
                status=str(status),
                tool=str(value.get("tool", "")),
                replay=str(value.get("replay", "pure")),
                args_hash=str(value.get("args_hash", "")),
                tool_call_id=str(value.get("tool_call_id", "")),
                ai_message_id=_opt_str(value.get("ai_message_id")),
                idempotency_key=_opt_str(value.get("idempotency_key")),
                started_at=_opt_str(value.get("started_at")),
                finished_at=_opt_str(value.get("finished_at")),
                attempts=int(value.get("attempts", 0)),
                result=_opt_mapping(value.get("result")),
                args=decode_field(value, "args"),
                last_error=_opt_str(value.get("last_error")),
                resolved_by=_opt_str(value.get("resolved_by")),
                owner=owner if isinstance(owner, Mapping) else None,
                ran_args=decode_field(value, "ran_args"),
                blocked_on=_opt_str(value.get("blocked_on")),
                rev=_opt_str(value.get("rev")),
                answered_inside=value.get("answered_inside") is True,
            )
        except (TypeError, ValueError):
            return cls._corrupt(key, value)

    @classmethod
    def _corrupt(cls, key: str, value: Any) -> LedgerEntry:
        rev = value.get("rev") if isinstance(value, Mapping) else None
        return cls(
            key=key,
            status="corrupt",
            rev=rev if isinstance(rev, str) else None,
            extra={"raw": repr(value)[:200]},
        )

    def to_value(self) -> dict[str, Any]:
        """The JSON value stored for this row (with a new revision token).

        The arguments go through the result codec (`encode_field`): whatever the tool
        accepts (sets, tuples, bytes, datetimes, models, NaN...) is stored in a form every
        shipped store accepts and read back as it was.
        """
        value = {
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
            "last_error": self.last_error,
            "resolved_by": self.resolved_by,
            "owner": dict(self.owner) if self.owner is not None else None,
            "blocked_on": self.blocked_on,
            "rev": self.rev,
        }
        if self.answered_inside:  # only then: rows of every other call keep their shape
            value["answered_inside"] = True
        encode_field(value, "args", self.args)
        encode_field(value, "ran_args", self.ran_args)
        return value

    def with_status(self, status: str, **changes: Any) -> LedgerEntry:
        """A copy with a new status, other changed fields and a new revision token."""
        unknown = changes.keys() - _ENTRY_FIELDS
        if unknown:
            msg = f"LedgerEntry has no field {sorted(unknown)[0]!r}"
            raise TypeError(msg)
        # The fields copied as they are (no `__init__` to run): `dataclasses.replace` reads
        # every field's metadata and calls `__init__`, 10 us of an outcome's few hundred.
        copy = object.__new__(type(self))
        values = copy.__dict__
        values.update(self.__dict__)
        values.update(changes)
        values["status"] = status
        values["rev"] = new_rev()
        return copy

    def check_same_call(self, tool: str, args_hash: str, identity: CallIdentity) -> None:
        """Raise `ReplayConflictError` when the identity comes with another tool or arguments.

        Going back in history (time travel, `update_state` on an older checkpoint) can edit a
        tool call while its ids stay: the recorded outcome belongs to another call.
        """
        if self.status == "corrupt":
            return
        if self.tool and tool != self.tool:
            what = f"another tool ('{self.tool}', now '{tool}')"
        elif self.args_hash and args_hash != self.args_hash:
            what = (
                f"other arguments ({self.args_hash[:19]}..., now {args_hash[:19]}...) for '{tool}'"
            )
        else:
            return
        msg = (
            f"Tool call '{identity.tool_call_id}' in thread '{identity.thread_id}' was "
            f"recorded with {what}. The same call identity must not change its tool or "
            "arguments; check for an edited message (time travel, update_state) or a reused "
            "tool_call_id, and give the edited call a new id."
        )
        raise ReplayConflictError(msg)


_ENTRY_FIELDS = frozenset(f.name for f in dataclass_fields(LedgerEntry))


def _opt_str(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    msg = f"expected a string, got {type(value).__name__}"
    raise TypeError(msg)


def _opt_mapping(value: Any) -> Mapping[str, Any] | None:
    if value is None or isinstance(value, Mapping):
        return value
    msg = f"expected an object, got {type(value).__name__}"
    raise TypeError(msg)


def readable_result(entry: LedgerEntry) -> bool:
    """Whether a row's recorded result decodes (a damaged one cannot be replayed)."""
    try:
        decode_result(entry.result or {})
        decode_update(entry.result or {})
    except ValueError:
        return False
    return True


def new_rev() -> str:
    """A fresh revision token for a row write (16 hex digits, random)."""
    # os.urandom, not uuid4 (which builds a UUID object, about 5 us): two a first run.
    return os.urandom(8).hex()


# -- transitions: one row in, the next row out ---------------------------------------------------


def started_entry(
    ctx: CallContext,
    *,
    args: Any,
    idempotency_key: str | None,
    previous: LedgerEntry | None = None,
    owner: Mapping[str, Any] | None = None,
    now: dt.datetime | None = None,
) -> LedgerEntry:
    """The row written right before a tool body starts (the claim)."""
    return _new_row(
        ctx,
        "started",
        idempotency_key=idempotency_key,
        started_at=now_iso(now),
        attempts=(previous.attempts if previous is not None else 0) + 1,
        args=args,
        owner=owner,
    )


def _new_row(ctx: CallContext, status: str, **fields: Any) -> LedgerEntry:
    """A new row of the call: its identity and tool, the given fields, a fresh revision."""
    ident = ctx.identity
    return LedgerEntry(
        key=ident.key,
        status=status,
        tool=ctx.tool,
        replay=ctx.replay,
        args_hash=ctx.args_hash,
        tool_call_id=ident.tool_call_id,
        ai_message_id=ident.ai_message_id,
        rev=new_rev(),
        **fields,
    )


def finished_entry(
    entry: LedgerEntry,
    content: Any,
    artifact: Any,
    status: str,
    *,
    update: Mapping[str, Any] | None = None,
) -> LedgerEntry:
    """The row recording a known outcome (stored losslessly); the claim is released.

    `update` is the whole state update of a tool that returned a `Command`: a replay gives
    it back whole (a deep agent's written file is in it).
    """
    return entry.with_status(
        "failed" if status == "error" else "completed",
        result=encode_result(content, artifact, status, update=update),
        finished_at=now_iso(),
        last_error=None,
        owner=None,
    )


def escaped_entry(entry: LedgerEntry, error: BaseException, *, no_effect: bool) -> LedgerEntry:
    """The row after an exception escaped the tool body (whatever the node then did with it).

    Args:
        entry: The `started` row of the attempt.
        error: The exception.
        no_effect: The tool's policy names this exception as raised before any effect.
    """
    text = f"{type(error).__name__}: {error}"[:500]
    if no_effect:
        return entry.with_status("retry", last_error=text, owner=None)
    return entry.with_status("started", last_error=text, owner=None)


def interrupted_entry(entry: LedgerEntry) -> LedgerEntry:
    """The row after the tool called `interrupt()`: LangGraph re-runs it from the start."""
    return entry.with_status("interrupted", owner=None)


def apply_resolution(entry: LedgerEntry, outcome: str, result: Any) -> LedgerEntry:
    """The row after a human resolved an unknown outcome.

    Raises:
        ValueError: For an unknown outcome word, or a row whose outcome is already known.
    """
    if entry.has_outcome:
        msg = (
            f"Tool call '{entry.tool_call_id}' of '{entry.tool}' already has a recorded outcome "
            f"({entry.status}); only an unknown outcome can be resolved."
        )
        raise ValueError(msg)
    if outcome == "retry":
        return entry.with_status("retry", resolved_by="human", finished_at=now_iso(), owner=None)
    if outcome == "succeeded":
        content = result if isinstance(result, str | list) else json.dumps(result)
        resolved = finished_entry(entry, "" if result is None else content, None, "success")
    elif outcome == "failed":
        text = result if isinstance(result, str) else None
        if text is None and result is not None:
            text = json.dumps(result)
        resolved = finished_entry(
            entry, text or "An operator marked this call as failed.", None, "error"
        )
    else:
        msg = (
            f"Unknown outcome {outcome!r} for tool call '{entry.tool_call_id}': use "
            "'succeeded' (with the result confirmed upstream), 'failed' or 'retry'."
        )
        raise ValueError(msg)
    return resolved.with_status(resolved.status, resolved_by="human")


# -- plans: the ledger's I/O as data, run by a sync or an async driver ----------------------------


@dataclass(frozen=True)
class Read:
    """Get rows by key: the plan receives their values (None where there is none).

    With `may_claim`, a driver that can read these rows and claim the first in one round
    trip (PostgreSQL) may answer `CLAIM_WITH_READ` instead, and the plan yields that
    `ClaimIfAbsent` next: the claim is built only where it can go with the read.
    """

    keys: tuple[tuple[tuple[str, ...], str], ...]
    may_claim: bool = False


class _ClaimWithRead:
    def __repr__(self) -> str:
        return "CLAIM_WITH_READ"


CLAIM_WITH_READ: Any = _ClaimWithRead()
"""A driver's answer to a `Read` with `may_claim`: send the claim, it goes with the read."""


@dataclass(frozen=True)
class Write:
    """Put rows: `(namespace, key, value)`; the plan receives None.

    On PostgreSQL the rows are written in one transaction that also wakes the workers
    waiting on them (`Sleep.wake`).
    """

    puts: tuple[tuple[tuple[str, ...], str, dict[str, Any]], ...]


@dataclass(frozen=True)
class Update:
    """Compare-and-set one row, atomically in the database that holds it.

    The value is written when the row is absent (`expect_exists=False`) or present with
    revision `expect_rev` (`expect_exists=True`). The plan receives `(written, current)`:
    whether it was written, and the row's value now.
    """

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    expect_exists: bool
    expect_rev: str | None
    also: tuple[tuple[tuple[str, ...], str, dict[str, Any]], ...] = ()
    """Rows written in the same transaction when the compare-and-set succeeds."""


@dataclass(frozen=True)
class ClaimIfAbsent:
    """Read rows, and when none of them is there write `claim` (a claim of the first one).

    A first run's read and claim, which PostgreSQL does in one round trip. The plan
    receives `(claimed, values)`: True and Nones when the claim was written; else False and
    the rows' values as `Read` gives them. A driver may always answer as a `Read` followed,
    when every row was absent, by the `Update` (its `current` then stands for the first
    row's value).
    """

    keys: tuple[tuple[tuple[str, ...], str], ...]
    claim: Update


@dataclass(frozen=True)
class Sleep:
    """Wait before looking again (another worker holds the claim).

    `wake` names the row `(namespace, key)` whose next write ends the wait early: a driver
    that hears of that write (PostgreSQL's `LISTEN`) returns as soon as it lands, one that
    cannot sleeps `seconds` (polling). The plan reads the row again either way.
    """

    seconds: float
    wake: tuple[tuple[str, ...], str] | None = None


@dataclass(frozen=True)
class Search:
    """Scan a namespace for rows whose value matches `filter`.

    The plan receives at most `limit` `(key, value)` pairs. Only for rows older than the
    lookup rows (never on a call's path).
    """

    namespace: tuple[str, ...]
    filter: dict[str, Any]
    limit: int


@dataclass(frozen=True)
class StoreOps:
    """Run LangGraph store operations as they are (`GetOp`, `PutOp`, `SearchOp`...).

    The plan receives the store's results, one per operation. For plans that work with
    whole store items (the execution-record store); ledger plans use the ops above.
    """

    ops: tuple[Any, ...]


Op = Read | Write | Update | ClaimIfAbsent | Sleep | Search | StoreOps
LedgerPlan = Generator[Op, Any, Any]
"""A ledger operation as a generator: yields `Op`s, receives their answers (`storage.ledger_io`)."""


@dataclass(frozen=True)
class CallContext:
    """Everything the ledger needs to admit one call; the clock and liveness are injected.

    Attributes:
        identity: The call's identity.
        tool: Tool name.
        replay: The call's replay class.
        args: The call's arguments.
        args_hash: `args_digest(args)`.
        rows_ns: Namespace of the thread's rows.
        index_ns: Namespace of the thread's lookup rows (identical calls, tool_call_ids).
        wait: Seconds to wait for another worker's outcome before `ReplayInFlightError`.
        is_answered: Whether a call (tool_call_id, AIMessage id) was answered in the thread.
        is_alive: Whether a claim holder may still be running.
        new_owner: A claim holder for this attempt.
        lost_owner: Called with the holder of a claim that lost its compare-and-set to
            another worker (never written): the process's registry forgets it.
        now: The current UTC time.
        elapsed: Seconds since an arbitrary start (monotonic).
        asked_hash: `args_digest` of the arguments the model asked this call with (in its
            AIMessage), None when they cannot be found; read only when the identity's row
            holds other arguments (to tell a middleware's retry from an edited message).
        pointer_also: Other rows of this tool_call_id that `guard.resolve` must also find
            (an outer guard's claim of the same call, earlier argument variants).
        tried_here: Whether an attempt of a row (by key) was admitted earlier in this run
            of the call's task: a middleware's retry with other arguments follows an attempt
            in the same run; a rerun (after a crash, from history) starts a new run.
        repeat_index_key: For a call made inside a guarded call's tool body, the key of its
            lookup row by what encloses it rather than by the enclosing call's ids
            (`nested_key`): an identical enclosing call asked again with new ids (a fork, a
            lost message) finds the calls the earlier one made. None at the top of the graph.
        enclosing_call: The `(tool_call_id, AIMessage id)` of the enclosing call, if any.
        enclosing_answered: Whether an enclosing call `(tool_call_id, AIMessage id)` was
            answered in the history the enclosing call's run continues.
    """

    identity: CallIdentity
    tool: str
    replay: str
    args: Any
    args_hash: str
    rows_ns: tuple[str, ...]
    index_ns: tuple[str, ...]
    wait: float
    is_answered: Callable[[str, str | None], bool]
    is_alive: Callable[[Mapping[str, Any]], bool]
    new_owner: Callable[[], dict[str, Any]]
    now: Callable[[], dt.datetime]
    elapsed: Callable[[], float]
    asked_hash: Callable[[], str | None] = lambda: None
    pointer_also: tuple[str, ...] = ()
    tried_here: Callable[[str], bool] = lambda key: True
    repeat_index_key: str | None = None
    enclosing_call: tuple[str, str | None] | None = None
    enclosing_answered: Callable[[str, str | None], bool] = lambda _tc, _ai: True
    lost_owner: Callable[[Mapping[str, Any]], None] = lambda _owner: None

    @property
    def call_index_key(self) -> str:
        """Key of the lookup row of this tool and these arguments, in the call's scope.

        Scoped like the identity (guard, enclosing call, node path), so a sub-agent's call
        never reads its parent's identical call as its own lost one. A default guard's call
        at the top of the graph keeps the key it always had.
        """
        ident = self.identity
        if ident.top_level:
            return f"call/{self.tool}/{self.args_hash}"
        return f"call/[{ident.scope}]{ident.node}/{self.tool}/{self.args_hash}"

    def pointer(self) -> dict[str, Any]:
        """The lookup row's value pointing at this call."""
        ident = self.identity
        value: dict[str, Any] = {"v": LEDGER_VERSION, "key": ident.key, "ai": ident.ai_message_id}
        if self.pointer_also:
            value["also"] = list(self.pointer_also)
        return value

    def as_variant(self) -> CallContext:
        """This call under its argument variant's own identity (see `CallIdentity.variant`)."""
        variant = self.args_hash.removeprefix("sha256:")[:12]
        return replace(self, identity=replace(self.identity, variant=variant))


@dataclass(frozen=True)
class Admission:
    """What the ledger says about a call.

    Attributes:
        kind: `"run"` (run it; `entry` is the claim written, None for a pure call),
            `"replay"` (answer it with `entry`'s recorded outcome), `"unknown"` (an
            unsafe outcome is unknown: `entry` is the row that makes it so, `why` says how).
        entry: See `kind`.
        key: The idempotency key to give an idempotent call.
        why: For `"unknown"`, the reason.
        context: The call as admitted when it is not the one given (an argument variant's
            own identity): record, block and settle with it.
    """

    kind: Literal["run", "replay", "unknown"]
    entry: LedgerEntry | None = None
    key: str | None = None
    why: str = ""
    context: CallContext | None = None


@dataclass(frozen=True)
class _MayRun:
    """An intermediate step: the call may run (after `previous`, with idempotency `key`)."""

    previous: LedgerEntry | None = None
    key: str | None = None


@dataclass(frozen=True)
class _Wait:
    row: LedgerEntry


@dataclass(frozen=True)
class _Variant:
    """The call is another argument variant of the identity: admit it under its own row."""


_Step = Admission | _MayRun | _Wait | _Variant


def _other_arguments(ctx: CallContext, own: LedgerEntry) -> _Step | None:
    """A call under an identity whose row holds other arguments: a variant, or None (conflict).

    A middleware may run one model call with other arguments under its ids (a corrected
    retry, a fan-out to one sub-call per recipient): those arguments are not the ones in
    the model's message. An edited message (time travel, `update_state`) changes the
    message itself, so the call arrives with the message's arguments: a conflict.
    """
    if own.status == "corrupt" or (own.tool and own.tool != ctx.tool):
        return None
    if not own.args_hash or own.args_hash == ctx.args_hash or ctx.identity.variant:
        return None
    if _ran_with(own, ctx.args_hash):
        return None  # the row's body ran with these arguments (edited below the claim)
    if ctx.replay == "pure":
        return _Variant()  # a read has no effect to protect: each variant its own row
    asked = ctx.asked_hash()
    if asked is None or asked == ctx.args_hash:
        return None  # the model's own call changed under its ids: an edited history
    if own.status == "started" and own.owner is not None and ctx.is_alive(own.owner):
        return _Wait(own)  # the first attempt is still running (a parallel fan-out)
    if not ctx.tried_here(own.key):
        # No attempt of this call ran in this run of its task, yet it arrives with other
        # arguments than its recorded one: a middleware outside the guard changed them
        # between runs (a fresh request id, a time), not a retry. It may be the same call.
        why = (
            "it arrived with other arguments than its recorded attempt under the same ids, "
            "and no attempt of it ran in this run (a middleware outside the guard that "
            "changes the arguments on every run: make it deterministic or put the guard "
            "outside it)"
        )
        return Admission("unknown", own, why=why)
    if own.has_outcome or own.status in ("retry", "interrupted"):
        return _Variant()  # the first attempt's outcome is known: a new claim of its own
    why = "an earlier attempt of this call with other arguments has an unknown outcome"
    return Admission("unknown", own, why=why)


def _ran_with(own: LedgerEntry, args_hash: str) -> bool:
    """Whether a row's body ran with these arguments, not the claimed ones (`ran_args`).

    A guard's hook claims a call as the model asked it; a middleware inside may run it
    with other arguments (a HITL edit, the first sub-call of a fan-out) under that claim.
    """
    if own.ran_args is None or own.args_hash == args_hash:
        return False
    try:
        return args_digest(own.ran_args) == args_hash
    except (TypeError, ValueError):
        return False


def _after_own(ctx: CallContext, own: LedgerEntry) -> _Step:
    """What the identity's own row says."""
    other = _other_arguments(ctx, own)
    if other is not None:
        return other
    if not _ran_with(own, ctx.args_hash):
        own.check_same_call(ctx.tool, ctx.args_hash, ctx.identity)
    if own.has_outcome and not readable_result(own):
        own = LedgerEntry._corrupt(own.key, own.to_value())  # a damaged result: unknown
    if own.has_outcome:
        return Admission("replay", own)
    if own.status in ("retry", "interrupted"):
        return _MayRun(own, own.idempotency_key)
    if ctx.replay == "pure":
        return _MayRun(own)
    if own.status == "started" and own.owner is not None and ctx.is_alive(own.owner):
        return _Wait(own)
    if ctx.replay != "unsafe":  # idempotent: run again with the same key
        return _MayRun(own, own.idempotency_key or ctx.identity.idempotency_key)
    if own.status == "blocked":
        why = "an identical earlier call's outcome is unknown"
        return Admission("unknown", own, why=why)
    return Admission("unknown", own, why="its outcome is unknown")


def _after_identical(ctx: CallContext, latest: LedgerEntry, tool_call_id: str) -> _Step:
    """A new identity, and the latest identical call of another AIMessage: may it run?"""
    if ctx.replay == "unsafe" and latest.outcome_unknown and latest.replay == "unsafe":
        if latest.status == "started" and latest.owner is not None and ctx.is_alive(latest.owner):
            return Admission("unknown", latest, why="an identical call is running right now")
        return Admission("unknown", latest, why="an identical call's outcome is unknown")
    if ctx.is_answered(tool_call_id, latest.ai_message_id):
        if ctx.replay == "idempotent" and latest.outcome_unknown:
            return _MayRun(key=latest.idempotency_key)  # its outcome is unknown: same key
        return _MayRun()  # a deliberate repeat after an answered call
    # Its answer is not in this thread's history: the run forked from a checkpoint before
    # it (time travel), or its AIMessage was lost in a crash (or LangGraph lost the writes
    # that would have answered it), and the model asked again with new ids. The ledger
    # cannot tell the two apart, so the message names both, the deliberate one first.
    return _lost_earlier_call(ctx, latest, "an identical earlier call already ran for this thread")


def _lost_earlier_call(ctx: CallContext, earlier: LedgerEntry, what: str) -> _Step:
    """An identical call ran before but is not in the history this run continues."""
    if ctx.replay == "unsafe":
        why = (
            f"{what} but is not in the history this run continues (a fork or time travel from "
            "a checkpoint before it, or its message was lost in a crash) and may have had its "
            "effect"
        )
        return Admission("unknown", earlier, why=why)
    return _MayRun(key=earlier.idempotency_key)  # idempotent: the earlier call's key


def tool_call_key(tool_call_id: str) -> str:
    """Key of the lookup row of a tool_call_id (what `guard.resolve` reads)."""
    return f"tc/{tool_call_id}"


def _entry(key: str, value: Any) -> LedgerEntry | None:
    return None if value is None else LedgerEntry.from_value(key, value)


def admit(ctx: CallContext) -> Generator[Op, Any, Admission]:
    """The plan that admits one call: replay its outcome, claim it and run it, or stop.

    Of several workers admitting one identity at once exactly one claims it; the others
    wait (at most `ctx.wait` seconds) for its outcome and replay it.

    Raises:
        ReplayConflictError: The identity was recorded with another tool or arguments.
        ReplayInFlightError: Another live worker still runs the call after the wait.
    """
    ident = ctx.identity
    given = ctx
    if ctx.replay == "pure":  # a pure call never consults the identical-call lookup
        (own_value,) = yield Read(((ctx.rows_ns, ident.key),))
        index_value = repeat_value = None
    else:
        reads = [(ctx.rows_ns, ident.key), (ctx.index_ns, ctx.call_index_key)]
        if ctx.repeat_index_key is not None:
            reads.append((ctx.index_ns, ctx.repeat_index_key))
        values = yield Read(tuple(reads), may_claim=True)
        if values is CLAIM_WITH_READ:
            # No row of the call and no lookup row: the steps below would let it run with
            # no more reads (no earlier call, no identical one), so the claim goes with the
            # read, written only if none of them is there.
            claim, update, key = _claim(ctx, _MayRun(), None)
            try:
                claimed, values = yield ClaimIfAbsent(tuple(reads), update)
            except BaseException:
                _lost(ctx, claim)
                raise
            if claimed:
                return Admission("run", claim, key=key)
            _lost(ctx, claim)
        own_value, index_value, *more = values
        repeat_value = more[0] if more else None
    own = _entry(ident.key, own_value)
    waited_from: float | None = None
    pause = FIRST_PAUSE
    confirmed: tuple[str | None] | None = None  # the revision whose holder was rechecked
    while True:
        step: _Step
        if own is not None:
            step = _after_own(ctx, own)
            if _holder_gone(own, step) and confirmed != (own.rev,):
                # Its holder may have recorded the outcome and ended between this read and
                # the liveness check (a worker of this process releases its claim right
                # after writing the outcome): read once more before calling the call lost.
                confirmed = (own.rev,)
                (own_value,) = yield Read(((ctx.rows_ns, ident.key),))
                fresh = _entry(ident.key, own_value)
                if fresh is None or fresh.rev != own.rev:
                    own = fresh
                    continue
        elif ctx.replay == "pure" or ident.variant:
            step = _MayRun()  # a variant is no new model call: no identical-call check
        else:
            step = yield from _check_identical(ctx, index_value)
            if step == _MayRun() and index_value is None:
                step = yield from _check_enclosing_repeat(ctx, repeat_value)
        if isinstance(step, _Variant):
            ctx = yield from _variant_context(ctx)
            ident = ctx.identity
            (own_value,) = yield Read(((ctx.rows_ns, ident.key),))
            own, index_value, repeat_value = _entry(ident.key, own_value), None, None
            continue
        if isinstance(step, Admission):
            return step if ctx is given else replace(step, context=ctx)
        if isinstance(step, _Wait):
            waited_from = ctx.elapsed() if waited_from is None else waited_from
            left = ctx.wait - (ctx.elapsed() - waited_from)
            if left <= 0:
                raise _in_flight(ctx, step.row)
            # The last pause ends at the wait's end (a whole pause past it before: up to 0.5 s).
            yield Sleep(min(pause, left), wake=(ctx.rows_ns, ident.key))
            pause = min(pause * 2, LONGEST_PAUSE)
            (own_value,) = yield Read(((ctx.rows_ns, ident.key),))
            own = _entry(ident.key, own_value)
            continue
        if ctx.replay == "pure":
            return Admission("run", None, context=None if ctx is given else ctx)
        claim, update, key = _claim(ctx, step, own, index_value)
        try:
            written, current = yield update
        except BaseException:
            _lost(ctx, claim)
            raise
        if written:
            return Admission("run", claim, key=key, context=None if ctx is given else ctx)
        _lost(ctx, claim)
        own = _entry(ident.key, current)  # look again


def _claim(
    ctx: CallContext, step: _MayRun, own: LedgerEntry | None, index_value: Any = None
) -> tuple[LedgerEntry, Update, str | None]:
    """The claim of the call after `own` (None: a new row), its compare-and-set, its key.

    The claim's holder is registered in this process (`ctx.new_owner`): `_lost` forgets it
    when the claim is not written.
    """
    key = None
    if ctx.replay == "idempotent":
        key = step.key or ctx.identity.idempotency_key
    claim = started_entry(
        ctx,
        args=ctx.args,
        idempotency_key=key,
        previous=step.previous,
        owner=ctx.new_owner(),
        now=ctx.now(),
    )
    update = Update(
        ctx.rows_ns,
        ctx.identity.key,
        claim.to_value(),
        expect_exists=own is not None,
        expect_rev=own.rev if own is not None else None,
        also=_lookups(ctx, index_value),
    )
    return claim, update, key


def _lost(ctx: CallContext, claim: LedgerEntry) -> None:
    """Forget the holder of a claim that was not written: nothing runs under it.

    Another worker got there first, or the write failed or was cancelled (a claim stored
    anyway reads as a dead attempt of this process, taken over). Its holder must not stay
    registered as a running attempt of this process (it would never be released). No I/O:
    the registry is in memory.
    """
    if claim.owner is not None:
        ctx.lost_owner(claim.owner)


def _holder_gone(own: LedgerEntry, step: _Step) -> bool:
    """Whether `step` was decided on a claim whose holder was found not alive."""
    return (
        own.status == "started" and own.owner is not None and isinstance(step, Admission | _MayRun)
    )


def _variant_context(ctx: CallContext) -> Generator[Op, Any, CallContext]:
    """The call as its argument variant, whose tool_call_id lookup keeps the earlier rows."""
    variant = ctx.as_variant()
    if ctx.replay != "unsafe":
        return variant
    (pointer,) = yield Read(((ctx.index_ns, tool_call_key(ctx.identity.tool_call_id)),))
    keys = [*_pointed(pointer), ctx.identity.key, *ctx.pointer_also]
    also = tuple(dict.fromkeys(k for k in keys if k != variant.identity.key))
    return replace(variant, pointer_also=also)


def _pointed(pointer: Any) -> list[str]:
    """The row keys a tool_call_id lookup row names: its call's, then the others'."""
    if not isinstance(pointer, Mapping) or not isinstance(pointer.get("key"), str):
        return []
    also = pointer.get("also")
    others = [k for k in also if isinstance(k, str)] if isinstance(also, list) else []
    return [pointer["key"], *others]


def _check_identical(ctx: CallContext, index_value: Any) -> Generator[Op, Any, _Step]:
    latest = index_value if isinstance(index_value, Mapping) else None
    if latest is None or not isinstance(latest.get("key"), str):
        return _MayRun()
    if latest["key"] == ctx.identity.key or latest.get("ai") == ctx.identity.ai_message_id:
        return _MayRun()  # siblings in one AIMessage are not earlier calls: the batch plan decides
    (value,) = yield Read(((ctx.rows_ns, latest["key"]),))
    row = _entry(latest["key"], value)
    if row is None:
        return _MayRun()  # the lookup row was written, the claim never was: it never ran
    return _after_identical(ctx, row, str(latest.get("tc") or row.tool_call_id))


def _check_enclosing_repeat(ctx: CallContext, value: Any) -> Generator[Op, Any, _Step]:
    """A nested call whose identical sibling was made inside another, identical enclosing call.

    The enclosing call's ids are part of a nested call's identity: when the model asks the
    enclosing call again with new ids (a fork or time travel from before it, its message
    lost in a crash) its body's calls have new identities. The earlier enclosing call
    answered in this history is a deliberate repeat; one that is not (nor a sibling in the
    same AIMessage) is the same call asked again, like `_after_identical` at the top.
    """
    latest = value if isinstance(value, Mapping) else None
    mine = ctx.enclosing_call
    if latest is None or mine is None or not isinstance(latest.get("key"), str):
        return _MayRun()
    their_tc, their_ai = latest.get("etc"), latest.get("eai")
    if not isinstance(their_tc, str) or their_tc == mine[0]:
        return _MayRun()  # the same enclosing call: its own lookup row decided
    their_ai = their_ai if isinstance(their_ai, str) else None
    if their_ai is not None and their_ai == mine[1]:
        return _MayRun()  # sibling enclosing calls of one AIMessage
    if ctx.enclosing_answered(their_tc, their_ai):
        return _MayRun()  # a deliberate repeat of an answered enclosing call
    (row_value,) = yield Read(((ctx.rows_ns, latest["key"]),))
    row = _entry(latest["key"], row_value)
    if row is None:
        return _MayRun()  # the lookup row was written, the claim never was: it never ran
    what = "an identical call already ran inside an identical earlier call"
    return _lost_earlier_call(ctx, row, what)


def _lookups(
    ctx: CallContext, index_value: Any
) -> tuple[tuple[tuple[str, ...], str, dict[str, Any]], ...]:
    """The lookup rows pointing at this call, written with its claim."""
    ident = ctx.identity
    puts: list[tuple[tuple[str, ...], str, dict[str, Any]]] = []
    latest = index_value if isinstance(index_value, Mapping) else {}
    if latest.get("key") != ident.key:
        pointer = ctx.pointer()
        if not ident.variant:  # a variant is no new model call: the identical-call row stays
            index = {**pointer, "tc": ident.tool_call_id}
            puts.append((ctx.index_ns, ctx.call_index_key, index))
            if ctx.repeat_index_key is not None and ctx.enclosing_call is not None:
                enclosing_tc, enclosing_ai = ctx.enclosing_call
                repeat = {**index, "etc": enclosing_tc, "eai": enclosing_ai}
                puts.append((ctx.index_ns, ctx.repeat_index_key, repeat))
        if ctx.replay == "unsafe":  # only an unsafe call can need `guard.resolve`
            puts.append((ctx.index_ns, tool_call_key(ident.tool_call_id), pointer))
    return tuple(puts)


def blocked_entry(ctx: CallContext, row: LedgerEntry, why: str) -> LedgerEntry:
    """The row of a new call that did not run because an identical call's outcome is unknown."""
    return _new_row(
        ctx,
        "blocked",
        started_at=row.started_at,
        args=ctx.args,
        last_error=f"blocked: {why} (tool_call_id {row.tool_call_id})",
        blocked_on=row.key,
    )


def unknown_facts(ctx: CallContext, row: LedgerEntry, why: str) -> dict[str, Any]:
    """What a human needs to resolve an unknown outcome (error facts and interrupt value)."""
    ident = ctx.identity
    own = row.key == ident.key
    return {
        "kind": INTERRUPT_KIND,
        "thread_id": ident.thread_id,
        "tool": ctx.tool,
        # What the tool body really ran with (a HITL edit inside the guard), else the call's.
        "args": row.ran_args if row.ran_args is not None else ctx.args,
        "tool_call_id": ident.tool_call_id,
        "started_at": row.started_at,
        "status": row.status,
        "reason": why,
        "earlier_tool_call_id": None if own else row.tool_call_id,
        "last_error": row.last_error,
        "resolve": (
            f"guard.resolve(graph, config, {ident.tool_call_id!r}, "
            "outcome='succeeded' | 'failed' | 'retry', result=...)"
        ),
        # A served graph (`langgraph dev`, a deployment) hands out no store for
        # `guard.resolve`: there the guard pauses on the call (`on_unsafe="interrupt"`) and
        # the operator answers through the server's API.
        "resume": (
            f"client.runs.wait({ident.thread_id!r}, assistant_id, command={{'resume': "
            "{'outcome': 'succeeded' | 'failed' | 'retry', 'result': ...}})"
        ),
    }


def unknown_error(ctx: CallContext, row: LedgerEntry, why: str) -> ReplayUnsafeError:
    """The error for an unsafe call whose outcome (or an identical call's) is unknown."""
    facts = unknown_facts(ctx, row, why)
    msg = (
        f"{ctx.replay.capitalize()} tool '{ctx.tool}' (tool_call_id {ctx.identity.tool_call_id!r}, "
        f"thread {ctx.identity.thread_id!r}, args {canonical_json(facts['args'])[:200]}): {why}; "
        f"started at {row.started_at}, status '{row.status}'. Running it again could repeat "
        f"its side effect. Check upstream whether it happened, then settle it: in the process "
        f"that holds the guard, call {facts['resolve']}; on a served graph (langgraph dev, "
        "LangGraph Platform: no store at hand), give the guard "
        "GuardConfig(on_unsafe='interrupt'), so the run pauses on this call, and resume "
        f"it with the SDK: {facts['resume']}."
    )
    return ReplayUnsafeError(msg, **facts)


def block(ctx: CallContext, row: LedgerEntry, why: str) -> Generator[Op, Any, LedgerEntry]:
    """The plan that records a call blocked by an identical unknown call (then returns it)."""
    if row.key == ctx.identity.key:
        return row
    blocked = blocked_entry(ctx, row, why)
    tc_key = tool_call_key(ctx.identity.tool_call_id)
    yield Write(
        (
            (ctx.index_ns, tc_key, ctx.pointer()),
            (ctx.rows_ns, ctx.identity.key, blocked.to_value()),
        )
    )
    return blocked


def settle(
    ctx: CallContext, resolution: Mapping[str, Any], fallback: LedgerEntry
) -> Generator[Op, Any, Admission]:
    """The plan after a human answered the guard's interrupt: record it, then admit again.

    Args:
        ctx: The call.
        resolution: The resume value: `{"outcome": ..., "result": ...}`.
        fallback: The row to resolve when the identity has none (it was never written).
    """
    (value,) = yield Read(((ctx.rows_ns, ctx.identity.key),))
    own = _entry(ctx.identity.key, value)
    current = own or fallback
    if current.outcome_unknown:
        _refuse_live_holder(current, ctx.identity.thread_id, ctx.is_alive)
        resolved = apply_resolution(current, str(resolution["outcome"]), resolution.get("result"))
        # Against the row read: a row another worker changed meanwhile is read again by
        # `admit`, which decides with it (the resolution is not written over it).
        yield Update(
            ctx.rows_ns,
            ctx.identity.key,
            resolved.to_value(),
            expect_exists=own is not None,
            expect_rev=own.rev if own is not None else None,
        )
    return (yield from admit(ctx))


def _refuse_live_holder(
    row: LedgerEntry, thread_id: str, is_alive: Callable[[Mapping[str, Any]], bool]
) -> None:
    """Raise `ReplayInFlightError` while the worker holding a row's claim may still run it.

    Resolving a call that is still running would let it have its effect after a `retry`
    (two effects) or contradict a `succeeded`/`failed` the operator could not have checked.
    """
    owner = row.owner
    if row.status != "started" or owner is None or not is_alive(owner):
        return
    msg = (
        f"Tool call {row.tool_call_id!r} of '{row.tool}' in thread {thread_id!r} is still "
        f"held by a live worker ({describe(owner)}, started at {row.started_at}): its outcome "
        "is not unknown yet, so it cannot be resolved. Wait for that worker to finish (a "
        "resume then replays its outcome), or stop that process and resolve after it exited."
    )
    raise ReplayInFlightError(
        msg,
        thread_id=thread_id,
        tool=row.tool,
        tool_call_id=row.tool_call_id,
        started_at=row.started_at,
        owner=dict(owner),
    )


def _in_flight(ctx: CallContext, row: LedgerEntry) -> ReplayInFlightError:
    owner = row.owner or {}
    msg = (
        f"Tool call {ctx.identity.tool_call_id!r} of '{ctx.tool}' in thread "
        f"{ctx.identity.thread_id!r} is being run by another worker (pid {owner.get('pid')}, "
        f"started at {row.started_at}), and it had no outcome after {ctx.wait:g} s. "
        "Resume again later to replay its outcome; raise GuardConfig(in_flight_wait=...) to "
        "wait longer."
    )
    return ReplayInFlightError(
        msg,
        thread_id=ctx.identity.thread_id,
        tool=ctx.tool,
        tool_call_id=ctx.identity.tool_call_id,
        started_at=row.started_at,
        owner=dict(owner),
    )


def row_namespace(prefix: Sequence[str], thread_id: str) -> tuple[str, ...]:
    """The namespace holding one thread's rows."""
    return (*prefix, "ledger", store_label(thread_id))


def index_namespace(prefix: Sequence[str], thread_id: str) -> tuple[str, ...]:
    """The namespace holding one thread's lookup rows."""
    return (*prefix, "ledger_index", store_label(thread_id))


def find_by_tool_call_id(
    prefix: Sequence[str], thread_id: str, tool_call_id: str
) -> Generator[Op, Any, list[LedgerEntry]]:
    """The plan that finds the rows of a tool_call_id.

    Through its lookup row; rows written before lookup rows existed are found by a search
    of the thread's rows.
    """
    rows_ns = row_namespace(prefix, thread_id)
    (pointer,) = yield Read(((index_namespace(prefix, thread_id), tool_call_key(tool_call_id)),))
    keys = _pointed(pointer)
    if keys:
        # The call's row, then the others of its id: another guard's claim of the same call
        # in this namespace, earlier argument variants.
        values = yield Read(tuple((rows_ns, key) for key in keys))
        entries = [_entry(key, value) for key, value in zip(keys, values, strict=True)]
        if entries[0] is not None:
            return [entry for entry in entries if entry is not None]
    found = yield Search(rows_ns, {"tool_call_id": tool_call_id}, 10)
    entries = [_entry(key, value) for key, value in found]
    return [entry for entry in entries if entry is not None]


UpdateRewrite = Callable[[Mapping[str, Any], str, Any], Mapping[str, Any] | None]
"""Rewrites a recorded `Command` update to what the model was given: `(update, tool_call_id,
content)` -> the update whose ToolMessage answering `tool_call_id` holds `content`, or None
when it holds no such message. The integrations know the messages' types (the core does not)."""


def given_entry(
    entry: LedgerEntry,
    content: Any,
    asked: str | None = None,
    rewrite: UpdateRewrite | None = None,
) -> LedgerEntry | None:
    """The row with its result's content replaced by what the model was given, if it differs.

    A middleware may change a tool's result after the guard recorded it (`PIIMiddleware`
    redacts tool results in its `before_model`): the row then keeps what the thread's
    messages hold, no more. A replay gives back what the model was given, which the same
    middleware leaves as it is. The artifact (never shown to the model, kept in the
    message) and the status stay. A row whose result is a `Command`'s update has the
    ToolMessage inside its update rewritten too (`rewrite`: a replay gives that update back);
    without `rewrite`, or when the update holds no message answering the call, or the row is
    unreadable, it is left as it is.

    Args:
        entry: A row.
        content: The content of the call's ToolMessage in the thread's messages.
        asked: The hash of the arguments the model asked (`args_digest`): a row of other
            arguments under the call's id is left as it is. None: not checked.
        rewrite: How to rewrite a recorded `Command` update (see `UpdateRewrite`).

    Returns:
        The new row (a new revision), or None when there is nothing to change.
    """
    if not entry.has_outcome or entry.result is None:
        return None
    if asked is not None and entry.args_hash and entry.args_hash != asked:
        return None  # a middleware outside the guard ran other arguments under this id
    if entry.ran_args is not None or VARIANT_MARK in entry.key:
        # The body ran with other arguments than the model's call (a middleware inside the
        # guard retried it corrected, fanned it out, or a person edited it): the message the
        # model was given answers the call as asked, not this body's run (a fan-out joins
        # several), so it is not this row's result. Replays stay what the bodies returned.
        return None
    try:
        recorded, artifact, status = decode_result(entry.result)
        update = decode_update(entry.result)
    except ValueError:
        return None
    if update is None:
        if recorded == content:
            return None
        return replace(entry, result=encode_result(content, artifact, status), rev=new_rev())
    # A tool that returned a `Command`: its ToolMessage is inside the update, which a replay
    # gives back whole, so the message there must hold what the model was given as well.
    given_update = rewrite(update, entry.tool_call_id, content) if rewrite is not None else None
    if given_update is None or (recorded == content and given_update == update):
        return None
    try:
        result = encode_result(content, artifact, status, update=given_update)
    except ValueError:  # the rewritten update cannot be stored: keep the row as it is
        return None
    return replace(entry, result=result, rev=new_rev())


def given_plan(
    prefix: Sequence[str],
    thread_id: str,
    given: Mapping[str, Any],
    keys: Mapping[str, Sequence[str]],
    asked: Mapping[str, str] | None = None,
    rewrite: UpdateRewrite | None = None,
) -> Generator[Op, Any, int]:
    """The plan that makes the rows of these tool calls hold what the model was given.

    Reads the calls' lookup rows (an unsafe or idempotent call's), then their rows and the
    rows at `keys` (a pure call has no lookup row), in one read each; rewrites
    (compare-and-set on the revision read) each finished row whose content differs
    (`given_entry`).

    Args:
        prefix: The guard's namespace prefix.
        thread_id: The thread.
        given: tool_call_id -> the content its ToolMessage holds in the thread.
        keys: tool_call_id -> row keys where the caller expects its row.
        asked: tool_call_id -> hash of the arguments the model asked (see `given_entry`).
        rewrite: How to rewrite a `Command` tool's recorded update (see `given_entry`).

    Returns:
        How many rows were rewritten.
    """
    ids = sorted(given)
    if not ids:
        return 0
    index_ns, rows_ns = index_namespace(prefix, thread_id), row_namespace(prefix, thread_id)
    pointers = yield Read(tuple((index_ns, tool_call_key(tc)) for tc in ids))
    keyed: list[tuple[str, str]] = []
    for tc, pointer in zip(ids, pointers, strict=True):
        for key in dict.fromkeys([*_pointed(pointer), *keys.get(tc, ())]):
            keyed.append((tc, key))
    if not keyed:
        return 0
    values = yield Read(tuple((rows_ns, key) for _, key in keyed))
    rewritten = 0
    for (tc, key), value in zip(keyed, values, strict=True):
        entry = _entry(key, value)
        wanted = (asked or {}).get(tc)
        new = given_entry(entry, given[tc], wanted, rewrite) if entry is not None else None
        if entry is None or new is None:
            continue
        # Another writer since the read (a resolve, a claim) wins: its row stands.
        written, _ = yield Update(rows_ns, key, new.to_value(), True, entry.rev)
        rewritten += bool(written)
    return rewritten


def resolvable(rows: list[LedgerEntry], thread_id: str, tool_call_id: str) -> list[LedgerEntry]:
    """The rows of a tool call whose outcome a human may settle (`guard.resolve`).

    Raises:
        ValueError: There is no row, or every row's outcome is already known.
    """
    if not rows:
        msg = (
            f"No ledger row for tool_call_id {tool_call_id!r} in thread {thread_id!r}: "
            "nothing to resolve (check the id in ReplayUnsafeError.facts['tool_call_id'])."
        )
        raise ValueError(msg)
    unknown = [row for row in rows if row.outcome_unknown]
    if not unknown:
        states = ", ".join(sorted({row.status for row in rows}))
        msg = (
            f"Tool call {tool_call_id!r} in thread {thread_id!r} already has a known outcome "
            f"({states}); only an unknown outcome can be resolved."
        )
        raise ValueError(msg)
    return unknown


def resolve_plan(
    prefix: Sequence[str],
    thread_id: str,
    tool_call_id: str,
    outcome: str,
    result: Any,
    is_alive: Callable[[Mapping[str, Any]], bool],
) -> Generator[Op, Any, None]:
    """The plan that records a human's resolution of a call whose outcome is unknown.

    Each row is written with a compare-and-set against the row read: a row that changed in
    between (its worker finished, another operator resolved it) is never written over.

    Args:
        prefix: The ledger's namespace prefix.
        thread_id: The thread.
        tool_call_id: The call to resolve.
        outcome: `"succeeded"`, `"failed"` or `"retry"`.
        result: The confirmed result or error text.
        is_alive: Whether a claim holder may still be running (see `owners.is_alive`).

    Raises:
        ValueError: Nothing to resolve (see `resolvable`), or an invalid `outcome`.
        ReplayInFlightError: The worker holding the call's claim is alive (nothing written).
        ReplayConflictError: The row changed after it was read (nothing written to it).
    """
    rows = yield from find_by_tool_call_id(prefix, thread_id, tool_call_id)
    rows_ns = row_namespace(prefix, thread_id)
    unknown = resolvable(rows, thread_id, tool_call_id)
    for row in unknown:
        _refuse_live_holder(row, thread_id, is_alive)
    settled_rows = [(row, apply_resolution(row, outcome, result)) for row in unknown]
    for read, settled in settled_rows:
        written, current = yield Update(
            rows_ns, read.key, settled.to_value(), expect_exists=True, expect_rev=read.rev
        )
        if not written:
            raise _resolve_conflict(read, _entry(read.key, current), thread_id, outcome)


def _resolve_conflict(
    read: LedgerEntry, now: LedgerEntry | None, thread_id: str, outcome: str
) -> ReplayConflictError:
    state = "gone" if now is None else f"now '{now.status}'"
    if now is not None and now.owner is not None:
        state += f", held by {describe(now.owner)}"
    msg = (
        f"Tool call {read.tool_call_id!r} of '{read.tool}' in thread {thread_id!r} changed "
        f"while it was being resolved (it was '{read.status}', {state}): the resolution "
        f"{outcome!r} was not recorded. Look at the call again (replay-guard inspect) and "
        "resolve it again if its outcome is still unknown."
    )
    return ReplayConflictError(msg)
