"""Tools and backends for the wake-up tests: a timed unsafe tool, a pooled PostgreSQL backend."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.tools import tool


def timed_tools(effects: Path, marker: Path, seconds: float) -> list[Any]:
    """`send_email` touches `marker`, holds `seconds`, then appends `<time> <to>` to `effects`."""

    @tool
    def send_email(to: str) -> str:
        """Send an email (unsafe)."""
        marker.touch()
        time.sleep(seconds)  # the other worker arrives and waits on this claim meanwhile
        with effects.open("a") as file:
            file.write(f"{time.time()} {to}\n")
        return f"Email sent to {to}"

    return [send_email]


def effect_times(effects: Path) -> list[float]:
    """When each real send happened (wall clock)."""
    if not effects.exists():
        return []
    return [float(line.split()[0]) for line in effects.read_text().splitlines()]


@contextmanager
def pool_backend(uri: str) -> Iterator[tuple[Any, Any]]:
    """A `PostgresSaver` and a `PostgresStore` over a pool that survives a server restart."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    with ConnectionPool(
        uri, kwargs=kwargs, min_size=1, max_size=4, check=ConnectionPool.check_connection
    ) as pool:
        saver, store = PostgresSaver(pool), PostgresStore(pool)
        saver.setup()
        store.setup()
        yield saver, store
