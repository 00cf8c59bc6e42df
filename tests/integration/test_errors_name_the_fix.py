"""Issue 34 item 10: each mistake gets one line naming the problem and the fix, through the
real entry point (a `replay-guard` subprocess, the package's import, `guard.wrap`)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.tools import tool
from langgraph.graph import MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from langgraph_replay_guard import ReplayGuard
from tests import warm_children

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "langgraph_replay_guard" / "data" / "tau_sample.jsonl"
ENV = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(REPO_ROOT)}


def run(
    *args: str | Path, blocked: str | None = None, cwd: Path = REPO_ROOT
) -> subprocess.CompletedProcess[str]:
    """`replay-guard ARGS`; `blocked`: a module made unimportable, as if its extra were missing.

    The block is a `sitecustomize` (run by the interpreter before the command) that sets
    `sys.modules[blocked] = None`: `import blocked` then raises `ModuleNotFoundError`.
    """
    env = dict(ENV)
    if blocked is not None:
        assert cwd != REPO_ROOT, "give a tmp_path as cwd: the block is written there"
        site = cwd / "blocked-site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(
            f"import sys\nsys.modules[{blocked!r}] = None\n", encoding="utf-8"
        )
        env["PYTHONPATH"] = f"{site}{os.pathsep}{REPO_ROOT}"
    # Without a block, a real process forked from the warm zygote (tests/warm_children.py);
    # a block's sitecustomize runs at interpreter start-up, so that child starts cold.
    start = subprocess.run if blocked is not None else warm_children.run
    return start(
        [sys.executable, "-m", "langgraph_replay_guard.cli.main", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    return lines[0]


# -- guard.wrap on something that is not a ToolNode ------------------------------------------


def search(query: str) -> str:
    """Search the web."""
    return query


def test_wrap_of_a_function_names_tool_node() -> None:
    guard = ReplayGuard()
    with pytest.raises(TypeError) as caught:
        guard.wrap(search)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "guard.wrap() takes a langgraph.prebuilt.ToolNode, got function 'search'" in message
    assert "guard.tool_node([...])" in message
    assert "\n" not in message
    with pytest.raises(TypeError, match=r"got StructuredTool 'search'.*guard\.tool_node"):
        guard.wrap(tool(search))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"got list: for a list of tools, call guard\.tool_node"):
        guard.wrap([search])  # type: ignore[arg-type]
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([search]))
    builder.set_entry_point("tools")
    with pytest.raises(TypeError, match=r"got CompiledStateGraph.*ReplayGuardMiddleware"):
        guard.wrap(builder.compile())  # type: ignore[arg-type]
    assert isinstance(guard.wrap(ToolNode([search])), ToolNode)  # the right call still works


# -- the middleware without the langchain extra ----------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "from langgraph_replay_guard import ReplayGuardMiddleware",
        "from langgraph_replay_guard import ReplayGuard; ReplayGuard().middleware()",
    ],
)
def test_the_middleware_without_the_langchain_extra_names_the_extra(
    tmp_path: Path, code: str
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\nsys.modules['langchain'] = None\n", encoding="utf-8"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**ENV, "PYTHONPATH": f"{site}{os.pathsep}{REPO_ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: ReplayGuardMiddleware needs the langchain")
    assert "pip install 'langgraph-replay-guard[langchain]'" in last
    # The rest of the package works without it.
    plain = subprocess.run(
        [sys.executable, "-c", "from langgraph_replay_guard import ReplayGuard; ReplayGuard()"],
        env={**ENV, "PYTHONPATH": f"{site}{os.pathsep}{REPO_ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert plain.returncode == 0, plain.stderr


# -- crashtest without [sqlite] ----------------------------------------------------------------


def test_crashtest_without_the_sqlite_extra_names_the_extra(tmp_path: Path) -> None:
    done = run(
        "crashtest",
        REPO_ROOT / "examples" / "crashtest_agent.py:build_graph",
        "--timeout",
        "30",
        blocked="langgraph.checkpoint.sqlite",
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_line_error(done)
    assert line.startswith("replay-guard crashtest: error: ")
    assert "pip install 'langgraph-replay-guard[sqlite]'" in line
    assert "server died" not in line


# -- inspect and export: a missing --store, a database that is not a checkpoint database -----


def _checkpoint_db(path: Path) -> Path:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    SqliteSaver(conn).setup()
    conn.close()
    return path


def _other_db(path: Path) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
    return path


def test_inspect_with_a_missing_store_file_names_store(tmp_path: Path) -> None:
    db = _checkpoint_db(tmp_path / "checkpoints.db")
    done = run("inspect", "--db", db, "--store", tmp_path / "missing.db", "--thread", "t")
    assert done.returncode == 2
    line = one_line_error(done)
    assert "no SQLite database at" in line
    assert "missing.db" in line
    assert "give --store " in line
    assert "--db" not in line


@pytest.mark.parametrize("command", ["inspect", "export"])
def test_a_sqlite_database_that_is_not_a_checkpoint_database_is_refused(
    tmp_path: Path, command: str
) -> None:
    other = _other_db(tmp_path / "shop.db")
    output = tmp_path / "out.jsonl"
    args = ["--thread", "t"] if command == "inspect" else ["-o", output]
    done = run(command, "--db", other, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_line_error(done)
    assert f"replay-guard {command}: " in line
    assert "is not a LangGraph checkpoint database (it has no 'checkpoints' table)" in line
    assert "give --db the database your graph's checkpointer" in line
    assert not output.exists()  # no empty output file left behind
    assert done.stdout == ""


@pytest.mark.postgres
@pytest.mark.parametrize("command", ["inspect", "export"])
def test_a_postgres_database_that_is_not_a_checkpoint_database_is_refused(
    tmp_path: Path, pg_uri: str, command: str
) -> None:
    import psycopg

    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
    output = tmp_path / "out.jsonl"
    args = ["--thread", "t"] if command == "inspect" else ["-o", output]
    done = run(command, "--db", pg_uri, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_line_error(done)
    assert "is not a LangGraph checkpoint database" in line
    assert not output.exists()


def test_export_of_a_checkpoint_database_still_writes_its_file(tmp_path: Path) -> None:
    db = _checkpoint_db(tmp_path / "checkpoints.db")
    output = tmp_path / "out.jsonl"
    done = run("export", "--db", db, "-o", output)
    assert done.returncode == 1, done.stderr  # no thread yet: nothing written, not an error
    assert "0 trajectories" in done.stderr


# -- eval: an empty file, a bad line, --calibrate ---------------------------------------------


def _good_lines(count: int) -> list[str]:
    return SAMPLE.read_text(encoding="utf-8").splitlines()[:count]


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_eval_of_an_empty_file_is_refused_like_a_file_of_one_bad_line(
    tmp_path: Path, content: str
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text(content, encoding="utf-8")
    done = run("eval", empty)
    assert done.returncode == 2
    line = one_line_error(done)
    assert line == (
        f"replay-guard eval: {empty} holds no trajectory (it is empty): expected one JSON "
        "trajectory per line, see --help"
    )
    assert done.stdout == ""  # no all-zero report
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"\n', encoding="utf-8")
    assert run("eval", bad).returncode == 2


def test_eval_says_a_bad_line_at_once_without_a_doubled_word(tmp_path: Path) -> None:
    good = _good_lines(3)
    mixed = tmp_path / "mixed.jsonl"
    # An unterminated string: json says "Unterminated string starting at", then the column.
    mixed.write_text(
        "\n".join([good[0], '{"id": "x", "calls": [], "model": "gpt', *good[1:]]) + "\n",
        encoding="utf-8",
    )
    done = run("eval", mixed, "--json")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == (
        f"replay-guard eval: skipped {mixed} line 2: not JSON (Invalid control character at "
        "column 39)"
    )
    assert "at at" not in done.stderr
    report = json.loads(done.stdout)  # stdout stays the JSON report alone
    assert report["total"]["trajectories"] == 3


def test_calibrate_into_a_path_it_cannot_write_fails_before_the_search(tmp_path: Path) -> None:
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(_good_lines(5)) + "\n", encoding="utf-8")
    for out, problem in [
        (tmp_path / "no" / "such" / "dir" / "out.json", "no directory"),
        (tmp_path, "is a directory"),
    ]:
        done = run("eval", runs, "--calibrate", out)
        assert done.returncode == 2
        line = one_line_error(done)  # no "calibrate: ..." progress: the search never started
        assert line.startswith(f"replay-guard eval: --calibrate {out}: {problem}")
        assert done.stdout == ""


def test_calibrate_on_an_empty_file_writes_no_config(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    out = tmp_path / "out.json"
    done = run("eval", empty, "--calibrate", out)
    assert done.returncode == 2
    assert "holds no trajectory (it is empty)" in one_line_error(done)
    assert not out.exists()
