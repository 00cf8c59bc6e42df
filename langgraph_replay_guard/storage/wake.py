"""Wakes a worker waiting on another worker's claim when its row is written (PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from langgraph_replay_guard.storage import store_cas
from langgraph_replay_guard.storage.wake_names import channel, notes, payload

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from langgraph_replay_guard.replay.ledger import Sleep

__all__ = ["Listener", "apause", "channel", "notes", "pause"]

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
        self.broken = False
        self._closed = False
        self._thread = threading.Thread(
            target=self._run, name="replay-guard-ledger-listen", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop the thread (at its next tick), which closes the connection."""
        self._closed = True

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
                for note in self._conn.notifies(timeout=TICK):
                    heard = time.monotonic()
                    with self._cond:
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

    def wait(self, name: str, note: str, since: float, timeout: float) -> bool:
        """Wait until `note` is heard after `since` (monotonic), at most `timeout` seconds.

        Returns:
            True when the wait ended by the row's write, or at once on a channel just
            subscribed (the row is read again: its write may have come before the
            `LISTEN`); False when the caller must poll (broken, or the time ran out).
        """
        with self._cond:
            if name not in self._channels:
                self._wanted.add(name)
                self._cond.wait_for(
                    lambda: name in self._channels or self.broken, min(timeout, _SUBSCRIBE)
                )
                return name in self._channels and not self.broken
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


def pause(store: BaseStore, op: Sleep, since: float) -> None:
    """Run a plan's `Sleep`: until its row is written (PostgreSQL) or `op.seconds` passed.

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
        if listener.wait(channel(namespace), payload(namespace, key), since, op.seconds):
            return
    rest = op.seconds - (time.monotonic() - started)
    if rest > 0:
        time.sleep(rest)


async def apause(store: BaseStore, op: Sleep, since: float) -> None:
    """Async `pause` (the wait runs in a thread, off the event loop)."""
    if op.wake is None or store_cas.listen_source(store) is None:
        await asyncio.sleep(op.seconds)
        return
    await asyncio.to_thread(pause, store, op, since)
