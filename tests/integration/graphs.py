"""Real graphs for the integration tests: tools that count their runs, a custom graph, an agent."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from langchain_core.tools import BaseTool, ToolException
from langchain_core.tools import tool as langchain_tool

from langgraph_replay_guard import GuardConfig, ReplayGuard, ToolPolicy
from langgraph_replay_guard.testing import ScriptedChatModel, agent_graph

SYSTEM = "You are a customer-service agent."

# Tool policies as a user of the tau-bench tools would write them.
POLICY = GuardConfig(
    tools={
        "transfer_to_human_agents": "unsafe",
        "book_reservation": "unsafe",
        "toggle_airplane_mode": "unsafe",
        "set_network_mode": "unsafe",
        "check_network_status": ToolPolicy(volatile=True),
    }
)


class ToolRuns:
    """Counts how many times each tool body really ran (thread-safe)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def hit(self, name: str) -> None:
        with self._lock:
            self.counts[name] += 1

    def __getitem__(self, name: str) -> int:
        return self.counts[name]


_SCHEMAS: dict[tuple[str, str], Any] = {}


def tool(func: Callable[..., Any]) -> BaseTool:
    """LangChain's `@tool`, with the argument schema it infers made once per function.

    `make_tools` makes its seven tools afresh for each test (their bodies count into the
    test's `ToolRuns`); inferring a schema from a signature builds pydantic models (about
    2 ms a tool), the same models every time. A tool made with the schema LangChain inferred
    the first time is the tool `@tool` makes (same name, description, arguments and
    tool-call schema).
    """
    key = (func.__module__, func.__qualname__)
    schema = _SCHEMAS.get(key)
    made = langchain_tool(func) if schema is None else langchain_tool(func, args_schema=schema)
    _SCHEMAS.setdefault(key, made.args_schema)
    return made


def make_tools(runs: ToolRuns) -> list[BaseTool]:
    """Tau-bench-like tools whose bodies count their executions."""

    @tool
    def get_details_by_id(id: str) -> str:
        """Look up a customer, line or plan by id."""
        runs.hit("get_details_by_id")
        return f'{{"id": "{id}", "name": "Premium Plan", "data_limit_gb": 15.0}}'

    @tool
    def transfer_to_human_agents(summary: str) -> str:
        """Transfer the customer to a human agent."""
        runs.hit("transfer_to_human_agents")
        return "Transfer successful"

    @tool
    def book_reservation(flight: str) -> str:
        """Book a flight (this one is always full)."""
        runs.hit("book_reservation")
        msg = f"Error: flight {flight} not available"
        raise ToolException(msg)

    book_reservation.handle_tool_error = True  # answered as an error ToolMessage

    @tool
    def think(thought: str) -> str:
        """Think out loud."""
        runs.hit("think")
        return ""

    @tool
    def toggle_airplane_mode() -> str:
        """Toggle airplane mode on the customer's phone."""
        runs.hit("toggle_airplane_mode")
        return "Airplane mode toggled. Status Bar: No Signal"

    @tool
    def set_network_mode(mode: str) -> str:
        """Set the phone's preferred network mode."""
        runs.hit("set_network_mode")
        return f"Preferred network mode set to {mode}"

    @tool
    def check_network_status() -> str:
        """Check the phone's network status."""
        runs.hit("check_network_status")
        return "Cellular Connection: no_service"

    return [
        get_details_by_id,
        transfer_to_human_agents,
        book_reservation,
        think,
        toggle_airplane_mode,
        set_network_mode,
        check_network_status,
    ]


def build_custom_graph(
    guard: ReplayGuard, model: ScriptedChatModel, tools: list[BaseTool], **compile_kwargs: Any
) -> Any:
    """A hand-written agent graph with a guarded ToolNode, as a user would write it."""
    return agent_graph(model, tools, guard=guard, system_prompt=SYSTEM, **compile_kwargs)


def model_node(guard: ReplayGuard, model: ScriptedChatModel) -> Any:
    """The model node of a hand-written agent graph, its prompt built with
    `guard.system_prompt` as the docs show (sync and async)."""
    from langchain_core.runnables import RunnableLambda

    from langgraph_replay_guard import ReplayGuardState

    def prompt(state: ReplayGuardState) -> list[Any]:
        return [guard.system_prompt(state, SYSTEM), *state["messages"]]

    def agent(state: ReplayGuardState) -> dict[str, Any]:
        return {"messages": [model.invoke(prompt(state))]}

    async def aagent(state: ReplayGuardState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(prompt(state))]}

    return RunnableLambda(agent, afunc=aagent)


def build_agent(
    guard: ReplayGuard, model: ScriptedChatModel, tools: list[BaseTool], **kwargs: Any
) -> Any:
    """A `create_agent` agent with the guard as middleware."""
    from langchain.agents import create_agent

    return create_agent(
        model, tools, system_prompt=SYSTEM, middleware=[guard.middleware()], **kwargs
    )


def contents(messages: list[Any]) -> list[tuple[str, str]]:
    """Message types and texts, for comparing runs (ids differ between runs)."""
    return [(type(m).__name__, str(m.content)) for m in messages]
