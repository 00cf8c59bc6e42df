"""Toolkits: named tool policies shipped as data, chosen with `GuardConfig(toolkits=[...])`."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import pytest
from pydantic import ValidationError

from langgraph_replay_guard import CallClass, GuardConfig, ReplayGuard, ToolPolicy
from langgraph_replay_guard.policy.config import ToolkitRef
from langgraph_replay_guard.policy.toolkit_data import known_toolkits, load_toolkit
from tests.unit.engine_runs import run_through_engine

DOCS = Path(__file__).parent.parent.parent / "docs"
SHIPPED = {
    "deepagents",
    "langchain",
    "mcp-reference",
    "swe-agent",
    "mini-swe-agent",
    "openhands",
}


def call_class(config: GuardConfig, tool: str, args: dict | None = None) -> CallClass:
    """The class the guard gives one call, as `replay-guard eval` and the engine see it."""
    policy = config.policy_for(tool)
    if policy.classifier_fn is not None:
        return policy.classifier_fn(tool, args or {})[0]
    return CallClass(policy.replay, policy.volatile)


PURE, VOLATILE = CallClass("pure"), CallClass("pure", volatile=True)
IDEMPOTENT, UNSAFE = CallClass("idempotent"), CallClass("unsafe")


def test_every_shipped_toolkit_loads_with_a_one_line_reason_per_tool():
    assert set(known_toolkits()) == SHIPPED
    folder = resources.files("langgraph_replay_guard.policy") / "toolkits"
    for name in known_toolkits():
        assert (folder / f"{name}.json").is_file()  # in the package, so in the wheel
        data = load_toolkit(name)
        assert data["toolkit"] == name
        assert data["tools"]
        for tool, entry in data["tools"].items():
            reason = entry["reason"]
            assert reason.strip(), (name, tool)
            assert "\n" not in reason, (name, tool)
            assert len(reason) <= 200, (name, tool)
        config = GuardConfig(toolkits=[name])
        assert set(config.toolkit_tools) == set(data["tools"])
        assert config.tools == {}  # expanded beside the user's tools, not into them


def test_swe_agent_viewers_are_volatile_searches_pure_edits_unsafe_on_the_open_file():
    config = GuardConfig(toolkits=["swe-agent"])
    for tool in ("open", "goto", "scroll_up", "scroll_down"):
        assert call_class(config, tool) == VOLATILE
    for tool in ("search_dir", "find_file"):
        # Without a dir: the current directory, which only `cd` changes (a new epoch).
        assert call_class(config, tool, {"search_term": "ttl"}) == PURE
    # Told which file, a search is a pure read; not told, it searches the file open in the
    # viewer, which `open` changes without writing anything.
    assert call_class(config, "search_file", {"search_term": "ttl", "file": "a.py"}) == PURE
    assert call_class(config, "search_file", {"search_term": "ttl"}) == VOLATILE
    assert call_class(config, "search_file", {"search_term": "ttl", "file": " "}) == VOLATILE
    for tool in ("create", "submit"):
        assert call_class(config, tool) == UNSAFE
    # edit and insert act on the file open in the viewer, which `open` changes: volatile.
    for tool in ("edit", "insert"):
        assert call_class(config, tool) == CallClass("unsafe", volatile=True)
    assert call_class(config, "bash", {"command": "grep -rn ttl src"}) == PURE
    assert call_class(config, "bash", {"command": "python -m pytest -q"}) == IDEMPOTENT
    assert call_class(config, "bash", {"command": "rm -rf src"}) == UNSAFE


def test_swe_agent_search_in_the_open_file_runs_again_after_another_open():
    # SWE-agent: `search_file x` without a file searches the file open in the viewer.
    run = run_through_engine(ReplayGuard(toolkits=["swe-agent"]))
    assert run("open", {"path": "A.java"}, "[File: A.java]") == "allow"
    assert run("search_file", {"search_term": "ttl"}, "12: int ttl = 60;") == "allow"
    assert run("open", {"path": "B.java"}, "[File: B.java]") == "allow"
    assert run("search_file", {"search_term": "ttl"}, "40: long ttl;") == "allow"
    # Told which file, the same search is a duplicate until the next write.
    there = {"search_term": "ttl", "file": "A.java"}
    assert run("search_file", there, "12: int ttl = 60;") == "allow"
    assert run("search_file", there, "12: int ttl = 60;") == "deny"


def test_swe_agent_tests_re_run_after_each_str_replace_edit_all_run():
    # SWE-agent 1.x edits with str_replace_editor: each edit is a write, so the tests run
    # again after it (they were stopped as a repeat when the edit counted as a read).
    run = run_through_engine(ReplayGuard(toolkits=["swe-agent"]))
    tests = {"command": "python -m pytest -q"}
    for n in range(6):
        assert run("bash", tests, "F.\n1 failed") == "allow"
        edit = {"command": "str_replace", "path": "/repo/a.py", "old_str": f"v{n}"}
        assert run("str_replace_editor", {**edit, "new_str": f"v{n + 1}"}, "edited") == "allow"
    view = {"command": "view", "path": "/repo/a.py"}
    assert run("str_replace_editor", view, "1\tv6") == "allow"
    assert run("str_replace_editor", view, "1\tv6") == "deny"


def test_deepagents_and_langchain_tools_get_the_classes_their_code_implies():
    deep = GuardConfig(toolkits=["deepagents"])
    assert [call_class(deep, t) for t in ("ls", "read_file", "glob", "grep")] == [PURE] * 4
    assert call_class(deep, "write_file") == IDEMPOTENT
    assert call_class(deep, "write_todos") == IDEMPOTENT
    assert call_class(deep, "edit_file") == UNSAFE
    assert call_class(deep, "task") == UNSAFE
    assert call_class(deep, "check_async_task") == VOLATILE
    assert call_class(deep, "execute", {"command": "cat README.md"}) == PURE
    assert call_class(deep, "execute", {"command": "make deploy"}) == UNSAFE
    chain = GuardConfig(toolkits=["langchain"])
    assert call_class(chain, "shell", {"command": "ls -la"}) == PURE
    assert call_class(chain, "shell", {"restart": True}) == UNSAFE
    assert call_class(chain, "glob_search") == PURE
    assert call_class(chain, "grep_search") == PURE
    mini = GuardConfig(toolkits=["mini-swe-agent"])
    assert call_class(mini, "bash", {"command": "cat setup.py"}) == PURE
    mcp = GuardConfig(toolkits=["mcp-reference"])
    assert call_class(mcp, "read_text_file") == PURE
    assert call_class(mcp, "git_commit") == UNSAFE
    assert call_class(mcp, "git_add") == IDEMPOTENT
    assert call_class(mcp, "fetch") == VOLATILE


def test_openhands_tools_get_the_classes_their_definitions_document():
    config = GuardConfig(toolkits=["openhands"])
    bash = "execute_bash"
    assert call_class(config, bash, {"command": "cat x"}) == PURE
    assert call_class(config, bash, {"command": "grep -rn ttl /workspace/src"}) == PURE
    assert call_class(config, bash, {"command": "rm x"}) == UNSAFE
    assert call_class(config, bash, {"command": "python -m pytest -q"}) == IDEMPOTENT
    assert call_class(config, bash, {"command": "C-c"}) == UNSAFE
    # An empty command reads the running process's new output: it changes on its own.
    assert call_class(config, bash, {"command": ""}) == VOLATILE
    assert call_class(config, bash, {"command": "", "is_input": "true"}) == VOLATILE
    # With is_input, the command is text typed into the running process, not a command.
    assert call_class(config, bash, {"command": "cat x", "is_input": "true"}) == UNSAFE
    assert call_class(config, bash, {"command": "cat x", "is_input": "false"}) == PURE
    editor = "str_replace_editor"
    assert call_class(config, editor, {"command": "view", "path": "/w/a.py"}) == PURE
    for command in ("create", "str_replace", "insert", "undo_edit"):
        assert call_class(config, editor, {"command": command, "path": "/w/a.py"}) == UNSAFE
    assert call_class(config, editor, {"path": "/w/a.py"}) == UNSAFE  # no command: unknown
    assert call_class(config, "execute_ipython_cell", {"code": "print(1)"}) == UNSAFE
    assert call_class(config, "think", {"thought": "the bug is in ttl"}) == PURE
    assert call_class(config, "finish", {"message": "done"}) == UNSAFE
    assert call_class(config, "web_read", {"url": "https://example.com"}) == VOLATILE
    assert call_class(config, "browser", {"code": "noop()"}) == VOLATILE
    assert call_class(config, "browser", {"code": "noop(wait_ms=500)"}) == VOLATILE
    for code in ("goto('https://example.com')", "click('a51')", "noop()\nclick('a51')"):
        assert call_class(config, "browser", {"code": code}) == UNSAFE


def test_openhands_view_is_deduplicated_until_an_edit_of_the_file():
    run = run_through_engine(ReplayGuard(toolkits=["openhands"]))
    view = {"command": "view", "path": "/workspace/cache.py", "security_risk": "LOW"}
    assert run("str_replace_editor", view, "1\tttl = 60") == "allow"
    # The model's own risk label is not part of the call: the same view again.
    assert run("str_replace_editor", {**view, "security_risk": "MEDIUM"}, "") == "deny"
    # Another window of the file is another read.
    assert run("str_replace_editor", {**view, "view_range": [1, 5]}, "1\tttl = 60") == "allow"
    edit = {"command": "str_replace", "path": "/workspace/cache.py", "old_str": "60"}
    assert run("str_replace_editor", {**edit, "new_str": "600"}, "edited") == "allow"
    assert run("str_replace_editor", view, "1\tttl = 600") == "allow"  # the file changed
    assert run("execute_bash", {"command": "cat x"}, "x") == "allow"
    assert run("execute_bash", {"command": "cat x"}, "x") == "deny"
    assert run("execute_bash", {"command": "rm x"}, "") == "allow"
    assert run("execute_bash", {"command": "cat x"}, "No such file") == "allow"  # after rm


def test_openhands_finish_and_new_logs_always_run_and_a_repeated_thought_is_a_loop():
    run = run_through_engine(ReplayGuard(toolkits=["openhands"]))
    assert run("finish", {"message": "done"}, "done") == "allow"
    assert run("finish", {"message": "done"}, "done") == "allow"  # counted, never deduplicated
    run = run_through_engine(ReplayGuard(toolkits=["openhands"]))
    assert run("execute_bash", {"command": "python -m pytest"}, "exit code -1") == "allow"
    assert run("execute_bash", {"command": ""}, "collected 12 items") == "allow"
    assert run("execute_bash", {"command": ""}, "12 passed") == "allow"
    run = run_through_engine(ReplayGuard(toolkits=["openhands"]))
    thought = {"thought": "maybe the ttl is wrong"}
    verdicts = [run("think", thought, "Your thought has been logged.") for _ in range(4)]
    assert verdicts[:3] == ["allow", "deny", "deny"]
    assert verdicts[3] == "abort"  # the same thought again and again: a loop, stopped


def test_the_users_own_tools_entry_wins_over_the_toolkit_as_a_whole(tmp_path: Path):
    config = GuardConfig(
        toolkits=["swe-agent"],
        tools={"search_dir": {"replay": "unsafe", "max_repeats": 5}, "bash": "unsafe"},
    )
    assert config.policy_for("search_dir") == ToolPolicy(replay="unsafe", max_repeats=5)
    # The whole entry: the toolkit's shell preset is not merged into the user's bash entry.
    assert config.policy_for("bash") == ToolPolicy(replay="unsafe")
    assert config.policy_for("find_file").replay == "pure"
    assert config.policy_for("not_in_any_toolkit") == config.default_policy
    # A policy file merged in later wins too.
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps({"tools": {"find_file": "unsafe"}}))
    merged = config.with_policies(policy_file)
    assert merged.policy_for("find_file") == ToolPolicy(replay="unsafe")
    assert merged.policy_for("goto").volatile  # the toolkit still fills in the rest


def test_an_unknown_toolkit_is_a_value_error_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown toolkit 'swe_agent'") as error:
        GuardConfig(toolkits=["swe_agent"])
    for name in SHIPPED:
        assert name in str(error.value)
    with pytest.raises(ValueError, match="unknown toolkit 'nope'"):
        GuardConfig(toolkits=[{"name": "nope", "prefix": "fs_"}])
    with pytest.raises(ValueError, match=re.escape("a list of toolkit names")):
        GuardConfig(toolkits="swe-agent")


def test_flat_keywords_take_toolkits_on_every_constructor():
    pytest.importorskip("langchain")
    from langgraph_replay_guard import ReplayGuardCallbackHandler, ReplayGuardMiddleware

    guard = ReplayGuard(toolkits=["swe-agent"])
    middleware = ReplayGuardMiddleware(toolkits=["swe-agent"], max_repeats=2)
    handler = ReplayGuardCallbackHandler(toolkits=["swe-agent"])
    for config in (guard.config, middleware.guard.config, handler.config):
        assert config.toolkits == ("swe-agent",)
        assert config.policy_for("scroll_down").volatile
    with pytest.raises(ValidationError, match="unknown toolkit"):
        ReplayGuardMiddleware(toolkits=["swe"])


def test_round_trip_keeps_the_toolkit_names_not_the_expanded_tools(tmp_path: Path):
    config = GuardConfig(
        toolkits=["deepagents", ToolkitRef(name="mcp-reference", prefix="fs_")],
        tools={"task": "idempotent"},
    )
    data = json.loads(config.model_dump_json(exclude_defaults=True))
    assert data == {
        "tools": {"task": {"replay": "idempotent"}},
        "toolkits": ["deepagents", {"name": "mcp-reference", "prefix": "fs_"}],
    }
    again = GuardConfig.from_json(config.model_dump_json())
    assert again == config
    assert again.policy_for("fs_read_text_file").replay == "pure"
    assert again.policy_for("task").replay == "idempotent"
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "guard.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_defaults=True)))
    assert GuardConfig.from_file(path) == config


def test_a_prefix_maps_an_mcp_adapters_server_prefixed_names():
    config = GuardConfig(
        toolkits=[
            {"name": "mcp-reference", "prefix": "filesystem_"},
            {"name": "mcp-reference", "prefix": "git_"},
        ]
    )
    assert config.policy_for("filesystem_write_file").replay == "idempotent"
    assert config.policy_for("git_git_commit").replay == "unsafe"
    assert config.policy_for("write_file") == config.default_policy  # only prefixed names


def test_toolkits_that_agree_combine_and_toolkits_that_disagree_need_the_users_decision(
    monkeypatch: pytest.MonkeyPatch,
):
    # Deep Agents and the MCP filesystem server share read_file, write_file and edit_file,
    # with the same policies: no conflict.
    both = GuardConfig(toolkits=["deepagents", "mcp-reference"])
    assert both.policy_for("write_file").replay == "idempotent"
    import langgraph_replay_guard.policy.config as config_module

    shipped = config_module.toolkit_policies

    def disagreeing(name: str, prefix: str = "") -> dict:
        policies = shipped(name, prefix)
        if name == "langchain":
            policies["write_todos"] = {"replay": "unsafe"}
        return policies

    monkeypatch.setattr(config_module, "toolkit_policies", disagreeing)
    with pytest.raises(ValueError, match="'deepagents' and 'langchain' give tool 'write_todos'"):
        GuardConfig(toolkits=["deepagents", "langchain"])
    decided = GuardConfig(toolkits=["deepagents", "langchain"], tools={"write_todos": "pure"})
    assert decided.policy_for("write_todos").replay == "pure"


def test_a_toolkit_tool_missing_from_the_agent_does_not_warn():
    pytest.importorskip("langchain")
    from langgraph_replay_guard.policy.options import ToolNameCheck

    check = ToolNameCheck(
        GuardConfig(toolkits=["deepagents"], tools={"serch": "pure"}, strict_tool_names=False)
    )
    with pytest.warns(Warning, match="'serch'") as warned:
        check.check(["search", "read_file"], where="ToolNode 'tools'")
    assert len(warned) == 1  # the user's typo only, none of the toolkit's 16 tools


def _doc_tables() -> dict[str, list[tuple[str, str, str]]]:
    """The toolkit tables of docs/shells-and-presets.md: toolkit -> (tool, class, reason)."""
    tables: dict[str, list[tuple[str, str, str]]] = {}
    current = None
    text = (DOCS / "shells-and-presets.md").read_text(encoding="utf-8")
    for line in text.splitlines():
        heading = re.match(r"^### Toolkit `([\w-]+)`", line)
        if heading:
            current = heading.group(1)
            tables[current] = []
        elif line.startswith("#"):
            current = None  # the next section's tables are not toolkit tables
        elif current and line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            tables[current].append((cells[0].strip("`"), cells[1], cells[2]))
    return tables


def class_label(entry: dict) -> str:
    """How the docs table names a data file entry's class."""
    if "preset" in entry:
        return f"per call (`{entry['preset']}` preset)"
    if "classify" in entry:
        return f"per call (`classify` rules; otherwise {entry['replay']})"
    return entry["replay"] + (", volatile" if entry.get("volatile") else "")


def test_the_docs_tables_match_the_data_files():
    tables = _doc_tables()
    assert set(tables) == SHIPPED
    for name, rows in tables.items():
        expected = [
            (tool, class_label(entry), entry["reason"])
            for tool, entry in load_toolkit(name)["tools"].items()
        ]
        assert rows == expected, f"docs/shells-and-presets.md table of {name!r} drifted"
