"""Running a plan: a generator that decides, yields each piece of I/O and gets its answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

__all__ = ["adrive", "drive"]

T = TypeVar("T")


def drive(plan: Generator[Any, Any, T], run: Callable[[Any], Any]) -> T:
    """Run a plan synchronously: each op it yields goes to `run`, the answer back to it.

    An exception `run` raises is thrown into the plan at the `yield`, so the plan decides
    what it means (record an unknown outcome, fall back, or let it through).

    Args:
        plan: The plan.
        run: Runs one op and returns its answer.

    Returns:
        What the plan returns.

    Raises:
        BaseException: Whatever the plan raises or lets through.
    """
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            op = plan.send(answer) if error is None else plan.throw(error)
        except StopIteration as stop:
            result: T = stop.value
            return result
        answer, error = None, None
        try:
            answer = run(op)
        except BaseException as exc:  # handed to the plan, which decides
            error = exc


async def adrive(plan: Generator[Any, Any, T], run: Callable[[Any], Awaitable[Any]]) -> T:
    """Run a plan asynchronously: `drive`, with `run` awaited.

    Args:
        plan: The plan.
        run: Runs one op and returns an awaitable of its answer.

    Returns:
        What the plan returns.

    Raises:
        BaseException: Whatever the plan raises or lets through.
    """
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            op = plan.send(answer) if error is None else plan.throw(error)
        except StopIteration as stop:
            result: T = stop.value
            return result
        answer, error = None, None
        try:
            answer = await run(op)
        except BaseException as exc:
            error = exc
