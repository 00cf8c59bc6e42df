"""Wakes a worker waiting on another worker's claim when its row is written (PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import socket
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from langgraph_replay_guard.storage import store_cas
from langgraph_replay_guard.storage.wake_names import channel, notes, payload

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from langgraph_replay_guard.replay.ledger import Sleep

__all__ = ["Listener", "apause", "channel", "listen", "notes", "pause"]

logger = logging.getLogger("langgraph_replay_guard")

TICK = 0.05
"""Seconds the listening thread waits for notifications before it looks at new channels."""
RETRY = 5.0
"""Seconds after a lost listening connection before a wait tries to open a new one."""
_HEARD = 4096
"""Payloads remembered (the newest): a waiter only asks about the write it waits for."""
_SUBSCRIBE = 1.0
"""Seconds a first wait on a channel waits for its `LISTEN` (then it polls this round)."""


class Listener:
    """A dedicated connection `LISTEN`ing on ledger channels, read by a daemon thread.

    It is one connection per store per process, opened from the store's own conninfo (never
    a connection taken from the store's pool, which would be held for good), and closed
    with the store: its thread stops when the store's connection or pool is closed, or the
    store is collected. A lost connection (a server restart) marks it broken: every wait
    falls back to polling.
    """

    def __init__(self, conninfo: str, kwargs: dict[str, Any], alive: Callable[[], bool]) -> None:
        """Connect and start the listening thread.

        Raises:
            Exception: psycopg's error when the server cannot be reached.
        """
        import psycopg

        # Named, so an operator sees what the extra connection is (pg_stat_activity).
        params = {**kwargs, "autocommit": True, "application_name": "replay-guard-listen"}
        self._conn = psycopg.connect(conninfo, **params)
        self.pid = os.getpid()
        self._alive = alive
        self._cond = threading.Condition()
        self._heard: OrderedDict[str, float] = OrderedDict()
        self._channels: set[str] = set()
        self._wanted: set[str] = set()
        # A wait asking for a new channel wakes the thread through this socket pair (a pipe
        # `select` takes on every platform): it would otherwise see the channel at its next
        # tick, and a first wait would last that long.
        self._bell_r, self._bell_w = socket.socketpair()
        self._bell_w.setblocking(False)
        self.broken = False
        self._closed = False
        self._thread = threading.Thread(
            target=self._run, name="replay-guard-ledger-listen", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop the thread (at its next tick), which closes the connection."""
        self._closed = True
        self._ring()

    def _ring(self) -> None:
        with contextlib.suppress(OSError):  # full (it rang already) or closed (it stopped)
            self._bell_w.send(b"x")

    def _run(self) -> None:
        try:
            while not self._closed and self._alive():
                with self._cond:
                    new = self._wanted - self._channels
                for name in sorted(new):
                    # `name` is `channel()`'s: a fixed prefix and hex digits, safe to quote.
                    self._conn.execute(f'LISTEN "{name}"')
                if new:
                    with self._cond:
                        self._channels |= new
                        self._cond.notify_all()
                ring = self._bell_r.fileno()
                # After a `LISTEN`, notifications it read wait in psycopg's backlog (the
                # socket is not readable for them): take them at once.
                tick = 0.0 if new else TICK
                ready, _, _ = select.select([self._conn.fileno(), ring], [], [], tick)
                if ring in ready:
                    self._bell_r.recv(4096)
                # A zero timeout reads what is there (and the backlog) and returns.
                notes = list(self._conn.notifies(timeout=0))
                if notes:
                    heard = time.monotonic()
                    with self._cond:
                        for note in notes:
                            self._heard[note.payload] = heard
                            self._heard.move_to_end(note.payload)
                        while len(self._heard) > _HEARD:
                            self._heard.popitem(last=False)
                        self._cond.notify_all()
        except Exception as exc:  # a lost connection: waits poll from now on
            logger.debug("replay ledger: the LISTEN connection was lost (%s); polling", exc)
        finally:
            with self._cond:
                self.broken = True
                self._cond.notify_all()
            with contextlib.suppress(Exception):
                self._conn.close()
            for bell in (self._bell_r, self._bell_w):
                bell.close()

    def subscribe(self, name: str, timeout: float) -> bool:
        """Listen on channel `name` (at once when it is already); False if not done in time."""
        with self._cond:
            if name in self._channels:
                return not self.broken
            self._wanted.add(name)
            self._ring()
            self._cond.wait_for(lambda: name in self._channels or self.broken, timeout)
            return name in self._channels and not self.broken

    def wait(self, note: str, since: float, timeout: float) -> bool:
        """Wait until `note` is heard after `since` (monotonic), at most `timeout` seconds.

        Returns:
            True when the wait ended by the row's write; False when the caller must poll
            (broken, or the time ran out).
        """
        with self._cond:
            return (
                self._cond.wait_for(
                    lambda: self._heard.get(note, -1.0) >= since or self.broken, timeout
                )
                and not self.broken
            )


_listeners: weakref.WeakKeyDictionary[Any, Listener] = weakref.WeakKeyDictionary()
_failed: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
_guard = threading.Lock()


def _forked() -> None:
    # A fork copies `_guard` as it is: held, when a parent thread was opening a LISTEN
    # connection (up to its connect timeout), by a thread the child does not have. The
    # child's first wait would block on it for good. (The parent's listeners are dropped
    # at their next use: `_listener` compares pids.)
    global _guard
    _guard = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _listener(store: BaseStore) -> Listener | None:
    """The store's listener (opened on first use), or None: not PostgreSQL, or unreachable."""
    source = store_cas.listen_source(store)
    if source is None:
        return None
    inner, conninfo, kwargs, alive = source
    with _guard:
        listener = _listeners.get(inner)
        if listener is not None and listener.pid != os.getpid():
            del _listeners[inner]  # a forked child: the thread and the socket are the parent's
            listener = None
        if listener is not None:
            if not listener.broken:
                return listener
            # Lost (a server restart): poll for a while before connecting again.
            del _listeners[inner]
            _failed[inner] = time.monotonic()
        failed = _failed.get(inner)
        if failed is not None and time.monotonic() - failed < RETRY:
            return None
        try:
            listener = Listener(conninfo, kwargs, alive)
        except Exception as exc:
            logger.debug("replay ledger: cannot LISTEN (%s); polling", exc)
            _failed[inner] = time.monotonic()
            return None
        _failed.pop(inner, None)
        _listeners[inner] = listener
        weakref.finalize(inner, listener.close)
        return listener


def listen(store: BaseStore, namespace: tuple[str, ...], timeout: float = 5.0) -> bool:
    """Listen on a ledger namespace's channel now, opening the store's listener if needed.

    A worker's first wait otherwise opens the connection and subscribes while it waits (a
    long-running worker pays that once; a benchmark's warm-up calls this).

    Returns:
        Whether this process now listens there (False: not PostgreSQL, or unreachable).
    """
    listener = _listener(store)
    return listener is not None and listener.subscribe(channel(namespace), timeout)


def pause(store: BaseStore, op: Sleep, since: float) -> None:
    """Run a plan's `Sleep`: until its row is written (PostgreSQL) or `op.seconds` passed.

    On PostgreSQL the wait listens on the row's channel, then marks the row as waited for
    (`store_cas.mark_waiting`: only a marked row's outcome notifies), then waits for its
    notification. The mark comes after the `LISTEN`, so the notification of an outcome
    written after the mark is heard; an outcome written before it is found by the mark
    itself (the row is no longer in flight): the plan reads it again at once.

    Args:
        store: The store the plan runs on.
        op: The sleep.
        since: When (monotonic) the plan last began reading the row: a write heard after
            that may not be in what it read.
    """
    started = time.monotonic()
    listener = None if op.wake is None else _listener(store)
    if listener is not None and op.wake is not None:
        namespace, key = op.wake
        if listener.subscribe(channel(namespace), min(op.seconds, _SUBSCRIBE)):
            marked = _marked(lambda: store_cas.mark_waiting(store, namespace, key))
            if marked is False:
                return
            if marked and listener.wait(payload(namespace, key), since, _left(op, started)):
                return
    rest = _left(op, started)
    if rest > 0:
        time.sleep(rest)


async def apause(store: BaseStore, op: Sleep, since: float) -> None:
    """Async `pause`: the same steps, the mark on the store's async API, waits off the loop."""
    if op.wake is None or store_cas.listen_source(store) is None:
        await asyncio.sleep(op.seconds)
        return
    started = time.monotonic()
    listener = await asyncio.to_thread(_listener, store)
    if listener is not None:
        namespace, key = op.wake
        name, timeout = channel(namespace), min(op.seconds, _SUBSCRIBE)
        if await asyncio.to_thread(listener.subscribe, name, timeout):
            marked = await _amarked(store_cas.amark_waiting(store, namespace, key))
            if marked is False:
                return
            if marked:
                note, left = payload(namespace, key), _left(op, started)
                woken: bool = await asyncio.to_thread(listener.wait, note, since, left)
                if woken:
                    return
    rest = _left(op, started)
    if rest > 0:
        await asyncio.sleep(rest)


def _left(op: Sleep, started: float) -> float:
    return op.seconds - (time.monotonic() - started)


def _marked(mark: Callable[[], bool | None]) -> bool | None:
    """The mark's answer; None when it cannot mark or failed (the wait polls)."""
    try:
        return mark()
    except Exception as exc:
        logger.debug("replay ledger: cannot mark a row as waited for (%s); polling", exc)
        return None


async def _amarked(mark: Awaitable[bool | None]) -> bool | None:
    try:
        return await mark
    except Exception as exc:
        logger.debug("replay ledger: cannot mark a row as waited for (%s); polling", exc)
        return None
