"""The claims of a batch of parallel calls, gathered into one transaction (group commit).

ToolNode runs the N calls of one AIMessage (and LangGraph the N tasks of a `Send` fan-out)
in threads of their own, each through the guard and its own ledger plan. Each plan's claim
(an `Update`) is handed here instead of to the store: the first to arrive waits (at most
`WINDOW` seconds) for its siblings' claims, then writes them all with
`store_cas.compare_and_set_many` (PostgreSQL: one statement for claims of rows not there,
else two round trips and one commit for the batch; SQLite: one transaction; an
`AsyncPostgresStore`'s on its event loop, see `Member.claim`'s `write`) and hands each plan
its own answer. The plans, and so the ledger's rules, are unchanged: each call is claimed
before its body runs, a call answered without running (a duplicate, a stop) never reaches a
claim, and a crash after the commit leaves every claimed row in flight with a dead holder
("outcome unknown").

A sibling the guard answers before the ledger, or whose plan ends without a claim, leaves
the group at once (`Member.leave`, `LedgerGate.pass_by`); one that never says so (a path
not covered, a thread pool smaller than the batch) costs the others at most `WINDOW`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from langgraph_replay_guard.storage import store_cas

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from langgraph_replay_guard.replay.ledger import Update

__all__ = ["WINDOW", "Member", "join"]

WINDOW = 0.1
"""Longest wait (seconds) of a batch's first claim for its siblings' claims.

Every sibling says when it arrives or leaves: this bounds a wait for one that cannot (a
thread pool smaller than the batch) or a path that does not.
"""

# At most this many calls of a batch run at once: LangGraph's thread pool (and asyncio's
# default executor, which runs a sync store's claims) has `min(32, cores + 4)` threads
# unless `max_concurrency` says otherwise; waiting for more would only wait out the window.
THREADS = min(32, (os.cpu_count() or 1) + 4)
_STALE = 5.0  # a group older than this is a batch run again (a resume): a new group

_GROUPABLE = ("sqlite", "postgres", "async_postgres")


class _Slot:
    __slots__ = ("answer", "done", "error", "first", "leads", "op")

    def __init__(self, op: Update, *, first: bool) -> None:
        self.op = op
        self.first = first
        self.done = threading.Event()
        self.answer: tuple[bool, Any] | None = None
        self.error: BaseException | None = None
        self.leads = False  # handed the writing of the next round


class _Group:
    """The members of one batch in this process, and the claims waiting to be written."""

    def __init__(self, expected: int) -> None:
        self.cond = threading.Condition()
        self.open = expected  # members that have neither claimed nor left
        self.waiting: list[_Slot] = []
        self.busy = False  # a round is being gathered or written
        self.rounds = 0  # after the first, a claim is written at once (a late sibling)
        self.born = time.monotonic()
        self.closed = False

    def take(self) -> list[_Slot]:
        """The claims waiting, as the next round (call holding `cond`)."""
        taken, self.waiting = self.waiting, []
        self.open -= sum(1 for s in taken if s.first)
        self.rounds += 1
        return taken


_Writer = Callable[[list["Update"]], list[tuple[bool, Any]]]
"""Writes a round's claims in one transaction: one answer per op, in order."""

_groups: dict[Hashable, _Group] = {}
_groups_lock = threading.Lock()


class Member:
    """One call's plan in its batch's group; hand its claims to `claim`, then `leave`."""

    def __init__(self, key: Hashable, group: _Group) -> None:
        """Join `group` (see `join`)."""
        self.key = key
        self.group = group
        self.claimed = False
        self.left = False

    def claim(self, store: BaseStore, op: Update, write: _Writer | None = None) -> tuple[bool, Any]:
        """`store_cas.compare_and_set(store, op)`, written with the batch's other claims.

        `write` writes a round's claims when this member writes it (an async store's, on
        its event loop); by default `store_cas.compare_and_set_many` on `store`.

        The first claim of the batch waits for its siblings' (see `WINDOW`); later ones are
        written at once, or, while a round is being written, together in the next round
        (group commit), whose writer is the first of them.

        Raises:
            Exception: The database's error writing the round's claims (none was written).
        """
        group = self.group
        slot = _Slot(op, first=not self.claimed)
        self.claimed = True
        with group.cond:
            group.waiting.append(slot)
            group.cond.notify_all()
            leads = not group.busy
            if leads:
                group.busy = True
                deadline = time.monotonic() + (WINDOW if group.rounds == 0 else 0.0)
                while len(group.waiting) < min(group.open, THREADS):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    group.cond.wait(left)
                taken = group.take()
        if not leads:
            slot.done.wait()
            if slot.leads:  # handed the next round: write it
                slot.done.clear()
                with group.cond:
                    taken = group.take()
                leads = True
        if leads:
            _write(store, taken, write)
            with group.cond:
                if group.waiting:  # arrived while writing: the first of them writes next
                    group.waiting[0].leads = True
                    group.waiting[0].done.set()
                else:
                    group.busy = False
        if slot.error is not None:
            raise slot.error
        assert slot.answer is not None
        return slot.answer

    def leave(self) -> None:
        """The plan ended: a member that never claimed stops being waited for."""
        if self.left:
            return
        self.left = True
        group = self.group
        with group.cond:
            if not self.claimed:
                group.open -= 1
                group.cond.notify_all()
            # Every member came: a call of this batch arriving later (a second guard's view
            # of one call, a retry of the node) is written alone, never waits on a new group.
            group.closed = group.closed or (group.open <= 0 and not group.waiting)


def _write(store: BaseStore, taken: list[_Slot], write: _Writer | None) -> None:
    """Write a round's claims in one transaction; every member gets its answer or the error."""
    ops = [s.op for s in taken]
    try:
        answers = write(ops) if write is not None else store_cas.compare_and_set_many(store, ops)
    except store_cas.PartlyWritten as partly:  # the claims committed are answered so: they run
        for i, slot in enumerate(taken):
            if i in partly.answers:
                slot.answer = partly.answers[i]
            else:
                slot.error = partly.error
            slot.done.set()
        return
    except BaseException as exc:  # each plan gets it at its own claim, as from its own write
        for slot in taken:
            slot.error = exc
            slot.done.set()
        return
    for slot, answer in zip(taken, answers, strict=True):
        slot.answer = answer
        slot.done.set()


def join(store: BaseStore, batch: Hashable | None, size: int) -> Member | None:
    """The group of a call's batch, or None when its claims are written alone.

    Args:
        store: The ledger store.
        batch: What names the batch in this process (the thread's rows and the AIMessage id).
        size: How many calls the batch has.

    Returns:
        A member for a batch of several calls on a store that writes several claims in one
        transaction (sync `SqliteStore`, `PostgresStore`, `AsyncPostgresStore`), else None.
    """
    if batch is None or size < 2 or store_cas.atomic_kind(store) not in _GROUPABLE:
        return None
    with contextlib.suppress(TypeError):
        key = (id(store), batch)
        now = time.monotonic()
        with _groups_lock:
            if len(_groups) > 256:  # the batches of the last seconds are enough
                for old in [k for k, g in _groups.items() if now - g.born > _STALE]:
                    del _groups[old]
            group = _groups.get(key)
            if group is None or now - group.born > _STALE:
                group = _groups[key] = _Group(size)
            elif group.closed:
                return None
            return Member(key, group)
    return None
