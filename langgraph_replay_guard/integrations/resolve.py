"""`guard.resolve`: a human settles an unknown outcome of an unsafe call; the graph resumes."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING, Any

from langgraph.types import Command

from langgraph_replay_guard.replay.ledger import INTERRUPT_KIND, resolve_plan, store_label
from langgraph_replay_guard.storage.ledger_io import arun_plan, run_plan

if TYPE_CHECKING:
    from langgraph_replay_guard.guard import ReplayGuard

__all__ = ["aresolve", "resolve"]


def _ledger_store(guard: ReplayGuard, graph: Any) -> Any:
    store = guard.store if guard.store is not None else getattr(graph, "store", None)
    if store is None:
        msg = (
            "guard.resolve needs the replay ledger's store: pass store= to the guard or "
            "compile the graph with a store."
        )
        raise ValueError(msg)
    return store


def _thread(config: Mapping[str, Any]) -> str:
    thread_id = (config.get("configurable") or {}).get("thread_id")
    if thread_id is None:
        msg = "guard.resolve needs config={'configurable': {'thread_id': ...}}."
        raise ValueError(msg)
    return str(thread_id)


def _plan(
    guard: ReplayGuard, config: Mapping[str, Any], tool_call_id: str, outcome: str, result: Any
) -> Generator[Any, Any, None]:
    prefix = tuple(store_label(part) for part in guard.namespace)
    return resolve_plan(prefix, _thread(config), tool_call_id, outcome, result)


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
    run_plan(_ledger_store(guard, graph), _plan(guard, config, tool_call_id, outcome, result))
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
    plan = _plan(guard, config, tool_call_id, outcome, result)
    await arun_plan(_ledger_store(guard, graph), plan)
    if not resume:
        return None
    command = _resume_command(await graph.aget_state(config), tool_call_id, outcome, result)
    return await graph.ainvoke(command, config, **invoke_kwargs)
