"""The executor side: `ToolCallBlockedError`, and whether an agent answers it (`check`)."""

from __future__ import annotations

import sys
from typing import Any

from langchain_core.exceptions import OutputParserException
from langgraph.prebuilt.tool_node import ToolInvocationError

from langgraph_replay_guard._compat import tool_node_settings
from langgraph_replay_guard.errors import ReplayGuardError

__all__ = ["ToolCallBlockedError", "agent_tools", "all_tools_known", "enforcement_problems"]


class ToolCallBlockedError(ReplayGuardError, ToolInvocationError, OutputParserException):
    """Raised by the callback handler to refuse a tool call; its text is what the model reads.

    A callback cannot return a result in place of a tool, it can only raise. This error is
    shaped so that executors hand its text to the model instead of failing the run:

    - it is a LangGraph `ToolInvocationError`: `create_agent` and a `ToolNode` with the
      default `handle_tool_errors` answer the call with an error `ToolMessage` whose content
      is `message`;
    - it is an `OutputParserException` with `send_to_llm=True`: a `langchain_classic`
      `AgentExecutor(handle_parsing_errors=True)` turns it into an observation.

    Attributes:
        message: What the model is told.
        tool_name: The refused tool, or `""` for a whole executor step.
        metadata: The guard's decision, `{"replay_guard": {...}}` as in traced tool runs.
    """

    def __init__(self, message: str, *, tool_name: str = "") -> None:
        Exception.__init__(self, message)
        self.message = message
        self.tool_name = tool_name
        self.tool_kwargs: dict[str, Any] = {}
        self.source = None  # type: ignore[assignment]  # no validation error caused it
        self.filtered_errors = None
        self.observation = message
        self.llm_output = message
        self.send_to_llm = True
        self.metadata: dict[str, Any] = {}


def enforcement_problems(agent: Any) -> list[str]:
    """What in an agent's setup would defeat the callback handler.

    Args:
        agent: A compiled LangGraph graph or a `langchain_classic` `AgentExecutor`.

    Returns:
        One sentence per problem, naming the setting and the fix; empty when none.

    Raises:
        TypeError: If `agent` is neither kind.
    """
    from langgraph.pregel import Pregel

    if isinstance(agent, Pregel):
        return _graph_problems(agent)
    if _is_agent_executor(agent):
        return _executor_problems(agent)
    msg = (
        f"check() takes a compiled LangGraph graph (create_agent, StateGraph.compile()) or a "
        f"langchain_classic AgentExecutor, not {type(agent).__name__}."
    )
    raise TypeError(msg)


def agent_tools(agent: Any) -> list[Any]:
    """The tools an agent runs: its ToolNodes' or its `AgentExecutor`'s (`BaseTool`s).

    Args:
        agent: A compiled LangGraph graph or a `langchain_classic` `AgentExecutor`
            (`enforcement_problems` has rejected anything else).

    Returns:
        The tools.
    """
    if _is_agent_executor(agent):
        return list(agent.tools)
    return [tool for _, node in _tool_nodes(agent) for tool in node.tools_by_name.values()]


def all_tools_known(agent: Any) -> bool:
    """Whether `agent_tools` is every tool the agent can run.

    An `AgentExecutor` runs only its tools. A graph's `ToolNode` with a `wrap_tool_call`
    (`create_agent` with a middleware that has a tool hook) may serve calls to tools it does
    not hold, so its tools are not all the graph can run.

    Args:
        agent: A compiled LangGraph graph or a `langchain_classic` `AgentExecutor`.

    Returns:
        True when no tools node of the agent can run a tool it does not hold.
    """
    if _is_agent_executor(agent):
        return True
    return not any(
        tool_node_settings(node).wrap_tool_call is not None
        or tool_node_settings(node).awrap_tool_call is not None
        for _, node in _tool_nodes(agent)
    )


def _is_agent_executor(agent: Any) -> bool:
    # An AgentExecutor exists only once langchain_classic's agents are imported: importing
    # them here to ask would cost every other agent's check about 0.3 s (and without
    # langchain-classic installed there can be none).
    agents = sys.modules.get("langchain_classic.agents")
    executor = getattr(agents, "AgentExecutor", None)
    return isinstance(executor, type) and isinstance(agent, executor)


def _executor_problems(executor: Any) -> list[str]:
    flag = executor.handle_parsing_errors
    if flag is True or (callable(flag) and not isinstance(flag, bool)):
        return []
    if isinstance(flag, str):
        return [
            "AgentExecutor(handle_parsing_errors=<a string>) would show the model your string "
            "instead of why the guard refused a call: set handle_parsing_errors=True."
        ]
    return [
        "AgentExecutor(handle_parsing_errors=False) fails the run on the first refused call: "
        "set handle_parsing_errors=True so that the refusal becomes an observation."
    ]


def _graph_problems(graph: Any) -> list[str]:
    nodes = _tool_nodes(graph)
    if not nodes:
        return [
            f"graph {graph.get_name()!r} has no ToolNode: a refused call would raise "
            "ToolCallBlockedError from wherever your graph runs tools. Run tools with a "
            "ToolNode, or guard the graph with guard.wrap(tool_node) instead."
        ]
    problems = []
    for path, node in nodes:
        problem = _tool_node_problem(tool_node_settings(node).handle_tool_errors)
        if problem:
            problems.append(f"ToolNode {path!r}: {problem}")
    return problems


def _tool_nodes(graph: Any, prefix: str = "") -> list[tuple[str, Any]]:
    from langgraph.prebuilt import ToolNode
    from langgraph.pregel import Pregel

    found: list[tuple[str, Any]] = []
    for name, node in graph.nodes.items():
        bound = getattr(node, "bound", None)
        if isinstance(bound, ToolNode):
            found.append((prefix + name, bound))
        elif isinstance(bound, Pregel):
            found.extend(_tool_nodes(bound, f"{prefix}{name}/"))
    return found


def _tool_node_problem(flag: Any) -> str | None:
    """Why a `handle_tool_errors` setting would not answer `ToolCallBlockedError`, or None."""
    if flag is True:
        return None
    if flag is False or flag is None:
        return (
            "handle_tool_errors=False fails the run on the first refused call; keep the "
            "default or set handle_tool_errors=True."
        )
    if isinstance(flag, str):
        return (
            "handle_tool_errors=<a string> would show the model your string instead of why "
            "the guard refused a call; keep the default or set handle_tool_errors=True."
        )
    if isinstance(flag, type | tuple):
        if issubclass(ToolCallBlockedError, flag):
            return None
        return (
            f"handle_tool_errors={flag!r} does not catch ToolCallBlockedError; add it "
            "(from langgraph_replay_guard) or keep the default."
        )
    # LangGraph's default answers ToolInvocationError, which ToolCallBlockedError is; other
    # callables pick their exception types from annotations and are trusted to answer.
    return None
