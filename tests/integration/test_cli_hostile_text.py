"""What is left of issue 33's CLI promises: a whole record is bounded, a hostile value stays
on its line, JSON output escapes what a terminal obeys. SQLite and PostgreSQL, real
subprocesses; the hostile values are written into the databases here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel

from .test_cli_hostile_databases import _cli, _peak_kb
from .test_records_cli import db, open_store, record_runs
from .test_untrusted_databases import _hostile_checkpoint, database

__all__ = ["database", "db"]  # the fixtures, parametrized over SQLite and PostgreSQL

KB = 1024
MB = 1024 * KB
BODIES = ("replay_guard", "records__bodies")

# A hostile value that tries to add a line of its own: each separator a terminal, a pager
# or `str.splitlines` breaks on, followed by text that would read as a line of the report.
BREAKS = ["\n", "\r\n", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1e"]
FAKE = "FAKE-LINE resolved"


def _hostile(base: str) -> str:
    return base + "".join(f"{sep}{FAKE}" for sep in BREAKS)


def _no_fake_line(text: str, *, shown: bool = True) -> None:
    for line in text.splitlines():  # splits on every separator above
        assert not line.startswith(FAKE), (line, text[-3000:])
    assert FAKE in text or not shown, "the hostile value was shown (escaped)"


# --- (3) a whole record is bounded, not only each of its items --------------------------


def _add_chunks(kind: str, target: str, execution_id: str, count: int, size: int) -> None:
    """Body chunks each below --max-item-bytes, many of them (the body's keys go on)."""
    with open_store(kind, target) as store:
        have = [i.key for i in store.search(BODIES, limit=1000)]
        first = sum(1 for key in have if key.startswith(f"{execution_id}/"))
        for n in range(first, first + count):
            store.put(BODIES, f"{execution_id}/{n}", {"text": "x" * size}, index=False)


def test_records_show_does_not_load_a_record_above_the_record_limit(
    db: tuple[str, str],
) -> None:
    kind, target = db
    good, _, other = record_runs(kind, target)
    small_kb, _ = _peak_kb("records", "show", good, "--db", target)
    # 12 chunks of 2 MB: each below --max-item-bytes, 24 MB together.
    _add_chunks(kind, target, good, 12, 2 * MB)
    limits = ("--max-record-bytes", "8M")
    big_kb, result = _peak_kb("records", "show", good, "--db", target, *limits)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 2, result.stderr
    assert f"record '{good}': its header and " in result.stderr
    assert "above --max-record-bytes 8.0 MB: not read (raise --max-record-bytes" in result.stderr
    assert big_kb - small_kb < 4 * KB, (small_kb, big_kb)
    for args in (["verify"], ["verify", good], ["replay", good]):
        refused = _cli("records", *args, "--db", target, *limits)
        assert refused.returncode == 2, (args, refused.stderr)
        assert "--max-record-bytes" in refused.stderr
    # Another record is read as before; list reads headers only.
    assert _cli("records", "show", other, "--db", target, *limits).returncode == 0
    assert _cli("records", "list", "--db", target).returncode == 0
    # Raised, the record is read (the reader reads the chunks its header names).
    raised = _cli("records", "verify", good, "--db", target, "--max-record-bytes", "64M")
    assert "Traceback" not in raised.stderr, raised.stderr[-3000:]
    assert raised.returncode == 0, raised.stderr


def test_the_default_record_limit_is_documented_and_refuses_more(db: tuple[str, str]) -> None:
    """64 MB by default (the help says so); 17 chunks of 4 MB, each a legitimate item, are more."""
    kind, target = db
    helped = _cli("records", "show", "--help")
    assert "--max-record-bytes" in helped.stdout
    assert "64.0 MB" in " ".join(helped.stdout.split())
    good, _, _ = record_runs(kind, target)
    _add_chunks(kind, target, good, 17, 4 * MB)
    small_kb, _ = _peak_kb("records", "list", "--db", target)
    big_kb, result = _peak_kb("records", "show", good, "--db", target)
    assert result.returncode == 2, result.stderr
    assert "above --max-record-bytes 64.0 MB: not read" in result.stderr
    assert big_kb - small_kb < 8 * KB, (small_kb, big_kb)


# --- (4) a hostile value stays on its line in text output --------------------------------


def test_inspect_text_keeps_a_hostile_value_on_its_line(
    database: tuple[str, Any, Any, Any],
) -> None:
    from langgraph_replay_guard.integrations.callbacks.scopes import scopes_namespace
    from langgraph_replay_guard.replay.ledger import store_label

    uri, saver, store, sql = database
    _hostile_checkpoint(saver, sql, "t", "plain")
    where = (*scopes_namespace(("replay_guard",)), "unknown", store_label("t"))
    mark = {"k": "k1", "n": _hostile("send"), "a": _hostile("to="), "e": _hostile("boom")}
    store.put(where, "k1", mark)
    result = _cli("inspect", "--db", uri, "--thread", "t")
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    _no_fake_line(result.stdout)
    assert f"send\\n{FAKE}\\r\\n{FAKE}\\u2028{FAKE}" in result.stdout, result.stdout


def test_records_text_keeps_a_hostile_value_on_its_line(
    db: tuple[str, str], tmp_path: Path
) -> None:
    kind, target = db
    good, _, _ = record_runs(kind, target)
    data = json.loads(_cli("records", "show", good, "--db", target, "--json").stdout)
    data.pop("problems", None)
    data["events"][0]["tool"] = _hostile("lookup")
    data["events"][0]["kind"] = _hostile("tool")
    data["header"]["createdUtcIso"] = _hostile("2026")
    path = tmp_path / "hostile-record.json"
    path.write_text(json.dumps(data))
    for action in ("show", "verify"):
        result = _cli("records", action, "--file", str(path))
        assert "Traceback" not in result.stderr, result.stderr[-3000:]
        _no_fake_line(result.stdout + result.stderr, shown=action == "show")


# --- (5) JSON output escapes C1 controls and bidi overrides ------------------------------

JSON_UNSAFE = ["\u202e", "\u2066", "\u200f", "\x85", "\x9b", "\x7f", "\u2028", "\ufeff"]


def _recorded_run(kind: str, target: str, text: str) -> str:
    """A recorded agent run whose tool returned `text` (the record's body holds it)."""

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        return text

    with open_store(kind, target) as store:
        guard = ReplayGuard(GuardConfig(), store=store, record=True)
        model = ScriptedChatModel(script=[[("lookup", {"q": "x"})], "done"])
        agent = guard.record(create_agent(model, [lookup], middleware=[guard.middleware()]))
        agent.invoke({"messages": [HumanMessage("look it up")]})
        return str(agent.last_execution_id)


def test_records_json_escapes_c1_and_bidi_controls(db: tuple[str, str]) -> None:
    kind, target = db
    text = "invoice" + "".join(JSON_UNSAFE) + "txt.exe"
    execution_id = _recorded_run(kind, target, text)
    for args in (["show", execution_id], ["replay", execution_id], ["list"]):
        result = _cli("records", *args, "--db", target, "--json")
        assert result.returncode == 0, (args, result.stderr)
        for char in JSON_UNSAFE:
            assert char not in result.stdout, (args, repr(char))
        json.loads(result.stdout)  # still JSON
    shown = _cli("records", "show", execution_id, "--db", target, "--json").stdout
    assert "\\u202e" in shown
    assert text in json.dumps(json.loads(shown), ensure_ascii=False), "the same strings"


@pytest.mark.parametrize("char", JSON_UNSAFE, ids=repr)
def test_json_safe_writes_the_same_json(char: str) -> None:
    from langgraph_replay_guard.cli.terminal import json_safe

    value = {f"k{char}": [f"a{char}b", "plain é"]}
    text = json_safe(json.dumps(value, ensure_ascii=False))
    assert char not in text
    assert "é" in text, "other text stays readable"
    assert json.loads(text) == value


# --- attack: a name a hostile extension gives, in the "not decoded" lines --------------------


def test_a_hostile_name_in_a_not_decoded_line_stays_on_its_line(
    database: tuple[str, Any, Any, Any],
) -> None:
    """The module name of a refused extension was printed as it is: inspect's and export's
    "not decoded, shown opaque" line on standard error broke into a fake line, and export's
    obeyed the escape sequences (it is not the text output `terminal_safe` wrapped)."""
    from .test_untrusted_databases import EXT_SINGLE_ARG, _ext

    uri, saver, _store, sql = database
    name = f"os\x1b]0;PWNED\x07\u202e\n{FAKE}\u2028{FAKE}"
    _hostile_checkpoint(saver, sql, "t", _ext(EXT_SINGLE_ARG, name, "system", "true"))
    for command in (["inspect", "--thread", "t"], ["export", "--thread", "t"]):
        result = _cli(command[0], "--db", uri, *command[1:])
        assert "Traceback" not in result.stderr, result.stderr[-3000:]
        assert result.returncode == 3, (command, result.stderr)
        assert "not decoded, shown opaque" in result.stderr
        _no_fake_line(result.stderr)
        for char in ("\x1b", "\x07", "\u202e"):
            assert char not in result.stderr, (command, repr(char))


def test_a_record_file_above_the_record_limit_is_not_read(
    db: tuple[str, str], tmp_path: Path
) -> None:
    """`--file` read a record file whole, whatever its size (an IntentusNet records/ folder
    someone else wrote): it is bounded by --max-record-bytes like a record in a database."""
    kind, target = db
    good, _, _ = record_runs(kind, target)
    data = json.loads(_cli("records", "show", good, "--db", target, "--json").stdout)
    data.pop("problems", None)
    path = tmp_path / f"{good}.json"
    path.write_text(json.dumps(data) + " " * (3 * MB))  # 3 MB of trailing blanks: still JSON
    assert _cli("records", "show", "--file", str(path)).returncode == 0
    refused = _cli("records", "show", "--file", str(path), "--max-record-bytes", "2M")
    assert "Traceback" not in refused.stderr, refused.stderr[-3000:]
    assert refused.returncode == 2, refused.stderr
    assert "above the limit of 2097152 bytes (--max-record-bytes): not read" in refused.stderr
    verified = _cli("records", "verify", "--file", str(path), "--max-record-bytes", "2M")
    assert verified.returncode == 1, verified.stderr
    assert "--max-record-bytes" in verified.stdout
