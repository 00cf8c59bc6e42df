"""Runs store plans (the ledger's, the record store's) on a `BaseStore`, sync or async."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from langgraph.store.base import GetOp, PutOp, SearchOp

from langgraph_replay_guard.replay.ledger import (
    CLAIM_WITH_READ,
    ClaimIfAbsent,
    LedgerEntry,
    Read,
    Search,
    Sleep,
    StoreOps,
    Update,
    Write,
    find_by_tool_call_id,
    index_namespace,
    row_namespace,
    store_label,
)
from langgraph_replay_guard.storage import batch_claims, store_cas, wake
from langgraph_replay_guard.storage.plans import adrive, drive

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

__all__ = ["ReplayLedger", "abatch", "arun_plan", "run_plan"]

T = TypeVar("T")
R = TypeVar("R")


def _batch_ops(op: Read | Write | Search) -> list[Any]:
    if isinstance(op, Read):
        return [GetOp(ns, key) for ns, key in op.keys]
    if isinstance(op, Search):
        return [SearchOp(op.namespace, filter=op.filter, limit=op.limit)]
    return [PutOp(ns, key, value, index=False) for ns, key, value in op.puts]


def _batch_answer(op: Read | Write | Search, results: Sequence[Any]) -> Any:
    if isinstance(op, Read):
        return [None if item is None else item.value for item in results]
    if isinstance(op, Search):
        return [(item.key, item.value) for item in results[0]]
    return None


_STORE_OPS = (Read, Write, Search)


def _other(run: Callable[[Any], R] | None, op: Any) -> R:
    if run is None:
        msg = f"a store plan yielded {op!r}, which is not a store operation"
        raise TypeError(msg)
    return run(op)


def run_plan(
    store: BaseStore,
    plan: Generator[Any, Any, T],
    other: Callable[[Any], Any] | None = None,
    *,
    group: batch_claims.Member | None = None,
) -> T:
    """Run a store plan (the ledger's, the record store's) with the store's sync API.

    An error an op raised is thrown back into the plan, which may handle it.

    Args:
        store: The store.
        plan: The plan.
        other: Runs the plan's ops that are not store ops (a recorded graph's run).
        group: The plan's call in its batch (`batch_claims.join`): its claims are written
            with its siblings'.

    Raises:
        Exception: Whatever the plan raises, and store errors the plan does not handle.
    """
    store_cas.prepare(store)
    since = [time.monotonic()]
    # A call of a batch claims with its siblings (`group`): it reads, then claims.
    claims_with_read = group is None and store_cas.claims_with_read(store)

    def run(op: Any) -> Any:
        if isinstance(op, Sleep):
            return wake.pause(store, op, since[0])
        since[0] = time.monotonic()  # a wait after this read wakes on a write heard since
        if isinstance(op, Update):
            if group is not None:
                return group.claim(store, op)
            return store_cas.compare_and_set(store, op)
        if isinstance(op, Read) and op.may_claim and claims_with_read:
            if MISSES.expected(op):
                return CLAIM_WITH_READ
            if (found := store_cas.read_rows(store, op.keys)) is not None:
                return MISSES.note(op, found)
        if isinstance(op, ClaimIfAbsent):
            if group is None and (done := store_cas.claim_if_absent(store, op.keys, op.claim)):
                return MISSES.noted(op, done)
            return drive(_read_then_claim(op), run)
        if isinstance(op, StoreOps):
            return list(store_cas.batch_store(store, op.ops))
        if isinstance(op, Write) and store_cas.write_rows(store, op.puts):
            return None
        if isinstance(op, Read) and (found := store_cas.read_rows(store, op.keys)) is not None:
            return found
        if isinstance(op, _STORE_OPS):
            return _batch_answer(op, store_cas.batch_store(store, _batch_ops(op)))
        return _other(other, op)

    try:
        return drive(plan, run)
    finally:
        if group is not None:
            group.leave()


async def arun_plan(
    store: BaseStore,
    plan: Generator[Any, Any, T],
    other: Callable[[Any], Awaitable[Any]] | None = None,
    *,
    group: batch_claims.Member | None = None,
) -> T:
    """Run a store plan with the store's async API (sync stores run off the event loop).

    Args:
        store: The store.
        plan: The plan.
        other: Runs the plan's ops that are not store ops, asynchronously.
        group: As for `run_plan` (a sync store's claims, written off the loop).

    Raises:
        Exception: Whatever the plan raises, and store errors the plan does not handle.
    """
    await store_cas.aprepare(store)
    since = [time.monotonic()]
    claims_with_read = group is None and store_cas.claims_with_read(store)

    async def run(op: Any) -> Any:
        if isinstance(op, Sleep):
            return await wake.apause(store, op, since[0])
        since[0] = time.monotonic()  # a wait after this read wakes on a write heard since
        if isinstance(op, Update):
            if group is not None:
                return await asyncio.to_thread(group.claim, store, op, _on_loop(store))
            return await store_cas.acompare_and_set(store, op)
        if isinstance(op, Read) and op.may_claim and claims_with_read:
            if MISSES.expected(op):
                return CLAIM_WITH_READ
            if (found := await store_cas.aread_rows(store, op.keys)) is not None:
                return MISSES.note(op, found)
        if isinstance(op, ClaimIfAbsent):
            if group is None and (
                done := await store_cas.aclaim_if_absent(store, op.keys, op.claim)
            ):
                return MISSES.noted(op, done)
            return await adrive(_read_then_claim(op), run)
        if isinstance(op, StoreOps):
            return list(await abatch(store, op.ops))
        if isinstance(op, Write) and await store_cas.awrite_rows(store, op.puts):
            return None
        if (
            isinstance(op, Read)
            and (found := await store_cas.aread_rows(store, op.keys)) is not None
        ):
            return found
        if isinstance(op, _STORE_OPS):
            return _batch_answer(op, await abatch(store, _batch_ops(op)))
        return await _other(other, op)

    try:
        return await adrive(plan, run)
    finally:
        if group is not None:
            group.leave()


class _Misses:
    """Whether a call's first read is expected to find nothing: then its claim goes with it.

    A read that also claims (`ClaimIfAbsent`) saves a first run a round trip, but costs a
    hit more than a plain read: the claim is built and sent, and the server starts the
    statement's inserts (about 0.2 ms of client and 0.1 ms of server CPU here). So a call's
    first read claims with it only after the last two first reads of its thread's rows in
    this process found nothing (new calls: a thread running ahead); a thread being replayed
    (a resume, workers racing on the same calls) reads first. Either way is correct: only
    the cost differs. Kept per rows namespace, forgotten in bulk past `LIMIT` threads.
    """

    LIMIT = 4096
    STREAK = 2

    def __init__(self) -> None:
        self.streaks: dict[tuple[str, ...], int] = {}

    def expected(self, op: Read) -> bool:
        return self.streaks.get(op.keys[0][0], 0) >= self.STREAK

    def note(self, op: Read, values: list[Any]) -> list[Any]:
        """Note what a first read found; return it."""
        self._note(op.keys[0][0], values.count(None) == len(values))  # no generator a hit
        return values

    def noted(self, op: ClaimIfAbsent, answer: tuple[bool, list[Any]]) -> tuple[bool, list[Any]]:
        claimed, values = answer
        self._note(op.keys[0][0], claimed or values.count(None) == len(values))
        return answer

    def _note(self, namespace: tuple[str, ...], missed: bool) -> None:
        streaks = self.streaks
        if len(streaks) > self.LIMIT:
            streaks.clear()
        streaks[namespace] = streaks.get(namespace, 0) + 1 if missed else 0


MISSES = _Misses()


def _on_loop(store: BaseStore) -> Callable[[list[Update]], list[tuple[bool, Any]]] | None:
    """For an async store, how a batch's writer thread writes a round on this event loop.

    The batch's members wait in threads (`batch_claims`); the one that writes the round
    hands the statements to the loop the async store's connection belongs to (free: its
    tasks are waiting for those threads) and blocks until they ran. None for sync stores.
    """
    if store_cas.atomic_kind(store) != "async_postgres":
        return None
    loop = asyncio.get_running_loop()

    def write(ops: list[Update]) -> list[tuple[bool, Any]]:
        coroutine = store_cas.acompare_and_set_many(store, ops)
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()

    return write


def _read_then_claim(op: ClaimIfAbsent) -> Generator[Any, Any, tuple[bool, list[Any]]]:
    """`ClaimIfAbsent` as a `Read`, then, when no row was there, its `Update` (any store).

    A claim that lost to another worker answers the row it found as the read's.
    """
    values = yield Read(op.keys)
    if any(value is not None for value in values):
        return False, values
    written, current = yield op.claim
    return (True, values) if written else (False, [current, *values[1:]])


async def abatch(store: BaseStore, ops: Sequence[Any]) -> Sequence[Any]:
    """`store.abatch(ops)`, or its sync `batch` off the event loop for a sync-only store."""
    await store_cas.aprepare(store)
    if store_cas.is_sync_only(store):
        return await asyncio.to_thread(store_cas.batch_store, store, ops)
    try:
        return await store_cas.abatch_store(store, ops)
    except NotImplementedError:  # SqliteStore has no async API: its sync calls off the loop
        store_cas.mark_sync_only(store)
        return await asyncio.to_thread(store_cas.batch_store, store, ops)


class ReplayLedger:
    """Reads and writes ledger rows in a LangGraph `BaseStore` (inspect, resolve, tests).

    Each thread has its own namespaces, `(*namespace, "ledger", <thread id>)` for rows and
    `(*namespace, "ledger_index", <thread id>)` for lookups, so threads (and tenants, with
    distinct `namespace` prefixes) never see each other's rows. Every lookup is keyed.

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
        return row_namespace(self.prefix, thread_id)

    def index(self, thread_id: str) -> tuple[str, ...]:
        """The namespace holding one thread's lookup rows."""
        return index_namespace(self.prefix, thread_id)

    def rows(self, thread_id: str, *, limit: int = 1000) -> list[LedgerEntry]:
        """Every row of a thread (for `replay-guard inspect`)."""
        store_cas.prepare(self.store)
        return _entries(self.store.search(self.namespace(thread_id), limit=limit))

    def by_tool_call_id(self, thread_id: str, tool_call_id: str) -> list[LedgerEntry]:
        """The rows of one tool_call_id (keyed; rows written before lookups were, by search)."""
        return run_plan(self.store, find_by_tool_call_id(self.prefix, thread_id, tool_call_id))

    async def aby_tool_call_id(self, thread_id: str, tool_call_id: str) -> list[LedgerEntry]:
        """Async `by_tool_call_id`."""
        plan = find_by_tool_call_id(self.prefix, thread_id, tool_call_id)
        return await arun_plan(self.store, plan)

    def put(self, thread_id: str, entry: LedgerEntry) -> None:
        """Write a row (synchronously: it is durable when this returns)."""
        run_plan(self.store, _put(self.namespace(thread_id), entry))

    async def aput(self, thread_id: str, entry: LedgerEntry) -> None:
        """Async `put`."""
        await arun_plan(self.store, _put(self.namespace(thread_id), entry))


def _entries(items: Sequence[Any]) -> list[LedgerEntry]:
    return [LedgerEntry.from_value(item.key, item.value) for item in items]


def _put(namespace: tuple[str, ...], entry: LedgerEntry) -> Generator[Any, Any, None]:
    yield Write(((namespace, entry.key, entry.to_value()),))
