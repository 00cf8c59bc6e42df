"""Per-call classification: configuration, rules, the callable, the editor preset, the engine."""

from __future__ import annotations

import json
import logging

import pytest
from pydantic import ValidationError

from langgraph_replay_guard import CallClass, ClassRule, GuardConfig, ReplayGuard, ToolPolicy
from langgraph_replay_guard.decisions.engine import call_facts

SHELL = {"preset": "shell"}


def facts(config, tool, args):
    f = call_facts(config, tool, args)
    return (f.replay, f.volatile)


# --- configuration ---------------------------------------------------------------------------


def test_classified_tool_defaults_to_unsafe_and_serializes_round_trip():
    config = GuardConfig.model_validate_json(
        json.dumps(
            {
                "tools": {
                    "bash": {
                        "preset": "shell",
                        "classify": [
                            {"arg": "command", "prefixes": ["make lint"], "replay": "idempotent"}
                        ],
                    },
                    "str_replace_editor": {"preset": "editor", "replay": "idempotent"},
                }
            }
        )
    )
    assert config.tools["bash"].replay == "unsafe"
    assert config.tools["str_replace_editor"].replay == "idempotent"
    again = GuardConfig.model_validate_json(config.model_dump_json())
    assert again == config
    assert again.tools["bash"].classify[0].prefixes == ("make lint",)


def test_volatile_rule_with_a_side_effect_is_a_command_acting_on_hidden_state():
    # `edit` in SWE-agent acts on the file open in the viewer: unsafe and volatile.
    rule = {"arg": "c", "pattern": "x", "replay": "unsafe", "volatile": True}
    config = GuardConfig(tools={"bash": {"classify": [rule]}})
    policy = config.policy_for("bash")
    assert policy.classifier_fn is not None
    assert policy.classifier_fn("bash", {"c": "x"})[0] == CallClass("unsafe", volatile=True)


@pytest.mark.parametrize(
    ("policy", "field", "fix"),
    [
        ({"preset": "bash"}, "preset", "'shell'"),
        ({"preset": "shell", "replay": "pure"}, "tools.bash", "'unsafe'"),
        ({"preset": "shell", "volatile": True}, "tools.bash", "classify rules"),
        ({"command_arg": "cmd"}, "tools.bash", "preset='shell'"),
        ({"classify": [{"arg": "command", "pattern": "(", "replay": "pure"}]}, "pattern", "Fix"),
        ({"classify": [{"arg": "command", "replay": "pure"}]}, "classify.0", "exactly one"),
        (
            {"classify": [{"arg": "c", "pattern": "^ls", "prefixes": ["ls"], "replay": "pure"}]},
            "classify.0",
            "exactly one",
        ),
        ({"classify": [{"arg": "command", "pattern": "^ls"}]}, "classify.0", "'replay'"),
        (
            {"classify": [{"arg": "command", "prefixes": [" "], "replay": "pure"}]},
            "prefixes",
            "empty",
        ),
        ({"classify": [{"arg": "command", "pattern": "x", "replay": "safe"}]}, "replay", "pure"),
    ],
)
def test_bad_classification_names_the_tool_the_field_and_the_fix(policy, field, fix):
    with pytest.raises(ValidationError) as caught:
        GuardConfig(tools={"bash": policy})
    text = str(caught.value)
    assert "tools.bash" in text
    assert field in text
    assert fix in text


def test_call_class_validates():
    assert CallClass("pure", volatile=True).rank == 1
    # A command that acts on state its arguments do not name (SWE-agent's edit of the open
    # file) is volatile too; it ranks as its replay class.
    assert CallClass("unsafe", volatile=True).rank == CallClass("unsafe").rank == 3
    assert CallClass("idempotent", volatile=True).rank == 2
    with pytest.raises(ValueError, match="'pure', 'idempotent' or 'unsafe'"):
        CallClass("read")  # type: ignore[arg-type]


def test_classifier_callable_is_not_serialized_and_survives_policy_files(tmp_path):
    def classify(args):
        return CallClass("pure") if args.get("query", "").startswith("SELECT") else None

    config = GuardConfig(tools={"sql": ToolPolicy(classifier=classify)})
    assert "classifier" not in config.model_dump()["tools"]["sql"]
    assert "classifier" not in config.model_dump_json()
    policy_file = tmp_path / "tools.json"
    policy_file.write_text(json.dumps({"tools": {"send_email": "unsafe"}}))
    merged = config.with_policies(policy_file)
    assert merged.tools["sql"].classifier is classify
    assert merged.tools["send_email"].replay == "unsafe"
    assert facts(merged, "sql", {"query": "SELECT 1"}) == ("pure", False)
    assert facts(merged, "sql", {"query": "DELETE FROM t"}) == ("unsafe", False)


def test_model_copy_rebuilds_the_compiled_classification():
    policy = ToolPolicy(preset="shell")
    config = GuardConfig(tools={"bash": policy})
    assert facts(config, "bash", {"command": "view"}) == ("unsafe", False)
    editor = GuardConfig(tools={"bash": policy.model_copy(update={"preset": "editor"})})
    assert facts(editor, "bash", {"command": "view"}) == ("pure", False)


# --- rules -----------------------------------------------------------------------------------


def test_rules_first_match_wins_then_callable_then_preset_then_fallback():
    seen = []

    def classify(args):
        seen.append(args["command"])
        return CallClass("pure", volatile=True) if args["command"] == "status" else None

    config = GuardConfig(
        tools={
            "bash": ToolPolicy(
                preset="shell",
                classify=(
                    ClassRule(arg="command", pattern=r"^make (lint|check)$", replay="idempotent"),
                    ClassRule(arg="command", prefixes=("make",), replay="pure"),
                ),
                classifier=classify,
            )
        }
    )
    assert facts(config, "bash", {"command": "make lint"}) == ("idempotent", False)
    assert facts(config, "bash", {"command": "make docs"}) == ("pure", False)
    assert seen == []
    assert facts(config, "bash", {"command": "status"}) == ("pure", True)
    assert facts(config, "bash", {"command": "cat a"}) == ("pure", False), "the preset"
    assert facts(config, "bash", {"command": "deploy"}) == ("unsafe", False), "fallback"


def test_prefix_rules_match_words_and_never_a_chain():
    config = GuardConfig(
        tools={
            "run": {
                "classify": [
                    {"arg": "command", "prefixes": ["cat", "git status"], "replay": "pure"}
                ]
            }
        }
    )
    assert facts(config, "run", {"command": "cat a.py"}) == ("pure", False)
    assert facts(config, "run", {"command": "  git status -s"}) == ("pure", False)
    for command in [
        "catalog",
        "git status-x",
        "cat a; rm b",
        "cat a && rm b",
        "cat a | sh",
        "cat a > b",
        "cat `rm b`",
        "cat $(rm b)",
        "cat a\nrm b",
    ]:
        assert facts(config, "run", {"command": command}) == ("unsafe", False), command


def test_with_the_shell_preset_prefix_rules_apply_to_each_command_of_a_chain():
    config = GuardConfig(
        tools={
            "bash": {
                "preset": "shell",
                "classify": [
                    {"arg": "command", "prefixes": ["make lint"], "replay": "pure"},
                    {"arg": "command", "prefixes": ["cd"], "replay": "pure"},
                ],
            }
        }
    )
    assert facts(config, "bash", {"command": "cd /repo && make lint | tail -5"}) == ("pure", False)
    assert facts(config, "bash", {"command": "make lint && make deploy"}) == ("unsafe", False)
    assert facts(config, "bash", {"command": "make lint > out.txt"}) == ("unsafe", False)


def test_rules_on_nested_arguments_and_non_strings():
    config = GuardConfig(
        tools={
            "api": {
                "replay": "idempotent",
                "classify": [
                    {"arg": "request.method", "pattern": "^(GET|HEAD)$", "volatile": True}
                ],
            }
        }
    )
    assert facts(config, "api", {"request": {"method": "GET"}}) == ("pure", True)
    assert facts(config, "api", {"request": {"method": "POST"}}) == ("idempotent", False)
    assert facts(config, "api", {"request": "GET"}) == ("idempotent", False)
    assert facts(config, "api", {"request": {"method": 1}}) == ("idempotent", False)
    assert facts(config, "api", ["GET"]) == ("idempotent", False)


def test_a_broken_classifier_is_unrecognised_and_logged_once(caplog):
    def broken(args):
        raise KeyError("command")

    def wrong_type(args):
        return "pure"

    config = GuardConfig(
        tools={
            "a": ToolPolicy(classifier=broken),
            "b": ToolPolicy(classifier=wrong_type, replay="idempotent"),
        }
    )
    with caplog.at_level(logging.WARNING, logger="langgraph_replay_guard"):
        assert facts(config, "a", {}) == ("unsafe", False)
        assert facts(config, "a", {}) == ("unsafe", False)
        assert facts(config, "b", {}) == ("idempotent", False)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "classifier of tool 'a' raised KeyError" in messages[0]
    assert "must return a CallClass or None" in messages[1]


# --- the editor preset -----------------------------------------------------------------------

EDITOR = GuardConfig(
    tools={
        name: {"preset": "editor"}
        for name in ["str_replace_editor", "open", "goto", "scroll_down", "edit", "find_file"]
    }
)


@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        ("str_replace_editor", {"command": "view", "path": "/repo/a.py"}, ("pure", False)),
        (
            "str_replace_editor",
            {"command": "view", "path": "/repo", "view_range": [1, 9]},
            ("pure", False),
        ),
        (
            "str_replace_editor",
            {"command": "create", "path": "/r/a", "file_text": "x"},
            ("unsafe", False),
        ),
        (
            "str_replace_editor",
            {"command": "str_replace", "path": "/r/a", "old_str": "a", "new_str": "b"},
            ("unsafe", False),
        ),
        (
            "str_replace_editor",
            {"command": "insert", "path": "/r/a", "insert_line": 3, "new_str": "b"},
            ("unsafe", False),
        ),
        ("str_replace_editor", {"command": "undo_edit", "path": "/r/a"}, ("unsafe", False)),
        ("str_replace_editor", {"command": "explode", "path": "/r/a"}, ("unsafe", False)),
        ("str_replace_editor", {"path": "/r/a"}, ("unsafe", False)),
        ("open", {"path": "src/a.py", "line_number": 10}, ("pure", True)),
        ("goto", {"line_number": 100}, ("pure", True)),
        ("scroll_down", {}, ("pure", True)),
        ("find_file", {"file_name": "a.py"}, ("pure", False)),
        ("edit", {"start": 1, "end": 2, "replacement": "x"}, ("unsafe", False)),
    ],
)
def test_editor_preset(tool, args, expected):
    assert facts(EDITOR, tool, args) == expected


# --- the engine follows the per-call class -----------------------------------------------------


def bash(command):
    return {"command": command}


def test_reads_dedup_until_a_write_and_tests_rerun_after_every_edit():
    ctl = ReplayGuard(GuardConfig(tools={"bash": SHELL})).control()

    def run(command, result="out"):
        skip, reason = ctl.should_skip("bash", bash(command))
        if skip:
            ctl.record_denied("bash", bash(command))
            return reason
        ctl.record_success("bash", bash(command), result=result)
        return "ran"

    assert run("cat src/calc.py", "v1") == "ran"
    assert run("cat src/calc.py") == "duplicate"
    assert run("  cat src/calc.py\n") == "duplicate", "surrounding whitespace is not a new call"
    for attempt in range(4):
        assert run("sed -i 's/a/b/' src/calc.py", "") == "ran", attempt
        assert run("python -m pytest -q", f"{attempt} failed") == "ran", attempt
        assert run("cat src/calc.py", f"v{attempt + 2}") == "ran", "a write came in between"


def test_repeated_test_runs_without_an_edit_are_a_loop():
    ctl = ReplayGuard(GuardConfig(tools={"bash": SHELL})).control()
    command = bash("python -m pytest -q")
    for _ in range(3):
        assert ctl.should_skip("bash", command) == (False, None)
        ctl.record_success("bash", command, result="1 failed in 0.31s")
    assert ctl.should_skip("bash", command) == (True, "repeat_limit")


def test_a_volatile_command_polls_until_its_result_changes_within_the_repeat_limit():
    # Issue 27 item 12: a poll is never short-circuited; the same answer 3 more times stops it.
    ctl = ReplayGuard(GuardConfig(tools={"bash": SHELL})).control()
    command = bash("curl -s http://localhost:8000/health")
    for _ in range(4):
        assert ctl.should_skip("bash", command) == (False, None)
        ctl.record_success("bash", command, result="starting")
    assert ctl.should_skip("bash", command) == (True, "repeat_limit")


def test_unrecognised_command_is_counted_not_deduplicated_and_not_short_circuited():
    ctl = ReplayGuard(GuardConfig(tools={"bash": SHELL})).control()
    command = bash("./deploy.sh --prod")
    for _ in range(3):
        assert ctl.should_skip("bash", command) == (False, None)
        ctl.record_success("bash", command, result="deployed")
    assert ctl.should_skip("bash", command) == (True, "repeat_limit")


def test_editor_view_is_reused_until_an_edit():
    ctl = ReplayGuard(EDITOR).control()
    view = {"command": "view", "path": "/repo/a.py"}
    edit = {"command": "str_replace", "path": "/repo/a.py", "old_str": "a", "new_str": "b"}
    ctl.record_success("str_replace_editor", view, result="1\ta = 1")
    assert ctl.should_skip("str_replace_editor", view) == (True, "duplicate")
    ctl.record_success("str_replace_editor", edit, result="The file has been edited.")
    assert ctl.should_skip("str_replace_editor", view) == (False, None)


def test_paging_with_scroll_down_is_progress_until_the_end_of_the_file():
    ctl = ReplayGuard(EDITOR).control()
    for page in range(6):
        assert ctl.should_skip("scroll_down", {}) == (False, None), page
        ctl.record_success("scroll_down", {}, result=f"[File: a.py] lines {page * 100}-")
    for _ in range(4):  # the same last page: the first answer and max_repeats more
        ctl.record_success("scroll_down", {}, result="[File: a.py] end")
    assert ctl.should_skip("scroll_down", {}) == (True, "repeat_limit")


def test_a_missing_rule_matches_a_call_without_the_argument():
    policy = ToolPolicy(
        replay="pure", classify=[ClassRule(arg="file", missing=True, volatile=True)]
    )
    classify = policy.classifier_fn
    assert classify is not None
    assert classify("search_file", {"search_term": "x"})[0] == CallClass("pure", volatile=True)
    assert classify("search_file", {"search_term": "x", "file": None})[0].volatile
    assert classify("search_file", {"search_term": "x", "file": "a.py"})[0] == CallClass("pure")


def test_a_rule_needs_exactly_one_way_to_match():
    with pytest.raises(ValidationError, match="exactly one of 'pattern'"):
        ClassRule(arg="file", missing=True, pattern="x", volatile=True)
    with pytest.raises(ValidationError, match="exactly one of 'pattern'"):
        ClassRule(arg="file", volatile=True)


def test_pure_with_rules_only_when_they_only_mark_reads_volatile():
    rule = ClassRule(arg="file", missing=True, volatile=True)
    assert ToolPolicy(replay="pure", classify=[rule]).replay == "pure"
    writes = ClassRule(arg="command", prefixes=("rm",), replay="unsafe")
    with pytest.raises(ValidationError, match="replay='pure' with per-call"):
        ToolPolicy(replay="pure", classify=[rule, writes])
