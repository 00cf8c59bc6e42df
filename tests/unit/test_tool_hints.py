"""MCP tool annotations give a tool's class when the configuration does not name the tool."""

from __future__ import annotations

import pytest
from langchain_core.tools import StructuredTool
from langgraph.prebuilt import ToolNode

from langgraph_replay_guard import GuardConfig, ReplayGuard, ToolPolicy, Verdict
from langgraph_replay_guard.decisions.engine import call_facts
from langgraph_replay_guard.policy.tool_hints import (
    LearnedPolicies,
    policy_from_hints,
    replay_class_from_hints,
    tool_hints,
)

# What langchain-mcp-adapters puts in `BaseTool.metadata` for an annotated tool: every field
# of the server's `ToolAnnotations`, the unset ones as None.
UNSET = {
    "title": None,
    "readOnlyHint": None,
    "destructiveHint": None,
    "idempotentHint": None,
    "openWorldHint": None,
}


@pytest.mark.parametrize(
    ("hints", "expected"),
    [
        ({**UNSET, "readOnlyHint": True}, "pure"),
        ({"readOnlyHint": True, "destructiveHint": True}, "pure"),  # read-only wins
        ({"readOnlyHint": True, "openWorldHint": True}, "pure"),
        ({**UNSET, "readOnlyHint": False, "idempotentHint": True}, "idempotent"),
        ({"idempotentHint": True, "destructiveHint": True}, "idempotent"),
        ({**UNSET, "destructiveHint": True}, "unsafe"),
        ({"readOnlyHint": False, "destructiveHint": False}, "unsafe"),  # additive: still a write
        (UNSET, "unsafe"),  # annotated, no hint set: the MCP defaults are a destructive write
        ({**UNSET, "title": "Escalate"}, "unsafe"),
        ({"openWorldHint": False}, "unsafe"),
        ({"readOnlyHint": "true", "idempotentHint": 1}, "unsafe"),  # only JSON true counts
        ({"readOnlyHint": None, "_meta": {"x": 1}}, "unsafe"),
    ],
)
def test_the_hints_give_a_class(hints, expected):
    assert replay_class_from_hints(hints) == expected
    policy = policy_from_hints(hints)
    assert policy is not None
    assert policy == ToolPolicy(replay=expected)
    assert policy is policy_from_hints(hints)  # shared: no policy object per tool


@pytest.mark.parametrize(
    "hints", [None, {}, {"title": "Search"}, {"_meta": {"readOnlyHint": True}}, {"owner": "me"}]
)
def test_a_tool_without_mcp_hints_has_no_class_from_them(hints):
    assert replay_class_from_hints(hints) is None
    assert policy_from_hints(hints) is None


def test_the_lookup_order_is_tools_then_toolkits_then_annotations_then_default():
    config = GuardConfig(
        tools={"mine": "idempotent"},
        toolkits=["deepagents"],
        default_policy=ToolPolicy(replay="unsafe"),
    )
    hinted = config.with_annotations(
        {name: ToolPolicy(replay="pure") for name in ("mine", "write_file", "mcp_read")}
    )
    assert hinted.policy_for("mine").replay == "idempotent"  # the user's entry wins
    assert hinted.policy_for("write_file") == config.toolkit_tools["write_file"]  # the toolkit's
    assert hinted.policy_for("mcp_read").replay == "pure"  # the annotations'
    assert hinted.policy_for("other") is config.default_policy
    assert [hinted.policy_source(t) for t in ("mine", "write_file", "mcp_read", "other")] == [
        "tools",
        "toolkit",
        "annotations",
        "default",
    ]
    assert config.policy_for("mcp_read").replay == "unsafe"  # the user's config is unchanged
    assert config.policy_source("mcp_read") == "default"


def test_learned_policies_never_reach_json_a_copy_or_the_shared_config():
    config = GuardConfig(max_repeats=2, tools={"send": "unsafe"})
    hinted = config.with_annotations({"mcp_delete": ToolPolicy(replay="unsafe")})
    assert hinted.model_dump_json() == config.model_dump_json()
    assert hinted.model_dump() == config.model_dump()
    reloaded = GuardConfig.from_json(hinted.model_dump_json())
    assert reloaded == config
    assert reloaded.policy_source("mcp_delete") == "default"
    assert hinted.model_copy().policy_source("mcp_delete") == "default"
    copied = hinted.model_copy(update={"max_repeats": 5})
    assert copied.policy_for("mcp_delete").replay == "pure"


def test_learning_makes_a_new_config_only_when_a_class_is_new():
    config = GuardConfig()
    learned = LearnedPolicies(config)
    assert learned.config is config
    assert not learned.learn([("search", None), ("plain", {"owner": "me"})])
    assert learned.config is config
    assert learned.learn([("delete", {"destructiveHint": True})])
    first = learned.config
    assert first is not config
    assert first.policy_for("delete").replay == "unsafe"
    assert not learned.learn([("delete", {"destructiveHint": True, "readOnlyHint": False})])
    assert learned.config is first  # same class again: nothing new, the same object
    assert learned.learn([("delete", {"readOnlyHint": True})])  # the server changed its mind
    assert learned.config.policy_for("delete").replay == "pure"
    assert config.policy_source("delete") == "default"


def test_a_class_learned_after_a_decision_is_not_hidden_by_the_rules_cache():
    config = GuardConfig()
    learned = LearnedPolicies(config)
    before = call_facts(learned.config, "delete", {"id": 1})  # caches the tool's rules
    assert (before.replay, before.source) == ("pure", "default")
    learned.learn([("delete", {"destructiveHint": True})])
    after = call_facts(learned.config, "delete", {"id": 1})
    assert (after.replay, after.source) == ("unsafe", "annotations")
    assert call_facts(config, "delete", {"id": 1}).replay == "pure"


def annotated_tool(name: str, **hints: object) -> StructuredTool:
    def run(ticket_id: str) -> str:
        return f"{name} {ticket_id}"

    return StructuredTool.from_function(
        run, name=name, description=f"{name} a ticket", metadata={**UNSET, **hints}
    )


def repeats_run(guard: ReplayGuard, tool: str) -> bool:
    """Whether an identical call of `tool` after a success would run again."""
    ctl = guard.control()
    ctl.record_success(tool, {"ticket_id": "T-7"}, result="ok")
    return ctl.evaluate(tool, {"ticket_id": "T-7"}).verdict is Verdict.ALLOW


def test_each_guard_learns_its_own_tools_even_with_a_shared_config():
    config = GuardConfig()
    guard, other = ReplayGuard(config), ReplayGuard(config)
    guard.wrap(ToolNode([annotated_tool("delete_ticket", destructiveHint=True)]))
    assert repeats_run(guard, "delete_ticket")  # unsafe: never deduplicated
    assert not repeats_run(other, "delete_ticket")  # the other guard never saw the tool
    assert guard.config is config
    assert config.policy_source("delete_ticket") == "default"
    assert config.model_dump_json() == GuardConfig().model_dump_json()


def test_the_users_policy_wins_over_the_hints():
    guard = ReplayGuard(tools={"delete_ticket": "pure"})
    guard.wrap(ToolNode([annotated_tool("delete_ticket", destructiveHint=True)]))
    assert not repeats_run(guard, "delete_ticket")


def test_tool_hints_reads_a_tools_name_and_metadata():
    tool = annotated_tool("lookup", readOnlyHint=True)
    assert tool_hints(tool) == ("lookup", tool.metadata)
    assert tool_hints({"type": "web_search"}) is None  # a provider tool's dict
    assert (
        tool_hints(StructuredTool.from_function(lambda: "x", name="bare", description="x")) is None
    )
