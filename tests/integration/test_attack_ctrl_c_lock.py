"""A KeyboardInterrupt at any point of a ledger statement leaves the store's lock free.

A Ctrl-C that lands while the guard takes the store's lock, and whose exception is kept
(a notebook keeps the last one in `sys.last_exc`), must not leave that lock held: the next
ledger call in the process would wait for it forever. Each statement runs once per point at
which Python could raise there (a trace function raises `KeyboardInterrupt` at the n-th
event, n = 1, 2, ... until the statement completes), on a real `PostgresStore`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from langgraph_replay_guard.storage import store_cas

pytestmark = pytest.mark.postgres

NS = ("replay_guard", "ledger", "ctrl-c-lock")


@pytest.fixture
def store(pg_uri: str) -> Iterator[Any]:
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_uri) as pg_store:
        pg_store.setup()
        yield pg_store


def _interrupted_at(event: int, call: Callable[[], Any]) -> BaseException | None:
    """Run `call`, raising KeyboardInterrupt at its `event`-th traced event (None: it ended)."""
    seen = 0

    def trace(frame: Any, what: str, arg: Any) -> Any:
        nonlocal seen
        seen += 1
        if seen == event:
            raise KeyboardInterrupt
        return trace

    sys.settrace(trace)
    try:
        call()
    except KeyboardInterrupt as exc:
        return exc
    finally:
        sys.settrace(None)
    return None


STATEMENTS: dict[str, Callable[[Any], Any]] = {
    "read_rows": lambda store: store_cas.read_rows(store, [(NS, "k1"), (NS, "k2")]),
    "write_rows": lambda store: store_cas.write_rows(store, [(NS, "k1", {"status": "x"})]),
    "mark_waiting": lambda store: store_cas.mark_waiting(store, NS, "k1"),
}


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_an_interrupt_at_any_point_leaves_the_store_lock_free(store: Any, name: str) -> None:
    statement = STATEMENTS[name]
    kept: list[BaseException] = []  # as a notebook keeps the last exception: nothing is freed
    event = 0
    while True:
        event += 1
        exc = _interrupted_at(event, lambda: statement(store))
        if exc is None:
            break
        kept.append(exc)
        if store.conn.closed:  # an interrupt inside psycopg's wait may close the connection
            break
        free = store.lock.acquire(blocking=False)
        if free:
            store.lock.release()
        assert free, f"the store's lock is held after an interrupt at event {event}"
    assert event > 20, event  # the interrupts reached into the statement
