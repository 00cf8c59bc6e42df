"""MCP tool annotations give a tool's class when the configuration does not name the tool."""

from __future__ import annotations

import pytest
from langchain_core.tools import StructuredTool
from langgraph.prebuilt import ToolNode

from langgraph_replay_guard import GuardConfig, ReplayGuard, ToolPolicy, Verdict
from langgraph_replay_guard.policy.resolver import PolicyResolver
from langgraph_replay_guard.policy.tool_hints import (
    hinted,
    hinted_tools,
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


def test_learned_policies_never_reach_the_configuration_its_json_or_a_copy():
    # The order, the cache and the guards' own resolvers: tests/unit/test_policy_resolver.py.
    config = GuardConfig(max_repeats=2, tools={"send": "unsafe"})
    resolver = PolicyResolver(config)
    assert resolver.learn(hinted([("mcp_delete", {"destructiveHint": True})]))
    assert resolver.policy_source("mcp_delete") == "annotations"
    assert resolver.config is config
    assert (
        config.model_dump_json()
        == GuardConfig(max_repeats=2, tools={"send": "unsafe"}).model_dump_json()
    )
    assert config.policy_source("mcp_delete") == "default"
    assert config.model_copy().policy_source("mcp_delete") == "default"
    assert GuardConfig.from_json(config.model_dump_json()).policy_source("mcp_delete") == "default"


def test_hinted_keeps_the_tools_with_annotations_only():
    tools = [annotated_tool("lookup", readOnlyHint=True), annotated_tool("delete_ticket")]
    bare = StructuredTool.from_function(lambda: "x", name="bare", description="x")
    assert hinted_tools([*tools, bare, {"type": "web_search"}]) == {
        "lookup": ToolPolicy(replay="pure"),
        "delete_ticket": ToolPolicy(replay="unsafe"),
    }
    assert hinted([("a", None), ("b", {"owner": "me"}), ("c", {"idempotentHint": True})]) == {
        "c": ToolPolicy(replay="idempotent")
    }


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
