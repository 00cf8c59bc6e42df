"""`guard.resolve`: a human settles an unknown outcome of an unsafe call; the graph resumes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langgraph.types import Command

from langgraph_replay_guard.replay import owners
from langgraph_replay_guard.replay.ledger import INTERRUPT_KIND, resolve_plan, store_label
from langgraph_replay_guard.storage import store_cas
from langgraph_replay_guard.storage.ledger_io import arun_plan, run_plan

if TYPE_CHECKING:
    from langgraph_replay_guard.guard import ReplayGuard

__all__ = ["Resolution", "aresolve", "resolve"]


def _ledger_store(guard: ReplayGuard, graph: Any) -> Any:
    store = guard.store if guard.store is not None else getattr(graph, "store", None)
    if store is None:
        msg = (
            "guard.resolve needs the replay ledger's store: pass store= to the guard or "
            "compile the graph with a store."
        )
        raise ValueError(msg)
    # The graph's checkpointer may share the store's SQLite connection (docs/adopting.md).
    store_cas.share_connection(store, getattr(graph, "checkpointer", None))
    return store


def _thread(config: Mapping[str, Any]) -> str:
    thread_id = (config.get("configurable") or {}).get("thread_id")
    if thread_id is None:
        msg = "guard.resolve needs config={'configurable': {'thread_id': ...}}."
        raise ValueError(msg)
    return str(thread_id)


@dataclass(frozen=True, slots=True)
class Resolution:
    """What `guard.resolve` was asked: the call, what a human says happened, the resume."""

    config: Mapping[str, Any]
    tool_call_id: str
    outcome: str
    result: Any
    resume: bool
    invoke_kwargs: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class _GetState:
    """Read the graph's state (for the guard's pending interrupt)."""


@dataclass(frozen=True, slots=True)
class _Resume:
    """Resume the graph with `command` (None: after a `ReplayUnsafeError`)."""

    command: Command[Any] | None


def _plan(guard: ReplayGuard, asked: Resolution) -> Generator[Any, Any, Any]:
    """Record the resolution in the ledger, then resume the graph: one plan for both drivers."""
    prefix = tuple(store_label(part) for part in guard.namespace)
    thread_id = _thread(asked.config)
    record = resolve_plan(
        prefix,
        thread_id,
        asked.tool_call_id,
        asked.outcome,
        asked.result,
        is_alive=_is_alive,
    )
    return _resolve_then_resume(record, asked)


def _is_alive(owner: Mapping[str, Any]) -> bool:
    """Whether a claim's holder may still run the call (its process here, its lease elsewhere)."""
    return owners.is_alive(owner, dt.datetime.now(dt.UTC))


def _resolve_then_resume(
    record: Generator[Any, Any, None], asked: Resolution
) -> Generator[Any, Any, Any]:
    yield from record
    if not asked.resume:
        return None
    snapshot = yield _GetState()
    command = _resume_command(snapshot, asked.tool_call_id, asked.outcome, asked.result)
    return (yield _Resume(command))


def _resume_command(
    snapshot: Any, tool_call_id: str, outcome: str, result: Any
) -> Command[Any] | None:
    value = {"outcome": outcome, "result": result, "tool_call_id": tool_call_id}
    for pending in getattr(snapshot, "interrupts", ()) or ():
        asked = getattr(pending, "value", None)
        if (
            isinstance(asked, Mapping)
            and asked.get("kind") == INTERRUPT_KIND
            and asked.get("tool_call_id") == tool_call_id
        ):
            return Command(resume={pending.id: value})
    return None


def resolve(guard: ReplayGuard, graph: Any, asked: Resolution) -> Any:
    """See `ReplayGuard.resolve`."""

    def run(op: _GetState | _Resume) -> Any:
        if isinstance(op, _GetState):
            return graph.get_state(asked.config)
        return graph.invoke(op.command, asked.config, **asked.invoke_kwargs)

    return run_plan(_ledger_store(guard, graph), _plan(guard, asked), run)


async def aresolve(guard: ReplayGuard, graph: Any, asked: Resolution) -> Any:
    """See `ReplayGuard.aresolve`."""

    async def run(op: _GetState | _Resume) -> Any:
        if isinstance(op, _GetState):
            return await graph.aget_state(asked.config)
        return await graph.ainvoke(op.command, asked.config, **asked.invoke_kwargs)

    await owners.aready()  # `_is_alive` runs on the loop: the host facts are read before
    return await arun_plan(_ledger_store(guard, graph), _plan(guard, asked), run)
