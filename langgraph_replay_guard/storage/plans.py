"""Running a plan: a generator that decides, yields each piece of I/O and gets its answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, TypeVar, cast

__all__ = ["adrive", "drive"]

T = TypeVar("T")


_Outcome = tuple[Any, BaseException | None]  # an op's answer, or the error it raised


class _Step(Generic[T]):
    """A plan between two ops: the one place that speaks the plan protocol.

    Send, throw and `StopIteration` are handled here, so the sync and the async driver
    differ only in how they run an op.
    """

    __slots__ = ("op", "plan", "result", "running")

    def __init__(self, plan: Generator[Any, Any, T]) -> None:
        self.plan = plan
        self.running = True
        self.op: Any = None
        self.result: T | None = None
        self.send((None, None))

    def send(self, outcome: _Outcome) -> None:
        """Hand the plan an op's answer, or throw in its error; note the next op or the end."""
        answer, error = outcome
        try:
            self.op = self.plan.send(answer) if error is None else self.plan.throw(error)
        except StopIteration as stop:
            self.running, self.result = False, stop.value


def _outcome(run: Callable[[Any], Any], op: Any) -> _Outcome:
    try:
        return run(op), None
    except BaseException as exc:  # handed to the plan, which decides
        return None, exc


async def _aoutcome(run: Callable[[Any], Awaitable[Any]], op: Any) -> _Outcome:
    try:
        return await run(op), None
    except BaseException as exc:
        return None, exc


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
    step = _Step(plan)
    while step.running:
        step.send(_outcome(run, step.op))
    return cast("T", step.result)


async def adrive(plan: Generator[Any, Any, T], run: Callable[[Any], Awaitable[Any]]) -> T:
    """Run a plan asynchronously: `drive`, with `run` returning an awaitable of its answer."""
    step = _Step(plan)
    while step.running:
        step.send(await _aoutcome(run, step.op))
    return cast("T", step.result)
