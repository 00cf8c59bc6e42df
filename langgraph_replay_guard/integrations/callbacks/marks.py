"""The callback handler's protecting marks: one durable store item per unsafe call, or memory."""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langgraph_replay_guard.replay.ledger import Update, store_label
from langgraph_replay_guard.storage import store_cas

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from langgraph_replay_guard.integrations.callbacks.scopes import ScopeKey

__all__ = [
    "RAISED",
    "STARTED",
    "HeldOutcomes",
    "MarkBook",
    "UnknownOutcome",
    "mark_from",
    "outcome_of",
]

logger = logging.getLogger("langgraph_replay_guard")

STARTED = "started"
"""`"s"` of a mark written before the body ran; `"raised"` once the body raised."""

RAISED = "raised"

PAGE = 100
"""Marks read per store request when a thread's marks are listed (never all at once)."""

MAX_ENDED = 1024
"""Most claims of ended calls this process remembers to clear later (the oldest is let go:
its identical call is then refused until `resolve`, the safe side)."""


@dataclass(frozen=True)
class UnknownOutcome:
    """An unsafe call whose outcome is unknown, as `handler.unknown_outcomes` lists it.

    Attributes:
        tool: The tool's name.
        args: A short summary of its arguments (pass the real ones to `resolve`).
        error: What its body raised (`"ConnectionError: ..."`), or None when its end was
            never recorded (it may still be running, or its process died while it ran).
    """

    tool: str
    args: str
    error: str | None


@dataclass(frozen=True)
class HeldOutcomes:
    """A thread (or a run without a thread id) whose unknown outcomes this process holds.

    As `handler.unknown_outcome_threads` lists them: the marks a handler without a store
    keeps in memory until `resolve`, which a long-running process should settle.

    Attributes:
        thread_id: The thread, or None for a run without a thread id.
        run_id: The root run id of a run without a thread id, else None.
        count: How many unknown outcomes it holds (list them with `unknown_outcomes`).
    """

    thread_id: str | None
    run_id: str | None
    count: int


def outcome_of(mark: Mapping[str, Any]) -> UnknownOutcome:
    """A mark as the `UnknownOutcome` an operator reads."""
    error = None if mark.get("s") == STARTED else str(mark.get("e") or "")
    return UnknownOutcome(str(mark.get("n") or ""), str(mark.get("a") or ""), error)


def mark_from(value: Any) -> dict[str, Any] | None:
    """A stored mark as `{"k", "n", "a", "e", "s"}` strings, or None when it is not one.

    Marks of earlier releases have no `"s"`: they were written when the body raised.
    """
    if not isinstance(value, Mapping) or not isinstance(value.get("k"), str):
        return None
    mark = {name: str(value.get(name) or "") for name in ("k", "n", "a", "e")}
    mark["s"] = STARTED if value.get("s") == STARTED else RAISED
    return mark


class MarkBook:
    """Where the handler keeps the marks that protect unsafe calls, keyed by call key.

    With a store, a thread's marks are items of their own, `(*base, "unknown", thread)` /
    call key: written before the body runs (a claim, atomic where the store allows), so
    that a crash or a store outage after the side effect leaves a durable unknown outcome;
    read one key at a time (a check costs one read however many marks the thread holds);
    listed a page at a time. Nothing is capped and nothing is cached in memory. Without a
    store (or for a run without a thread id, which nothing else can see) the marks live
    here, never evicted: memory is then the only place they can be.

    Args:
        store: The handler's store, or None.
        base: The handler's namespace (`scopes_namespace(prefix)`).
        max_threads: Past this many threads holding marks in memory, a warning is logged.
    """

    def __init__(self, store: BaseStore | None, base: tuple[str, ...], max_threads: int) -> None:
        """Create the book."""
        self.store = store
        self._base = base
        self._memory: dict[ScopeKey, dict[str, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._warn_at = max_threads
        self._max_threads = max_threads
        self._ended: OrderedDict[tuple[ScopeKey, str], str] = OrderedDict()
        """Claims (`rev` by scope and call key) of calls that ended while the store could not
        clear them: this process knows their outcome, so its next identical call may take
        the claim over, if it is still that very claim."""

    def stored(self, key: ScopeKey) -> bool:
        """Whether a scope's marks are kept in the store (a thread, with a store)."""
        return self._store_for(key) is not None

    def _store_for(self, key: ScopeKey) -> BaseStore | None:
        return self.store if key[0] == "thread" else None

    def namespace(self, key: ScopeKey) -> tuple[str, ...]:
        """The store namespace of a thread's marks (one item per call key)."""
        return (*self._base, "unknown", store_label(key[1]))

    def claim(self, key: ScopeKey, mark: dict[str, Any]) -> dict[str, Any] | None:
        """Write `mark` unless the call key already has one; return that one, else None.

        Raises:
            Exception: What the store raised: the mark is not written, the call must not run.
        """
        store = self._store_for(key)
        if store is None:
            with self._lock:
                marks = self._memory.setdefault(key, {})
                found = marks.get(mark["k"])
                if found is None:
                    marks[mark["k"]] = mark
            if found is None:
                self._warn_if_many()
            return found
        namespace = self.namespace(key)
        if store_cas.atomic_kind(store).startswith("async_"):
            # An async-only store has no sync transaction the guard can use: a process lock
            # keeps this process's calls apart (the callbacks are sync, run off the loop).
            with self._lock:
                item = store.get(namespace, mark["k"])
                rev = self._ended.get((key, mark["k"]))
                if item is not None and (rev is None or item.value.get("rev") != rev):
                    return mark_from(item.value) or mark
                store.put(namespace, mark["k"], mark, index=False)
                self._ended.pop((key, mark["k"]), None)
                return None
        op = Update(namespace, mark["k"], mark, expect_exists=False, expect_rev=None)
        written, current = store_cas.compare_and_set(store, op)
        if written:
            return None
        rev = self._ended_rev(key, mark["k"])
        if rev is not None and isinstance(current, Mapping) and current.get("rev") == rev:
            # The claim of a call this process saw end: take it over, only if it is still
            # that claim (a resolve and another process's claim since would not match).
            op = Update(namespace, mark["k"], mark, expect_exists=True, expect_rev=rev)
            written, current = store_cas.compare_and_set(store, op)
            if written:
                self._forget_ended(key, mark["k"])
                return None
        return mark_from(current) or mark

    def ended_later(self, key: ScopeKey, claim: Mapping[str, Any]) -> None:
        """Remember the claim of a call that ended but that the store could not clear.

        Only this process's next identical call benefits (it takes the claim over); any
        other process still refuses it until `resolve`, which is the safe side.
        """
        rev = claim.get("rev")
        if not isinstance(rev, str):
            return
        with self._lock:
            self._ended[(key, str(claim["k"]))] = rev
            while len(self._ended) > MAX_ENDED:
                self._ended.popitem(last=False)

    def _ended_rev(self, key: ScopeKey, call_key: str) -> str | None:
        with self._lock:
            return self._ended.get((key, call_key))

    def _forget_ended(self, key: ScopeKey, call_key: str) -> None:
        with self._lock:
            self._ended.pop((key, call_key), None)

    def put(self, key: ScopeKey, mark: dict[str, Any]) -> None:
        """Write or replace a call's mark (the error its body raised)."""
        store = self._store_for(key)
        if store is None:
            with self._lock:
                self._memory.setdefault(key, {})[mark["k"]] = mark
            self._warn_if_many()
            return
        store.put(self.namespace(key), mark["k"], mark, index=False)

    def find(self, key: ScopeKey, call_key: str) -> dict[str, Any] | None:
        """The call key's mark, if its outcome is unknown."""
        store = self._store_for(key)
        if store is None:
            with self._lock:
                return self._memory.get(key, {}).get(call_key)
        store_cas.prepare(store)
        item = store.get(self.namespace(key), call_key)
        return None if item is None else mark_from(item.value)

    def drop(self, key: ScopeKey, call_key: str) -> None:
        """Forget a call's mark: its outcome is known (it ended, or a human settled it)."""
        store = self._store_for(key)
        if store is None:
            with self._lock:
                marks = self._memory.get(key)
                if marks is not None:
                    marks.pop(call_key, None)
                    if not marks:
                        del self._memory[key]
            return
        store.delete(self.namespace(key), call_key)

    def page(self, key: ScopeKey, limit: int = PAGE, offset: int = 0) -> list[dict[str, Any]]:
        """Up to `limit` of a scope's marks from `offset` (store order; memory: oldest first)."""
        store = self._store_for(key)
        if store is None:
            with self._lock:
                return list(self._memory.get(key, {}).values())[offset : offset + limit]
        store_cas.prepare(store)
        namespace = self.namespace(key)
        items = store.search(namespace, limit=limit, offset=offset)
        marks = (mark_from(item.value) for item in items if tuple(item.namespace) == namespace)
        return [mark for mark in marks if mark is not None]

    def held(self, limit: int, offset: int) -> list[HeldOutcomes]:
        """A page of the scopes holding marks in memory, oldest first (no store read)."""
        with self._lock:
            page = list(itertools.islice(self._memory.items(), offset, offset + limit))
            return [
                HeldOutcomes(
                    key[1] if key[0] == "thread" else None,
                    key[1] if key[0] != "thread" else None,
                    len(marks),
                )
                for key, marks in page
            ]

    def _warn_if_many(self) -> None:
        with self._lock:
            count = len(self._memory)
            if count <= self._warn_at:
                return
            self._warn_at *= 2
        logger.warning(
            "langgraph-replay-guard: %d threads hold unknown outcomes, more than max_threads=%d: "
            "they stay in memory until handler.resolve settles them (forgetting one could "
            "repeat a side effect). List them with handler.unknown_outcome_threads() and "
            "resolve them, or pass store= to keep them in a store.",
            count,
            self._max_threads,
        )
