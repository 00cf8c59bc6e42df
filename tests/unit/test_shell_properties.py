"""Property tests: a command the shell preset does not recognise is never classified pure."""

from __future__ import annotations

import re

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.decisions.engine import call_facts
from langgraph_replay_guard.policy.classify import load_preset
from tests.hypothesis_budget import examples

PROPERTY = settings(max_examples=examples(300), deadline=None)
CONFIG = GuardConfig(tools={"bash": {"preset": "shell"}})
RULES_ONLY = GuardConfig(
    tools={"run": {"classify": [{"arg": "command", "prefixes": ["cat", "ls"], "replay": "pure"}]}}
)

_DATA = load_preset("shell")
# Every word the preset gives a meaning to, as a command name.
_KNOWN = (
    {prefix.split()[0] for prefixes in _DATA["commands"].values() for prefix in prefixes}
    | {name.split()[0] for name in _DATA["wrappers"]}
    | set(_DATA["aliases"])
    | set(_DATA["shells"])
    | {"!", "{", "}", "if", "then", "elif", "else", "fi", "do", "done", "while", "until", "for"}
)
_VERSIONED = re.compile(r"(python|pip|pytest)\d+(\.\d+)*")

READS = [
    "cat src/calc.py",
    "ls -la",
    "git status",
    "grep -rn parse src",
    "head -20 README.md",
    "git diff",
    "wc -l *.py",
]
SEPARATORS = ["&&", "||", ";", "|", "\n", "&", " && ", " ; "]

unknown_names = st.from_regex(r"[a-z][a-z0-9_.-]{0,12}", fullmatch=True).filter(
    lambda name: name not in _KNOWN and not _VERSIONED.fullmatch(name)
)
any_args = st.text(max_size=40)
plain_words = st.from_regex(r"[A-Za-z0-9_./-]{1,12}", fullmatch=True)


def cls(command: str, config: GuardConfig = CONFIG, tool: str = "bash") -> tuple[str, bool]:
    facts = call_facts(config, tool, {"command": command})
    return facts.replay, facts.volatile


@PROPERTY
@given(unknown_names, any_args)
def test_an_unknown_command_is_never_pure(name, args):
    assert cls(f"{name} {args}") == ("unsafe", False)


@PROPERTY
@given(
    st.lists(st.sampled_from(READS), min_size=0, max_size=3),
    unknown_names,
    st.lists(plain_words, max_size=3),
    st.sampled_from(SEPARATORS),
    st.integers(min_value=0, max_value=3),
)
def test_a_chain_with_an_unknown_command_is_never_pure(reads, name, args, separator, position):
    unknown = " ".join([name, *args])
    parts = list(reads)
    parts.insert(min(position, len(parts)), unknown)
    assert cls(separator.join(parts)) == ("unsafe", False)


@PROPERTY
@given(
    st.sampled_from(READS),
    unknown_names,
    st.sampled_from(["$({})", "`{}`", '"$({})"', "<({})", "$(( $({}) ))"]),
)
def test_an_unknown_command_inside_a_substitution_is_never_pure(read, name, form):
    assert cls(f"{read} {form.format(name)}") == ("unsafe", False)


@PROPERTY
@given(
    st.sampled_from(READS),
    st.sampled_from([">", ">>", "&>", "1>", "2>", ">|", "&>>", " > ", "2>>"]),
    plain_words,
)
def test_a_read_redirected_into_a_file_is_never_pure(read, redirect, target):
    assume(not target.startswith("/dev/") and target != "-")
    assert cls(f"{read} {redirect}{target}") == ("unsafe", False)


@PROPERTY
@given(st.text(max_size=80))
def test_any_text_gets_a_valid_class_and_never_raises(text):
    replay, volatile = cls(text)
    assert replay in {"pure", "idempotent", "unsafe"}
    assert not volatile or replay == "pure"


@PROPERTY
@given(st.text(max_size=60), st.sampled_from([("'", "'"), ('"', '"'), ("`", "`"), ("$(", ")`")]))
def test_an_unterminated_quote_or_substitution_is_never_pure(text, opening):
    quote, closers = opening
    body = "".join(c for c in text if c not in closers)
    assert cls(f"cat a {quote}{body}") == ("unsafe", False)


@PROPERTY
@given(
    st.sampled_from(["cat a.py", "ls -la", "ls"]),
    st.sampled_from([";", "&&", "||", "|", ">", "<", "`", "$(", "\n", "&"]),
    st.text(max_size=20),
)
def test_a_prefix_rule_never_matches_a_value_with_shell_syntax(read, operator, tail):
    assert cls(f"{read} {operator}{tail}", RULES_ONLY, "run") == ("unsafe", False)
