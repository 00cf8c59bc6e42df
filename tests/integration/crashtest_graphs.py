"""Graphs for the crash-test tests: built by functions taking checkpointer= and store=."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.tools import tool

from langgraph_replay_guard import ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel


@tool
def send_email(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


def _email_once(messages: list[BaseMessage]) -> Any:
    if any(isinstance(m, ToolMessage) for m in messages):
        return "Sent."
    return [("send_email", {"to": "ann@example.com"})]


def _agent(guard: ReplayGuard | None, checkpointer: Any) -> Any:
    return create_agent(
        ScriptedChatModel(script=[_email_once] * 3),
        [send_email],
        middleware=[guard.middleware()] if guard is not None else [],
        checkpointer=checkpointer,
    )


def email_declared_pure(*, checkpointer: Any, store: Any) -> Any:
    """An email tool wrongly declared pure: a crash before its outcome is recorded resends."""
    guard = ReplayGuard(tools={"send_email": "pure"}, store=store)
    return _agent(guard, checkpointer)


def guard_without_store(*, checkpointer: Any, store: Any) -> Any:
    """Guarded, but neither the guard nor the graph has the store: no ledger."""
    return _agent(ReplayGuard(tools={"send_email": "unsafe"}), checkpointer)


def unguarded(*, checkpointer: Any, store: Any) -> Any:
    """The same agent without the guard."""
    return _agent(None, checkpointer)


def not_a_graph(*, checkpointer: Any, store: Any) -> Any:
    """Forgot to compile."""
    return {"checkpointer": checkpointer}


@tool
def get_details_by_id(id: str) -> str:
    """Look up a line or plan by id."""
    return f'{{"plan_id": "{id}", "name": "Premium Plan"}}'


@tool
def transfer_to_human_agents(summary: str) -> str:
    """Hand the customer over to a human (a ticket in a queue)."""
    return "Transfer successful"


def restarting_script(*, checkpointer: Any, store: Any) -> Any:
    """docs/adopting.md's demo agent: its scripted model restarts its script in each process.

    A resume after a crash asks the model again from the script's first step, so the resumed
    run makes calls the learning run never made (the lookup again, then the transfer under a
    new tool call id).
    """
    from langgraph_replay_guard.testing import agent_graph

    guard = ReplayGuard(tools={"transfer_to_human_agents": "unsafe"}, store=store)
    model = ScriptedChatModel(
        script=[
            [("get_details_by_id", {"id": "P1002"})],
            [("transfer_to_human_agents", {"summary": "roaming issue"})],
        ],
        final="Your plan is Premium.",
    )
    return agent_graph(
        model, [get_details_by_id, transfer_to_human_agents], guard=guard, checkpointer=checkpointer
    )


def _send_then_loop(messages: list[BaseMessage]) -> Any:
    answered = sum(isinstance(m, ToolMessage) for m in messages)
    if answered == 0:
        return [("send_email", {"to": "ann@example.com"})]
    if answered < 7:
        return [("get_details_by_id", {"id": "P1002"})]  # the same read, again and again
    return "Looked it up six times."


def changed_by_the_guard(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """An agent whose clean run the guard changes: it stops the repeated read.

    The guarded run ends with the guard's stop; the unguarded one reads six times and
    answers, which `compare_unguarded` reports.
    """
    guard = ReplayGuard(tools={"send_email": "unsafe"}, store=store)
    return create_agent(
        ScriptedChatModel(script=[_send_then_loop] * 10),
        [send_email, get_details_by_id],
        middleware=[guard.middleware()] if guarded else [],
        checkpointer=checkpointer,
    )
