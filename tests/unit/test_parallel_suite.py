"""Issue 34, items 14 and 16: `make test` runs in parallel with a slow group; CI sets CI=true."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

from tests import warm_children

REPO_ROOT = Path(__file__).resolve().parents[2]
PG_TEST = "tests/integration/test_export_cli.py::test_export_postgres_threads_and_evaluate_them"


def _pytest(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # A nested pytest in a real process forked from the warm zygote (tests/warm_children.py):
    # it collects the same files without importing LangGraph again.
    return warm_children.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "LANGSMITH_TRACING": "false", **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_make_test_runs_the_suite_in_parallel_and_prints_the_slowest():
    dry = subprocess.run(
        [shutil.which("make") or "make", "-n", "test"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert dry.returncode == 0, dry.stderr
    command = dry.stdout.replace("\\\n", " ")
    pytest_line = next(line for line in command.splitlines() if "-m pytest" in line)
    # Two workers more than the cores: the others fill the waits of the tests that wait on
    # servers, timeouts and children (docs/benchmarks.md, the fifth and eleventh passes).
    assert f"-n {len(os.sched_getaffinity(0)) + 2} " in pytest_line
    assert "--dist loadgroup" in pytest_line
    assert "--durations=15" in pytest_line
    assert " -m " not in pytest_line.split("-m pytest", 1)[1]  # the slow group runs too
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    dev = project["project"]["optional-dependencies"]["dev"]
    assert any(requirement.startswith("pytest-xdist") for requirement in dev)
    markers = project["tool"]["pytest"]["ini_options"]["markers"]
    assert any(marker.startswith("slow:") for marker in markers)


def test_the_slow_group_holds_the_process_and_postgres_tests():
    crash = "tests/integration/test_crash.py"
    slow = _pytest("--collect-only", "-q", "-m", "slow", crash, PG_TEST)
    assert slow.returncode == 0, slow.stdout + slow.stderr
    selected = [line for line in slow.stdout.splitlines() if "::" in line]
    assert PG_TEST in selected
    assert any(line.startswith(crash) for line in selected)
    # Nothing left for `-m "not slow"`: all of them are slow (pytest counts what -m left out).
    assert "deselected" not in slow.stdout, slow.stdout
    assert slow.stdout.rstrip().splitlines()[-1].startswith(f"{len(selected)} tests collected")


def _version(python: str) -> tuple[int, ...] | None:
    """`python --version` as numbers, or None if it does not run (a pyenv shim not selected)."""
    done = subprocess.run([python, "--version"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return None
    return tuple(int(part) for part in done.stdout.split()[1].split(".")[:3])


def test_ci_run_exports_ci_true(tmp_path):
    # `.ci/run` with stand-ins for `make` (which reports CI) and `initdb` (so nothing is
    # installed): every make step must see CI=true, which fails PostgreSQL tests whose server
    # did not start instead of skipping them.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    make = 'echo "make $1 CI=${CI:-unset} PYTHON=${PYTHON:-unset}"'
    for name, body in {"make": make, "initdb": "exit 0"}.items():
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    ran = subprocess.run(
        ["bash", str(REPO_ROOT / ".ci" / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    made = [line for line in ran.stdout.splitlines() if line.startswith("make ")]
    assert made[1:3] == ["make lint CI=true PYTHON=unset", "make typecheck CI=true PYTHON=unset"]
    assert made[0].startswith("make test CI=true PYTHON=")
    # The first run is on the oldest Python 3.11 the machine has, when it has one.
    oldest = made[0].split("PYTHON=", 1)[1]
    candidates = [
        Path("/usr/bin/python3.11"),
        *Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")).glob(
            "versions/3.11*/bin/python3.11"
        ),
    ]
    versions = {_version(str(c)) for c in candidates if c.exists()} - {None}
    if oldest == "unset":
        assert not versions, "a Python 3.11 is installed but .ci/run gave make none"
    else:
        mine = _version(oldest)
        assert mine is not None
        assert mine[:2] == (3, 11)
        assert all(mine <= other for other in versions), (oldest, versions)


def test_a_postgres_server_that_is_not_there_fails_under_ci_and_skips_otherwise():
    closed = {"REPLAY_GUARD_TEST_POSTGRES_URI": "postgresql://postgres@127.0.0.1:1/postgres"}
    skipped = _pytest("-q", PG_TEST, env={**closed, "CI": "false"})
    assert skipped.returncode == 0, skipped.stdout
    assert "1 skipped" in skipped.stdout
    failed = _pytest("-q", PG_TEST, env={**closed, "CI": "true"})
    assert failed.returncode == 1, failed.stdout
    assert "CI=true: Postgres tests must not be skipped" in failed.stdout


def test_ci_draws_every_property_example_and_make_test_a_quarter():
    # `make test` draws a quarter of each property test's examples; CI (`CI=true`, set by
    # .ci/run) draws the full count written in the test, and the full default profile.
    code = (
        "from hypothesis import settings\n"
        "import tests.conftest\n"
        "from tests.hypothesis_budget import examples\n"
        "print(examples(200), examples(20), settings.default.max_examples)\n"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "REPLAY_GUARD_TEST_FULL")}
    counts = {}
    for name, extra in {
        "ci": {"CI": "true"},
        "full": {"REPLAY_GUARD_TEST_FULL": "1"},
        "dev": {},
    }.items():
        done = warm_children.run(
            [sys.executable, "-c", code],
            cwd=REPO_ROOT,
            env={**base, **extra},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        counts[name] = done.stdout.split()
    assert counts["ci"] == counts["full"] == ["200", "20", "100"]
    assert counts["dev"] == ["50", "10", "25"]


def test_the_longest_work_is_handed_out_first() -> None:
    """`--dist loadgroup` orders xdist's work units by tests/durations.json (tests/schedule.py).

    xdist's own order (groups by size, then the rest in file order) ended the suite with the
    nested pytest runs of tests/unit/ while the other worker had nothing left. A unit's length
    is its tests' sum: a test the table names, else its file's typical test, else a default;
    the `@group` suffix is not part of the name looked up; ties keep xdist's order.
    """
    from tests import conftest, schedule

    table = {
        "tests": {"tests/a.py::long": 30.0, "tests/b.py::t[x@y]": 4.0},
        "files": {"tests/c.py": 1.0},
    }
    units = {
        "tests/a.py::short": {"tests/a.py::short": False},
        "group": {f"tests/c.py::t{i}@group": False for i in range(3)},
        "tests/b.py::t[x@y]": {"tests/b.py::t[x@y]": False},
        "tests/a.py::long": {"tests/a.py::long": False},
        "tests/d.py::other": {"tests/d.py::other": False},
    }
    order = [scope for scope, _ in schedule.longest_first(units, table)]
    assert order == [
        "tests/a.py::long",
        "tests/b.py::t[x@y]",
        "group",
        "tests/a.py::short",
        "tests/d.py::other",
    ]
    # The checked-in table names tests of this suite, and the hook uses it for loadgroup only.
    checked_in = schedule.load_table()
    assert checked_in["tests"], "tests/durations.json is empty"
    assert all((REPO_ROOT / node.split("::", 1)[0]).is_file() for node in checked_in["files"])

    class Config:  # what xdist's scheduler reads of pytest's: `-n 2 --dist <dist>`
        def __init__(self, dist: str) -> None:
            self.values = {"dist": dist, "tx": ["popen"] * 2, "numprocesses": 2}

        def getvalue(self, name: str) -> object:
            return self.values.get(name)

    assert conftest.pytest_xdist_make_scheduler(Config("load"), None) is None  # type: ignore[arg-type]
    made = conftest.pytest_xdist_make_scheduler(Config("loadgroup"), None)  # type: ignore[arg-type]
    assert isinstance(made, schedule.LongestFirst)
