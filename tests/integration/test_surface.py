"""The LangChain-style surface: option names, flat keywords, several instances, exports."""

from __future__ import annotations

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool

import langgraph_replay_guard
from langgraph_replay_guard import (
    GuardConfig,
    ReplayGuard,
    ReplayGuardCallbackHandler,
    ReplayGuardMiddleware,
)
from langgraph_replay_guard.testing import ScriptedChatModel


@tool
def lookup(id: str) -> str:
    """Read a record."""
    return f"record {id}"


def test_exit_behavior_is_the_option_and_on_abort_a_deprecated_alias():
    assert GuardConfig(exit_behavior="error").exit_behavior == "error"
    with pytest.warns(DeprecationWarning, match="exit_behavior"):
        old = GuardConfig(on_abort="continue")
    assert old.exit_behavior == "continue"
    assert old.on_abort == "continue"
    assert "on_abort" not in old.model_dump()
    with pytest.raises(ValueError, match="disagree"):
        GuardConfig(on_abort="end", exit_behavior="error")


@pytest.mark.parametrize(
    "build",
    [
        lambda **kw: ReplayGuard(**kw).config,
        lambda **kw: ReplayGuardMiddleware(**kw).guard.config,
        lambda **kw: ReplayGuardCallbackHandler(**kw).config,
    ],
    ids=["guard", "middleware", "callback_handler"],
)
def test_every_constructor_takes_config_fields_as_flat_keywords(build):
    config = build(tools={"send_email": "unsafe"}, max_repeats=2, exit_behavior="error")
    assert config.max_repeats == 2
    assert config.exit_behavior == "error"
    assert config.policy_for("send_email").replay == "unsafe"
    with pytest.raises(TypeError, match="not both"):
        build(config=GuardConfig(), max_repeats=2)
    with pytest.raises(ValueError, match="exit_behavior") as caught:
        build(exit_behavior="stop")
    assert "'end', 'error' or 'continue'" in str(caught.value)
    # An unknown keyword is a TypeError, as Python's own, naming the option meant (issue 34).
    with pytest.raises(TypeError, match=r"'max_repeatz'\. Did you mean 'max_repeats'\?"):
        build(max_repeatz=2)


def test_two_named_middleware_instances_keep_separate_channels_in_one_agent():
    first = ReplayGuardMiddleware(max_repeats=2, name="reads")
    second = ReplayGuardMiddleware(tools={"lookup": "unsafe"}, name="writes")
    assert first.channel != second.channel
    agent = create_agent(
        ScriptedChatModel(script=[[("lookup", {"id": "P1"})]]),
        [lookup],
        middleware=[first, second],
    )
    result = agent.invoke({"messages": [HumanMessage("look")]})
    assert [m.content for m in result["messages"] if isinstance(m, ToolMessage)] == ["record P1"]
    assert result.keys() >= {"messages"}


def test_two_unnamed_middleware_instances_fail_naming_the_fix():
    # While `create_agent` builds the agent (it reads the guard's `tools` first), before
    # LangChain's generic "Please remove duplicate middleware instances.".
    runs: list[str] = []

    @tool
    def counted(id: str) -> str:
        """Read a record."""
        runs.append(id)
        return id

    model = ScriptedChatModel(script=[[("counted", {"id": "P1"})]])
    with pytest.raises(ValueError, match="without a name") as caught:
        create_agent(
            model, [counted], middleware=[ReplayGuardMiddleware(), ReplayGuardMiddleware()]
        )
    assert "name=" in str(caught.value)
    named = [ReplayGuardMiddleware(name="x"), ReplayGuardMiddleware(name="x")]
    with pytest.raises(ValueError, match=r"named 'x'.*distinct name="):
        create_agent(model, [counted], middleware=named)
    assert runs == []
    assert model.calls == 0
    # One unnamed instance next to a named one, and one instance reused by two agents, run.
    shared = ReplayGuardMiddleware()
    script = [[("counted", {"id": "P1"})], "Done."]
    for middleware in ([shared, ReplayGuardMiddleware(name="writes")], [shared]):
        agent = create_agent(ScriptedChatModel(script=script), [counted], middleware=middleware)
        agent.invoke({"messages": [HumanMessage("look")]})
    assert runs == ["P1", "P1"]


def test_public_exports():
    assert "ToolCallBlockedError" in langgraph_replay_guard.__all__
    from langgraph_replay_guard import ToolCallBlockedError

    assert issubclass(ToolCallBlockedError, Exception)
    from langgraph_replay_guard import testing

    assert testing.ScriptedChatModel is ScriptedChatModel
    assert set(testing.__all__) >= {"ScriptedChatModel", "tool_call"}


def test_name_is_a_plain_str_and_tools_only_fits_the_tool_hooks():
    """Issue 37 item 1: reading `name` ran code; reading `tools` did more than fit hooks.

    `name` is a plain `str` attribute. `tools` is always empty; outside a `create_agent`
    build, reading it does nothing, and inside one it only fits the instance's tool hooks
    to the agent (`_compat.agent_being_built`).
    """
    import inspect

    from langgraph_replay_guard.integrations.middleware import _ToolFreeReplayGuardMiddleware

    guard = ReplayGuardMiddleware()
    assert not isinstance(inspect.getattr_static(ReplayGuardMiddleware, "name"), property)
    assert type(vars(guard)["name"]) is str
    assert vars(guard)["name"] == "ReplayGuardMiddleware"
    assert ReplayGuardMiddleware(name="billing").name == "billing"
    assert guard.tools == []
    assert type(guard) is ReplayGuardMiddleware  # read outside a build: nothing changes
    with pytest.raises(TypeError, match="no tools of its own"):
        guard.tools = [lookup]
    create_agent(ScriptedChatModel(final="hi"), tools=[], middleware=[guard])
    assert type(guard) is _ToolFreeReplayGuardMiddleware
    assert guard.tools == []
    assert type(guard) is _ToolFreeReplayGuardMiddleware  # fitted by the build, not the read
    create_agent(ScriptedChatModel(final="hi"), tools=[lookup], middleware=[guard])
    assert type(guard) is ReplayGuardMiddleware
