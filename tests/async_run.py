"""`asyncio.run` for tests whose coroutine returns a large value (an agent's final state).

On Python 3.11, `asyncio.run` installs its own SIGINT handler when the current one is Python's
default (so in pytest and in every xdist worker), and both `signal.getsignal` and
`signal.signal` then try `signal.Handlers(handler)`, whose ValueError message is built with
`%r` of the handler: a partial holding the main task, whose repr includes `reprlib.repr` of its
result, which calls the full pydantic `repr` of every message in a final state. That is about
2 ms of CPU per run for a 20-message state, more than the loop itself (0.1 ms). `run` keeps
the coroutine's value out of the main task's result, so the task's repr is a few words; the
coroutine runs exactly as under `asyncio.run` (a fresh event loop, closed after).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coroutine)`, its value returned without being kept as the task's result."""
    box: list[T] = []

    async def main() -> None:
        box.append(await coroutine)

    asyncio.run(main())
    return box[0]
