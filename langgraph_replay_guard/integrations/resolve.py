"""`guard.resolve`: a human settles an unknown outcome of an unsafe call; the graph resumes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langgraph.types import Command

from langgraph_replay_guard.ledger import INTERRUPT_KIND, LedgerEntry, apply_resolution
from langgraph_replay_guard.ledger_io import ReplayLedger

if TYPE_CHECKING:
    from langgraph_replay_guard.guard import ReplayGuard

__all__ = ["aresolve", "resolve"]


def _ledger(guard: ReplayGuard, graph: Any) -> ReplayLedger:
    store = guard.store if guard.store is not None else getattr(graph, "store", None)
    if store is None:
        msg = (
            "guard.resolve needs the replay ledger's store: pass store= to the guard or "
            "compile the graph with a store."
        )
        raise ValueError(msg)
    return ReplayLedger(store, namespace=guard.namespace)


def _thread(config: Mapping[str, Any]) -> str:
    thread_id = (config.get("configurable") or {}).get("thread_id")
    if thread_id is None:
        msg = "guard.resolve needs config={'configurable': {'thread_id': ...}}."
        raise ValueError(msg)
    return str(thread_id)


def _resolvable(rows: list[LedgerEntry], thread_id: str, tool_call_id: str) -> list[LedgerEntry]:
    if not rows:
        msg = (
            f"No ledger row for tool_call_id {tool_call_id!r} in thread {thread_id!r}: "
            "nothing to resolve (check the id in ReplayUnsafeError.facts['tool_call_id'])."
        )
        raise ValueError(msg)
    unknown = [row for row in rows if row.outcome_unknown]
    if not unknown:
        states = ", ".join(sorted({row.status for row in rows}))
        msg = (
            f"Tool call {tool_call_id!r} in thread {thread_id!r} already has a known outcome "
            f"({states}); only an unknown outcome can be resolved."
        )
        raise ValueError(msg)
    return unknown


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


def resolve(
    guard: ReplayGuard,
    graph: Any,
    config: Mapping[str, Any],
    tool_call_id: str,
    outcome: str,
    result: Any = None,
    *,
    resume: bool = True,
    **invoke_kwargs: Any,
) -> Any:
    """See `ReplayGuard.resolve`."""
    ledger = _ledger(guard, graph)
    thread_id = _thread(config)
    rows = _resolvable(ledger.by_tool_call_id(thread_id, tool_call_id), thread_id, tool_call_id)
    for row in rows:
        ledger.put(thread_id, apply_resolution(row, outcome, result))
    if not resume:
        return None
    command = _resume_command(graph.get_state(config), tool_call_id, outcome, result)
    return graph.invoke(command, config, **invoke_kwargs)


async def aresolve(
    guard: ReplayGuard,
    graph: Any,
    config: Mapping[str, Any],
    tool_call_id: str,
    outcome: str,
    result: Any = None,
    *,
    resume: bool = True,
    **invoke_kwargs: Any,
) -> Any:
    """See `ReplayGuard.aresolve`."""
    ledger = _ledger(guard, graph)
    thread_id = _thread(config)
    found = await ledger.aby_tool_call_id(thread_id, tool_call_id)
    for row in _resolvable(found, thread_id, tool_call_id):
        await ledger.aput(thread_id, apply_resolution(row, outcome, result))
    if not resume:
        return None
    command = _resume_command(await graph.aget_state(config), tool_call_id, outcome, result)
    return await graph.ainvoke(command, config, **invoke_kwargs)
