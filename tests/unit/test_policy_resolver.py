"""One policy resolver per guard: the order it answers in, its cache, and no configuration copy."""

from __future__ import annotations

import copy

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode

from langgraph_replay_guard import (
    GuardConfig,
    ReplayGuard,
    ReplayGuardMiddleware,
    ToolPolicy,
    Verdict,
)
from langgraph_replay_guard.decisions.engine import call_facts
from langgraph_replay_guard.decisions.state import new_state
from langgraph_replay_guard.integrations.batches import ToolCallBatch
from langgraph_replay_guard.integrations.calls import DecisionCache
from langgraph_replay_guard.policy.resolver import PolicyResolver, resolver_of
from langgraph_replay_guard.policy.tool_hints import hinted, hinted_tools
from langgraph_replay_guard.testing import ScriptedChatModel

# InMemorySaver makes the guard warn that an unsafe tool's thread is not durable.
pytestmark = pytest.mark.filterwarnings(
    "ignore:langgraph-replay-guard.*:langgraph_replay_guard.ReplayGuardWarning",
    "ignore::langgraph_replay_guard.UnclassifiedToolsWarning",
)

UNSAFE = {"destructiveHint": True}
PURE = {"readOnlyHint": True}


def annotated_tool(name: str, runs: list[str] | None = None, **hints: object) -> StructuredTool:
    """A tool with MCP hints in its metadata; each run of its body is appended to `runs`."""
    done = runs if runs is not None else []

    def run(ticket_id: str) -> str:
        done.append(ticket_id)
        return f"{name} {ticket_id} #{len(done)}"

    return StructuredTool.from_function(
        run, name=name, description=f"{name} a ticket", metadata=dict(hints)
    )


def facts_of(policies: GuardConfig | PolicyResolver, tool: str) -> tuple[str, str | None]:
    facts = call_facts(policies, tool, {"ticket_id": "T-7"})
    return facts.replay, facts.source


def test_the_order_is_tools_then_toolkits_then_learned_hints_then_default():
    config = GuardConfig(
        tools={"mine": "idempotent"},
        toolkits=["deepagents"],
        default_policy=ToolPolicy(replay="unsafe"),
    )
    resolver = PolicyResolver(config)
    resolver.learn(hinted((name, PURE) for name in ("mine", "write_file", "mcp_read")))
    assert resolver.policy_for("mine").replay == "idempotent"  # the user's entry wins
    assert resolver.policy_for("write_file") == config.toolkit_tools["write_file"]  # toolkit
    assert resolver.policy_for("mcp_read").replay == "pure"  # the learned hint
    assert resolver.policy_for("other") is config.default_policy
    assert [resolver.policy_source(t) for t in ("mine", "write_file", "mcp_read", "other")] == [
        "tools",
        "toolkit",
        "annotations",
        "default",
    ]
    assert [facts_of(resolver, t)[1] for t in ("mine", "write_file", "mcp_read", "other")] == [
        "tools",
        "toolkit",
        "annotations",
        "default",
    ]
    # The configuration alone answers without the hint, as it always did.
    assert config.policy_for("mcp_read").replay == "unsafe"
    assert config.policy_source("mcp_read") == "default"
    assert facts_of(config, "mcp_read") == ("unsafe", "default")


def test_a_hint_learned_after_a_first_answer_changes_the_next_answer():
    config = GuardConfig(failure_pattern="boom")
    resolver = PolicyResolver(config)
    assert facts_of(resolver, "delete") == ("pure", "default")  # cached from here
    first = resolver.rules("delete")
    assert resolver.rules("delete") is first  # the cache answers
    assert resolver.learn(hinted([("delete", UNSAFE)]))
    assert facts_of(resolver, "delete") == ("unsafe", "annotations")
    assert resolver.rules("delete") is not first
    assert resolver.learn(hinted([("delete", PURE)]))  # the server changed its mind
    assert facts_of(resolver, "delete") == ("pure", "annotations")
    assert resolver.same_failure_limit("delete") == config.max_same_failures
    assert resolver.failure_regex_for("delete") is config.failure_regex


def test_learning_only_what_is_new_drops_the_cache():
    resolver = PolicyResolver(GuardConfig())
    assert not resolver.learn(hinted([("search", None), ("plain", {"owner": "me"})]))
    assert resolver.version == 0
    assert resolver.learn(hinted([("delete", UNSAFE)]))
    rules = resolver.rules("delete")
    # The same class again (other hints, one class): nothing new, the cache stays.
    assert not resolver.learn(
        hinted([("delete", {"destructiveHint": True, "readOnlyHint": False})])
    )
    assert resolver.version == 1
    assert resolver.rules("delete") is rules
    assert dict(resolver.learned) == {"delete": ToolPolicy(replay="unsafe")}


def test_a_plan_made_before_a_hint_was_learned_is_not_reused():
    resolver = PolicyResolver(GuardConfig())
    cache = DecisionCache()
    value = new_state()
    ai = AIMessage(
        content="", id="ai-1", tool_calls=[{"name": "delete", "args": {"id": 7}, "id": "c1"}]
    )
    batch = ToolCallBatch(ai, "turn-1")
    before = cache.decide(resolver, value, batch)
    assert cache.decide(resolver, value, batch) is before  # cached while nothing is learned
    assert before.calls[0].facts.replay == "pure"
    resolver.learn(hinted([("delete", UNSAFE)]))
    after = cache.decide(resolver, value, batch)
    assert after is not before
    assert after.calls[0].facts.replay == "unsafe"


def test_a_users_policy_always_wins_over_a_hint():
    config = GuardConfig(tools={"delete": "pure"}, toolkits=["deepagents"])
    resolver = PolicyResolver(config)
    assert facts_of(resolver, "delete") == ("pure", "tools")  # answered and cached first
    resolver.learn(hinted([("delete", UNSAFE), ("write_file", PURE)]))
    assert facts_of(resolver, "delete") == ("pure", "tools")
    assert resolver.policy_for("write_file") is config.toolkit_tools["write_file"]
    learned_first = PolicyResolver(config)
    learned_first.learn(hinted([("delete", UNSAFE)]))  # learned before any answer
    assert facts_of(learned_first, "delete") == ("pure", "tools")


def test_two_guards_never_share_learned_hints():
    config = GuardConfig()
    guard, other = ReplayGuard(config), ReplayGuard(config)
    guard.wrap(ToolNode([annotated_tool("delete_ticket", **UNSAFE)]))
    assert facts_of(guard.control()._policies, "delete_ticket") == ("unsafe", "annotations")
    assert facts_of(other.control()._policies, "delete_ticket") == ("pure", "default")
    assert facts_of(config, "delete_ticket") == ("pure", "default")
    ctl = guard.control()
    ctl.record_success("delete_ticket", {"ticket_id": "T-7"}, result="ok")
    assert ctl.evaluate("delete_ticket", {"ticket_id": "T-7"}).verdict is Verdict.ALLOW
    ctl = other.control()
    ctl.record_success("delete_ticket", {"ticket_id": "T-7"}, result="ok")
    assert ctl.evaluate("delete_ticket", {"ticket_id": "T-7"}).verdict is not Verdict.ALLOW


def test_learning_a_hint_makes_no_configuration_copy():
    """Fails on 66baf92: a guard that learned a class decided with a copy of its config."""
    config = GuardConfig(max_repeats=4)
    dumped = config.model_dump_json()
    guard = ReplayGuard(config)
    guard.wrap(ToolNode([annotated_tool("delete_ticket", **UNSAFE)]))
    ctl = guard.control()
    assert ctl.evaluate("delete_ticket", {"ticket_id": "T-7"}).verdict is Verdict.ALLOW
    # Decided with the class it learned, and with the user's own configuration object.
    assert ctl._config is config
    assert guard.config is config
    assert config.model_dump_json() == dumped
    assert config == GuardConfig(max_repeats=4)
    assert config.policy_source("delete_ticket") == "default"


def test_the_middleware_decides_with_the_users_configuration_after_learning():
    """Fails on 66baf92: the middleware's adapters held a copy made for the learned class."""
    config = GuardConfig()
    middleware = ReplayGuardMiddleware(config)
    runs: list[str] = []
    delete = annotated_tool("delete_ticket", runs, **UNSAFE)
    model = ScriptedChatModel(
        script=[[("delete_ticket", {"ticket_id": "T-7"})]] * 2, final="Deleted."
    )
    agent = create_agent(model, [delete], middleware=[middleware], checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage("delete T-7")]}, {"configurable": {"thread_id": "t"}})
    assert runs == ["T-7", "T-7"]  # unsafe from its hints: the repeat is not deduplicated
    calls = middleware._calls
    assert calls.config is config
    assert calls.gate.config is config
    assert calls.policies.policy_source("delete_ticket") == "annotations"
    assert middleware.guard.config is config


def test_a_configurations_own_resolver_never_learns():
    config = GuardConfig()
    assert resolver_of(config) is config.resolver
    assert config.resolver.config is config
    with pytest.raises(TypeError, match="never learns"):
        config.resolver.learn(hinted([("delete", UNSAFE)]))
    assert config.policy_source("delete") == "default"
    resolver = PolicyResolver(config)
    assert resolver_of(resolver) is resolver


def test_a_copy_answers_for_itself_and_a_config_can_still_be_copied():
    config = GuardConfig(tools={"send": "unsafe"})
    assert config.policy_for("send").replay == "unsafe"  # builds the config's resolver
    changed = config.model_copy(update={"tools": {"send": ToolPolicy(replay="idempotent")}})
    assert changed.policy_for("send").replay == "idempotent"
    assert changed.resolver.config is changed
    deep = copy.deepcopy(config)
    assert deep == config
    assert deep.policy_for("send").replay == "unsafe"
    guard = ReplayGuard(config)
    guard._policies.learn(hinted_tools([annotated_tool("mcp_delete", **UNSAFE)]))
    assert copy.deepcopy(guard._policies).policy_source("mcp_delete") == "annotations"
