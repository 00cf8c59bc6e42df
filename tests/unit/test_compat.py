"""Every private LangGraph/LangChain access in `_compat` still works on the installed versions."""

from __future__ import annotations

import inspect
from importlib.metadata import version

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_config
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolInvocationError

from langgraph_replay_guard import _compat
from langgraph_replay_guard.testing import ScriptedChatModel


@tool
def lookup(id: str) -> str:
    """Read a record."""
    return id


def _major(package: str) -> int:
    return int(version(package).split(".")[0])


def test_supported_version_ranges():
    # The accessors below are checked against these majors; a new major needs a look.
    assert _major("langgraph") == 1
    assert _major("langgraph-prebuilt") == 1
    assert _major("langchain") == 1


def test_tool_node_settings_reads_what_the_node_was_built_with():
    def wrap(request, execute):
        return execute(request)

    def on_error(error: ValueError) -> str:
        return "bad"

    node = ToolNode([lookup], wrap_tool_call=wrap, handle_tool_errors=on_error, messages_key="m")
    settings = _compat.tool_node_settings(node)
    assert settings.wrap_tool_call is wrap
    assert settings.awrap_tool_call is None
    assert settings.messages_key == "m"
    assert settings.handle_tool_errors is on_error
    assert _compat.handled_error_types(on_error) == (ValueError,)
    assert not _compat.is_default_tool_error_handler(on_error)


def test_default_tool_error_handler_is_recognised_and_its_text_reproduced():
    default = _compat.tool_node_settings(ToolNode([lookup])).handle_tool_errors
    assert _compat.is_default_tool_error_handler(default)
    assert issubclass(ToolInvocationError, _compat.handled_error_types(default))
    assert _compat.tool_error_content(ValueError("boom"), True).startswith("Error: ValueError")


def test_run_checkpointer_and_durability_are_read_inside_a_node():
    seen = {}

    def node(state: MessagesState) -> dict:
        configurable = get_config()["configurable"]
        seen["checkpointer"] = _compat.run_checkpointer(configurable)
        seen["durability"] = _compat.run_durability(configurable)
        return {}

    saver = InMemorySaver()
    graph = StateGraph(MessagesState).add_node("n", node).add_edge(START, "n").compile(saver)
    graph.invoke({"messages": []}, {"configurable": {"thread_id": "t"}}, durability="sync")
    assert seen == {"checkpointer": saver, "durability": "sync"}


def test_create_agent_middleware_sees_the_list_being_built():
    seen = []

    class Probe(AgentMiddleware):
        @property
        def name(self) -> str:
            seen.append(_compat.create_agent_middleware())
            return "Probe"

        def wrap_tool_call(self, request, handler):
            return handler(request)

    probe = Probe()
    create_agent(ScriptedChatModel(script=[AIMessage("done")]), [lookup], middleware=[probe])
    assert seen
    assert all(found == [probe] for found in seen)
    assert _compat.create_agent_middleware() is None


@pytest.mark.parametrize("flag", [True, "text", (ValueError,)])
def test_non_callable_flags_are_not_the_default_handler(flag):
    assert not _compat.is_default_tool_error_handler(flag)


def test_delegate_store_unwraps_langgraph_devs_batching_store():
    from langgraph.store.memory import InMemoryStore

    class Wrapper:  # the shape of langgraph-api's batching store
        def __init__(self, inner):
            self._store = inner

    inner = InMemoryStore()
    assert _compat.delegate_store(Wrapper(inner)) is inner
    assert _compat.delegate_store(inner) is None


@pytest.mark.parametrize(
    "hook", ["wrap_model_call", "awrap_model_call", "wrap_tool_call", "awrap_tool_call"]
)
def test_middleware_hooks_carry_their_signature_computed_once(hook):
    # create_agent wraps each hook in langsmith's `traceable`, which asks inspect.signature
    # for it on every call; the precomputed one must be what it gets, and it must be right.
    from langgraph_replay_guard import ReplayGuardMiddleware

    function = getattr(ReplayGuardMiddleware, hook)
    assert inspect.signature(function) is function.__signature__
    assert list(inspect.signature(getattr(ReplayGuardMiddleware(), hook)).parameters) == [
        "request",
        "handler",
    ]
    assert inspect.iscoroutinefunction(function) == hook.startswith("a")
