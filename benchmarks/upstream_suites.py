"""Run langchain's and langgraph-prebuilt's own unit tests with every agent guarded; diff them."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = Path(__file__).resolve().parent / "upstream_plugin.py"
PACKAGE = "langgraph_replay_guard"
BAD = frozenset({"failed", "error"})
# The suites' test dependencies (their pyproject `test` groups, what their conftests import).
# langchain-tests brings vcrpy, pytest-recording (the conftest's hook) and pytest-benchmark;
# langchain-openai is imported at the top of middleware/implementations/test_model_fallback.py.
TEST_REQUIREMENTS = (
    "pytest-asyncio>=1.3.0,<2",
    "pytest-mock",
    "pytest-socket",
    "syrupy>=5,<6",
    "langchain-tests>=1.1.9,<2",
    "langchain-openai",
)
ENV = {
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGGRAPH_TEST_FAST": "1",  # in-memory checkpointers and stores only (no PostgreSQL)
    "PYTHONDONTWRITEBYTECODE": "1",
}


@dataclass(frozen=True)
class Suite:
    name: str
    dist: str  # the PyPI name
    tests: str  # the tests to run, inside the sdist
    modes: tuple[str, ...]


SUITES = (
    Suite("langchain", "langchain", "tests/unit_tests/agents", ("agent-last", "agent-first")),
    Suite(
        "langgraph-prebuilt",
        "langgraph-prebuilt",
        "tests",
        ("react-agent", "tool-node", "tool-node-bare"),
    ),
)
MODES = tuple(mode for suite in SUITES for mode in suite.modes)


@dataclass
class Run:
    suite: str
    mode: str
    seconds: float
    exit_code: int
    log: str
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def tests(self) -> dict[str, dict[str, Any]]:
        return self.results.get("tests", {})


def sh(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, text=True, capture_output=True, check=False, **kwargs)
    if done.returncode:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done


# -- the sdists ------------------------------------------------------------------------------


def installed_version(python: str, dist: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    return sh([python, "-c", code]).stdout.strip()


def fetch_sdist(python: str, dist: str, version: str, cache: Path) -> Path:
    """The extracted sdist of `dist==version`, downloaded and extracted once."""
    stem = f"{dist.replace('-', '_')}-{version}"
    tarballs = cache / "sdists"
    found = [p for p in tarballs.glob("*.tar.gz") if p.name.lower() == f"{stem}.tar.gz".lower()]
    if not found:
        print(f"downloading the {dist} {version} sdist", flush=True)
        pip = [python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        sh([*pip, f"{dist}=={version}", "-d", str(tarballs)])
        return fetch_sdist(python, dist, version, cache)
    return extract(found[0], cache / "src")


def extract(tarball: Path, into: Path) -> Path:
    with tarfile.open(tarball) as archive:
        top = archive.getnames()[0].split("/")[0]
        target = into / top
        if not (target / ".extracted").exists():
            shutil.rmtree(target, ignore_errors=True)
            _extract_all(archive, into, tarball.name)
            (target / ".extracted").touch()
    return target


def _extract_all(archive: tarfile.TarFile, into: Path, name: str) -> None:
    """Extract an sdist with the "data" filter; Python 3.11 before 3.11.4 has none: refuse
    what it would refuse first (a link, a path outside the archive)."""
    if hasattr(tarfile, "data_filter"):
        archive.extractall(into, filter="data")
        return
    for member in archive.getmembers():
        path = Path(member.name)
        if path.is_absolute() or ".." in path.parts or not (member.isfile() or member.isdir()):
            msg = f"{name}: {member.name!r} is a link or lies outside the archive"
            raise RuntimeError(msg)
    archive.extractall(into)


# -- the test venv: the project's packages, plus the suites' test dependencies ---------------


def project_freeze(python: str) -> dict[str, str]:
    """Name -> version of every package of the project's venv (not editable installs)."""
    lines = sh([python, "-m", "pip", "freeze", "--exclude-editable"]).stdout.splitlines()
    pins = (line.split("==", 1) for line in lines if "==" in line and not line.startswith("#"))
    return {name.lower().replace("_", "-"): version for name, version in pins}


def site_packages(python: str) -> str:
    return sh([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout


def make_test_venv(python: str, cache: Path) -> str:
    """A venv that sees the project's venv (a .pth) and adds only the missing test packages.

    The project's venv is never changed. Its packages are pinned as constraints, so pip
    either installs the test packages without changing any of them or fails.
    """
    venv = cache / "venv"
    freeze = project_freeze(python)
    constraints = "".join(f"{name}=={version}\n" for name, version in sorted(freeze.items()))
    stamp = hashlib.sha256((constraints + repr(TEST_REQUIREMENTS)).encode()).hexdigest()
    vpython = str(venv / "bin" / "python")
    if (venv / ".stamp").exists() and (venv / ".stamp").read_text() == stamp:
        return vpython
    print("setting up the test venv (the project's venv + the suites' test packages)", flush=True)
    shutil.rmtree(venv, ignore_errors=True)
    sh([python, "-m", "venv", str(venv)])
    own = Path(site_packages(vpython).strip())
    project = site_packages(python).strip()
    (own / "_project_venv.pth").write_text(f"import site; site.addsitedir({project!r})\n")
    (venv / "constraints.txt").write_text(constraints)
    pip = [vpython, "-m", "pip", "install", "-q", "-c", str(venv / "constraints.txt")]
    sh([*pip, *TEST_REQUIREMENTS])
    check_versions(vpython, freeze)
    (venv / ".stamp").write_text(stamp)
    return vpython


def check_versions(vpython: str, expected: dict[str, str]) -> None:
    seen = project_freeze(vpython)
    changed = {name: (v, seen.get(name)) for name, v in expected.items() if seen.get(name) != v}
    if changed:
        raise SystemExit(f"the test venv changed the project's package versions: {changed}")


# -- running a suite ---------------------------------------------------------------------------


def pytest_env(mode: str, results: Path, opts: argparse.Namespace) -> dict[str, str]:
    plugin_dir = opts.cache / "plugin"
    plugin_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(PLUGIN, plugin_dir / PLUGIN.name)  # the plugin alone on PYTHONPATH
    # The guard package's snapshot (or --guard-src), ahead of the editable install.
    path = [str(plugin_dir), str(opts.guard_src)]
    env = {**os.environ, **ENV, "PYTHONPATH": os.pathsep.join(path)}
    return env | {"REPLAY_GUARD_MODE": mode, "REPLAY_GUARD_RESULTS": str(results)}


def pytest_command(vpython: str, suite: Suite, k: str | None) -> list[str]:
    # -P: the installed packages are under test, not the sdist's own source (the cwd).
    args = [vpython, "-P", "-m", "pytest", suite.tests, "-p", PLUGIN.stem, "-p", "no:cacheprovider"]
    return [*args, "--disable-socket", "--allow-unix-socket", *(["-k", k] if k else [])]


def run_suite(vpython: str, src: Path, suite: Suite, mode: str, opts: argparse.Namespace) -> Run:
    logs = opts.cache / ("logs" if opts.snapshot else "logs-guard-src")
    logs.mkdir(parents=True, exist_ok=True)
    log, results = logs / f"{suite.name}-{mode}.log", logs / f"{suite.name}-{mode}.json"
    results.unlink(missing_ok=True)
    env = pytest_env(mode, results, opts)
    print(f"running {suite.name} [{mode}] (log: {log})", flush=True)
    started = time.monotonic()
    with log.open("w") as out:
        command = pytest_command(vpython, suite, opts.k)
        done = subprocess.run(command, cwd=src, env=env, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - started
    if not results.exists():
        raise SystemExit(f"pytest wrote no results (exit {done.returncode}); see {log}")
    data = json.loads(results.read_text())
    check_imports(data, src)
    return Run(suite.name, mode, seconds, done.returncode, str(log), data)


def snapshot_guard(cache: Path) -> Path:
    """A copy of the working tree's package, so that every run tests the same code."""
    target = cache / "guard"
    shutil.rmtree(target, ignore_errors=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / PACKAGE, target / PACKAGE, ignore=ignore)
    return target


def content_hash(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def guard_revision(guard_src: Path, snapshot: bool) -> str:
    """Where the guard package comes from: the commit and what the working tree changes."""
    tree = f"content {content_hash(guard_src / PACKAGE)}"
    if not snapshot:
        return f"{guard_src} (--guard-src), {tree}"
    head = sh(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]).stdout.strip()
    status = ["git", "-C", str(ROOT), "status", "--porcelain", "--", PACKAGE]
    changed = [line[3:] for line in sh(status).stdout.splitlines() if line.strip()]
    dirty = f" + uncommitted changes to {', '.join(changed)}" if changed else ""
    return f"{head}{dirty} (working tree copied to {guard_src}), {tree}"


def check_imports(data: dict[str, Any], src: Path) -> None:
    for module, path in data["modules"].items():
        if Path(path).resolve().is_relative_to(src.resolve()):
            print(f"WARNING: {module} was imported from the sdist ({path})", file=sys.stderr)


# -- comparing -------------------------------------------------------------------------------


def counts(run: Run) -> dict[str, int]:
    tally: dict[str, int] = {}
    for entry in run.tests.values():
        tally[entry["outcome"]] = tally.get(entry["outcome"], 0) + 1
    return tally


# What varies between two failures of one cause: ids, addresses, numbers in generated names.
VARYING = (
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"\b0x[0-9a-f]+\b"), "0x..."),
    (re.compile(r"\b(run|lc_run)--[0-9a-z-]+"), r"\1--..."),
)


def cause(message: str) -> str:
    """The first error line, with what varies from one test to the next made the same."""
    for pattern, replacement in VARYING:
        message = pattern.sub(replacement, message)
    return message


def group_by_cause(failing: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The failing tests grouped by their first error line, the largest group first."""
    groups: dict[str, list[str]] = {}
    for test in failing:
        groups.setdefault(cause(test["message"]), []).append(test["id"])
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    return [{"cause": message, "count": len(tests), "tests": tests} for message, tests in ordered]


def compare(baseline: Run, guarded: Run) -> dict[str, Any]:
    base, mode = baseline.tests, guarded.tests
    newly_failing = [
        {"id": test, "message": entry["message"]}
        for test, entry in sorted(mode.items())
        if entry["outcome"] in BAD and base.get(test, {}).get("outcome") == "passed"
    ]
    newly_passing = [
        test
        for test, entry in sorted(mode.items())
        if entry["outcome"] == "passed" and base.get(test, {}).get("outcome") in BAD
    ]
    return {
        "suite": guarded.suite,
        "seconds": round(guarded.seconds, 1),
        "pytest_exit_code": guarded.exit_code,
        "outcomes": counts(guarded),
        "run": sum(1 for e in mode.values() if e["outcome"] != "skipped"),
        "failing_in_baseline": sum(1 for e in base.values() if e["outcome"] in BAD),
        "failing": sum(1 for e in mode.values() if e["outcome"] in BAD),
        "newly_failing": newly_failing,
        "newly_failing_by_cause": group_by_cause(newly_failing),
        "newly_passing": newly_passing,
        "missing": sorted(set(base) - set(mode)),
        "tests_with_guard": sum(1 for e in mode.values() if e.get("guarded")),
        "guard_applied": guarded.results.get("guard_applied", 0),
        "channel_added": guarded.results.get("channel_added", 0),
        "patched_modules": guarded.results.get("patched", {}),
        "notes": guarded.results.get("notes", []),
        "self_check": guarded.results.get("self_check"),
        "log": guarded.log,
    }


def baseline_summary(run: Run, version: str) -> dict[str, Any]:
    failing = sorted(test for test, e in run.tests.items() if e["outcome"] in BAD)
    return {
        "version": version,
        "seconds": round(run.seconds, 1),
        "pytest_exit_code": run.exit_code,
        "outcomes": counts(run),
        "modules": run.results.get("modules", {}),
        "failing": [{"id": test, "message": run.tests[test]["message"]} for test in failing],
        "log": run.log,
    }


def print_baseline(name: str, base: dict[str, Any]) -> None:
    outcomes = ", ".join(f"{n} {o}" for o, n in sorted(base["outcomes"].items())) or "no test"
    print(f"\n== {name} {base['version']} baseline ({base['seconds']}s): {outcomes}")
    print(f"   guard package: {base['modules'].get(PACKAGE)}")
    for test in base["failing"]:
        print(f"   failing: {test['id']}\n            {test['message']}")


def print_mode(mode: str, result: dict[str, Any]) -> None:
    print(f"\n== {result['suite']} [{mode}] ({result['seconds']}s)")
    print(f"   tests run: {result['run']} (outcomes: {result['outcomes']})")
    print(f"   failing in baseline: {result['failing_in_baseline']}")
    print(f"   newly failing: {len(result['newly_failing'])}")
    passing, missing = len(result["newly_passing"]), len(result["missing"])
    print(f"   newly passing: {passing}, missing: {missing}")
    applied, tests = result["guard_applied"], result["tests_with_guard"]
    print(f"   guard applied {applied} times, in {tests} tests")
    if result["channel_added"]:
        print(f"   guard channel added to {result['channel_added']} StateGraph states")
    print(f"   self-check: {result['self_check']}")
    for note in result["notes"]:
        print(f"   note: {note}")
    if not applied:
        print("   WARNING: the guard was never applied: the patching did not take")
    for test in result["newly_failing"]:
        print(f"   - {test['id']}\n       {test['message']}")
    for test in result["missing"]:
        print(f"   missing (ran in baseline only): {test}")


def print_summary(report: dict[str, Any], width: int = 160) -> None:
    print("\n== summary")
    print(f"   {'mode':<16} {'tests run':>9} {'failing in baseline':>19} {'newly failing':>13}")
    for mode, result in report["modes"].items():
        run, base, new = result["run"], result["failing_in_baseline"], len(result["newly_failing"])
        print(f"   {mode:<16} {run:>9} {base:>19} {new:>13}")
    for mode, result in report["modes"].items():
        groups = result["newly_failing_by_cause"]
        print(f"\n== {mode}: {len(result['newly_failing'])} newly failing, {len(groups)} causes")
        for group in groups:
            message = group["cause"]
            shown = message if len(message) <= width else f"{message[: width - 3]}..."
            print(f"   {group['count']:>4} x {shown}")
        for group in groups:
            print(f"\n   [{group['count']}] {group['cause']}")
            for test in group["tests"]:
                print(f"        {test}")


def print_report(report: dict[str, Any]) -> None:
    print(f"\nguard: {report['guard']}; started {report['started']}")
    for name, base in report["baselines"].items():
        print_baseline(name, base)
    for mode, result in report["modes"].items():
        print_mode(mode, result)
    print_summary(report)


# -- main --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", type=Path, default=ROOT / ".upstream", help="work directory")
    parser.add_argument("--mode", action="append", choices=MODES, help="repeatable; default all")
    parser.add_argument("-k", help="pytest -k expression, for quick iteration")
    parser.add_argument("--json", type=Path, help="write the report here as JSON")
    parser.add_argument(
        "--python", default=sys.executable, help="the project's interpreter (default: this one)"
    )
    parser.add_argument(
        "--guard-src",
        type=Path,
        help="import langgraph_replay_guard from this directory (default: a copy of the working"
        " tree's, taken at the start, so that edits during the run change no result)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.cache = cache = args.cache.resolve()
    modes = args.mode or list(MODES)
    vpython = make_test_venv(args.python, cache)
    args.snapshot = args.guard_src is None
    args.guard_src = snapshot_guard(cache) if args.snapshot else args.guard_src.resolve()
    report: dict[str, Any] = {
        "guard": guard_revision(args.guard_src, args.snapshot),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "k": args.k,
        "baselines": {},
        "modes": {},
    }
    for suite in SUITES:
        wanted = [mode for mode in suite.modes if mode in modes]
        if not wanted:
            continue
        version = installed_version(args.python, suite.dist)
        src = fetch_sdist(args.python, suite.dist, version, cache)
        baseline = run_suite(vpython, src, suite, "baseline", args)
        report["baselines"][suite.name] = baseline_summary(baseline, version)
        for mode in wanted:
            guarded = run_suite(vpython, src, suite, mode, args)
            report["modes"][mode] = compare(baseline, guarded)
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
