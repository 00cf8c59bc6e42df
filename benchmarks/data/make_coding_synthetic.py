"""Write coding-synthetic.jsonl: SYNTHETIC coding-agent trajectories for `replay-guard eval`.

Run: python benchmarks/data/make_coding_synthetic.py

No public recorded coding-agent runs were available here (../shared/data holds tau-bench
customer-service runs only), so these trajectories are made up, by hand, after the patterns
real coding agents show (see the README): a strong agent that edits and re-runs the tests
after every edit, re-reads a file after changing it and sometimes re-reads one it already has;
weak agents that open the same missing file dozens of times, re-apply the same edit, re-run
the same failing tests without changing anything, or alternate two reads; an SWE-agent-style
agent that pages through files with `scroll_down`. Every result is computed by a small
simulated repository, so a repeated call returns the identical text exactly when nothing it
depends on changed, as in a real run (test output carries a varying duration, as pytest's).
"""

from __future__ import annotations

import difflib
import json
import random
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("coding-synthetic.jsonl")
WINDOW = 100  # lines an SWE-agent-style `open` shows


class Repo:
    """A tiny repository: files, a git HEAD, tests as predicates over the files."""

    def __init__(self, files: dict[str, str], tests: dict[str, Callable[[Repo], bool]]):
        self.files = dict(files)
        self.head = dict(files)
        self.tests = tests
        self.history: list[dict[str, str]] = []
        self.rng = random.Random(0)
        self.open_file: str | None = None
        self.first_line = 1

    # -- helpers --------------------------------------------------------------------------

    def read(self, path: str) -> str | None:
        return self.files.get(path.removeprefix("/repo/"))

    def write(self, path: str, text: str) -> None:
        self.history.append(dict(self.files))
        self.files[path.removeprefix("/repo/")] = text

    def pytest(self, selection: str = "") -> str:
        names = [n for n in self.tests if selection in n] or list(self.tests)
        results = {n: self.tests[n](self) for n in names}
        dots = "".join("." if ok else "F" for ok in results.values())
        failed = [n for n, ok in results.items() if not ok]
        lines = [f"{dots:<72} [100%]"]
        for name in failed:
            lines.append(f"FAILED {name} - AssertionError")
        passed = len(results) - len(failed)
        summary = ", ".join(
            part for part in (f"{len(failed)} failed" if failed else "", f"{passed} passed") if part
        )
        lines.append(f"{summary} in {self.rng.uniform(0.05, 2.5):.2f}s")
        return "\n".join(lines)

    # -- bash -------------------------------------------------------------------------------

    def bash(self, command: str) -> str:
        parts = [p.strip() for p in re.split(r"&&", command)]
        return "\n".join(out for out in (self._one(p) for p in parts) if out)

    def _one(self, command: str) -> str:
        command = command.replace(" 2>&1", "").split(" | ")[0]
        words = shlex.split(command)
        head = words[0]
        if head == "cd":
            return ""
        if head in ("cat", "head") or command.startswith("sed -n"):
            path = words[-1]
            text = self.read(path)
            if text is None:
                return f"{head}: {path}: No such file or directory"
            if head == "head":
                return "\n".join(text.splitlines()[: int(words[2])])
            if head == "sed":
                start, end = map(int, re.findall(r"\d+", words[2]))
                return "\n".join(text.splitlines()[start - 1 : end])
            return text
        if head == "ls":
            base = words[-1].removeprefix("/repo").strip("/") if len(words) > 1 else ""
            base = "" if base.startswith("-") else base
            names = sorted(
                {p[len(base) :].lstrip("/").split("/")[0] for p in self.files if p.startswith(base)}
            )
            return "\n".join(names)
        if head == "grep":
            pattern = words[2]
            hits = [
                f"{p}:{i}:{line}"
                for p, text in sorted(self.files.items())
                for i, line in enumerate(text.splitlines(), 1)
                if pattern in line
            ]
            return "\n".join(hits)
        if head == "find":
            return "\n".join(f"./{p}" for p in sorted(self.files) if p.endswith(".py"))
        if command.startswith("git status"):
            changed = [p for p in self.files if self.files[p] != self.head.get(p)]
            if not changed:
                return "On branch main\nnothing to commit, working tree clean"
            body = "\n".join(f"\tmodified:   {p}" for p in sorted(changed))
            return f"On branch main\nChanges not staged for commit:\n{body}"
        if command.startswith("git diff"):
            out = []
            for p in sorted(self.files):
                old, new = self.head.get(p, ""), self.files[p]
                if old != new:
                    out += difflib.unified_diff(
                        old.splitlines(), new.splitlines(), f"a/{p}", f"b/{p}", lineterm=""
                    )
            return "\n".join(out)
        if command.startswith("git log"):
            return "3f2a1c9 Add cache expiry\n91bd0e2 Initial import"
        if "pytest" in command:
            selection = next((w for w in words if w.startswith("tests/")), "")
            return self.pytest(selection)
        if head == "python" and words[1] == "reproduce.py":
            if "reproduce.py" not in self.files:
                return "python: can't open file '/repo/reproduce.py': [Errno 2] No such file"
            ok = all(test(self) for test in self.tests.values())
            return "OK: behaviour is correct" if ok else "Traceback ...\nAssertionError: wrong"
        if head == "sed" and words[1] == "-i":
            old, new = words[2].replace("\\", "").split("/")[1:3]
            path = words[3]
            text = self.read(path) or ""
            self.write(path, text.replace(old, new, 1))
            return ""
        if head == "pip":
            return "Successfully installed minirepo-0.1.0"
        if head == "sleep":
            return ""
        if head == "curl":
            return self.rng.choice(["starting", "starting", "ok"])
        raise ValueError(f"simulator does not know: {command}")

    # -- str_replace_editor -------------------------------------------------------------------

    def editor(self, command: str, path: str, **kw: Any) -> str:
        text = self.read(path)
        if command == "view":
            if text is None:
                return f"ERROR: Invalid `path` parameter: {path}. The path does not exist."
            numbered = [f"{i:6}\t{line}" for i, line in enumerate(text.splitlines(), 1)]
            return f"Here's the result of running `cat -n` on {path}:\n" + "\n".join(numbered)
        if command == "create":
            self.write(path, kw["file_text"])
            return f"File created successfully at: {path}"
        if command == "str_replace":
            if text is None or text.count(kw["old_str"]) != 1:
                return (
                    f"ERROR: No replacement was performed, old_str `{kw['old_str']}` did not "
                    f"appear verbatim in {path}."
                )
            self.write(path, text.replace(kw["old_str"], kw["new_str"]))
            return f"The file {path} has been edited."
        if command == "undo_edit":
            self.files = self.history.pop()
            return f"Last edit to {path} undone successfully."
        raise ValueError(command)

    # -- SWE-agent-style windowed viewer ------------------------------------------------------

    def window(self) -> str:
        assert self.open_file is not None
        lines = (self.read(self.open_file) or "").splitlines()
        start = max(1, min(self.first_line, max(1, len(lines) - WINDOW + 1)))
        shown = lines[start - 1 : start - 1 + WINDOW]
        body = "\n".join(f"{start + i}:{line}" for i, line in enumerate(shown))
        return f"[File: /repo/{self.open_file} ({len(lines)} lines total)]\n{body}"

    def swe(self, name: str, **kw: Any) -> str:
        if name == "open":
            if self.read(kw["path"]) is None:
                return f"File {kw['path']} not found"
            self.open_file = kw["path"].removeprefix("/repo/")
            self.first_line = max(1, kw.get("line_number", 1) - WINDOW // 2)
            return self.window()
        if name == "goto":
            self.first_line = max(1, kw["line_number"] - WINDOW // 2)
            return self.window()
        if name in ("scroll_down", "scroll_up"):
            step = WINDOW if name == "scroll_down" else -WINDOW
            total = len((self.read(self.open_file or "") or "").splitlines())
            self.first_line = max(1, min(self.first_line + step, max(1, total - WINDOW + 1)))
            return self.window()
        if name == "search_dir":
            hits = sorted(p for p, t in self.files.items() if kw["search_term"] in t)
            return f'Found {len(hits)} matches for "{kw["search_term"]}":\n' + "\n".join(hits)
        if name == "find_file":
            hits = sorted(p for p in self.files if p.endswith(kw["file_name"]))
            return f'Found {len(hits)} matches for "{kw["file_name"]}":\n' + "\n".join(hits)
        if name == "edit":
            assert self.open_file is not None
            lines = (self.read(self.open_file) or "").splitlines()
            lines[kw["start_line"] - 1 : kw["end_line"]] = kw["replacement"].splitlines()
            self.write(self.open_file, "\n".join(lines) + "\n")
            return "File updated. Please review the changes.\n" + self.window()
        if name == "create":
            self.write(kw["filename"], "\n")
            self.open_file = kw["filename"]
            return self.window()
        if name == "submit":
            return "diff --git a/... (submitted)"
        raise ValueError(name)


# --- the repositories -----------------------------------------------------------------------


def calc_repo() -> Repo:
    files = {
        "src/calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n",
        "tests/test_calc.py": (
            "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
            "def test_mul():\n    assert mul(2, 3) == 6\n"
        ),
        "README.md": "# calc\nTiny calculator.\n",
        "setup.py": "from setuptools import setup\nsetup(name='calc')\n",
    }
    return Repo(
        files,
        {
            "tests/test_calc.py::test_add": lambda r: (
                "return a + b" in r.files["src/calc.py"]
                and r.files["src/calc.py"].index("return a + b")
                < r.files["src/calc.py"].index("mul")
            ),
            "tests/test_calc.py::test_mul": lambda r: "return a * b" in r.files["src/calc.py"],
        },
    )


def cache_repo() -> Repo:
    body = "\n".join(f"    # line {i}: bookkeeping" for i in range(1, 260))
    cache = (
        "import time\n\n\nclass Cache:\n    def __init__(self, ttl):\n        self.ttl = ttl\n"
        "        self.data = {}\n\n    def get(self, key):\n        value, at = self.data[key]\n"
        "        if time.time() - at > self.ttl:\n            return value\n        return value\n"
        f"{body}\n"
    )
    files = {
        "src/cache.py": cache,
        "tests/test_cache.py": "def test_expiry():\n    ...\n\n\ndef test_get():\n    ...\n",
        "src/__init__.py": "",
    }
    return Repo(
        files,
        {
            "tests/test_cache.py::test_expiry": lambda r: "return None" in r.files["src/cache.py"],
            "tests/test_cache.py::test_get": lambda r: True,
        },
    )


def parser_repo() -> Repo:
    files = {
        "src/parser.py": (
            "def parse(text):\n    parts = text.split(',')\n    return [p for p in parts]\n"
        ),
        "tests/test_parser.py": "def test_strip():\n    ...\n\n\ndef test_empty():\n    ...\n",
        "pyproject.toml": "[project]\nname = 'parser'\n",
    }
    return Repo(
        files,
        {
            "tests/test_parser.py::test_strip": lambda r: "p.strip()" in r.files["src/parser.py"],
            "tests/test_parser.py::test_empty": lambda r: "if p" in r.files["src/parser.py"],
        },
    )


# --- trajectories ---------------------------------------------------------------------------


class Run:
    """Records one trajectory's calls against a repository."""

    def __init__(self, ident: str, model: str, repo: Repo, seed: int) -> None:
        self.ident, self.model, self.repo = ident, model, repo
        repo.rng = random.Random(seed)
        self.calls: list[dict[str, Any]] = []

    def bash(self, command: str) -> None:
        self._add("bash", {"command": command}, self.repo.bash(command))

    def edit(self, command: str, path: str, **kw: Any) -> None:
        args = {"command": command, "path": path, **kw}
        self._add("str_replace_editor", args, self.repo.editor(command, path, **kw))

    def swe(self, name: str, **kw: Any) -> None:
        self._add(name, kw, self.repo.swe(name, **kw))

    def _add(self, name: str, args: dict[str, Any], result: str) -> None:
        self.calls.append({"name": name, "args": args, "result": result, "turn": 0})

    def record(self) -> dict[str, Any]:
        return {"id": self.ident, "source": "synthetic", "model": self.model, "calls": self.calls}


def strong_calc(i: int, cd: bool) -> dict[str, Any]:
    p = "cd /repo && " if cd else ""
    run = Run(f"strong-calc-{i}", "synthetic-strong", calc_repo(), i)
    run.bash(f"{p}ls -la")
    run.bash(f"{p}cat src/calc.py")
    run.bash(f"{p}cat tests/test_calc.py")
    run.bash(f"{p}python -m pytest tests/test_calc.py -q")
    run.edit("str_replace", "/repo/src/calc.py", old_str="return a - b", new_str="return a + b")
    run.bash(f"{p}python -m pytest tests/test_calc.py -q")
    run.bash(f"{p}cat src/calc.py")
    if i % 3:
        run.bash(f"{p}cat src/calc.py")  # re-read without a write: redundant
    run.edit(
        "str_replace",
        "/repo/src/calc.py",
        old_str="def mul(a, b):\n    return a + b",
        new_str="def mul(a, b):\n    return a * b",
    )
    run.bash(f"{p}python -m pytest tests/test_calc.py -q")
    run.bash(f"{p}git diff")
    run.bash(f"{p}git status")
    run.bash(f"{p}python -m pytest -q")
    if i % 3 == 0:
        run.bash(f"{p}git status")  # asked again with nothing changed
    return run.record()


def strong_parser_sed(i: int) -> dict[str, Any]:
    run = Run(f"strong-parser-sed-{i}", "synthetic-strong", parser_repo(), 100 + i)
    run.bash("find . -name '*.py'")
    run.bash("cat src/parser.py")
    run.bash("pytest -q 2>&1 | tail -5")
    run.bash(
        "sed -i 's/return \\[p for p in parts\\]/return [p.strip() for p in parts]/' src/parser.py"
    )
    run.bash("cat src/parser.py")
    run.bash("pytest -q 2>&1 | tail -5")
    run.bash("sed -i 's/for p in parts]/for p in parts if p]/' src/parser.py")
    run.bash("cat src/parser.py")
    run.bash("pytest -q 2>&1 | tail -5")
    run.bash("git diff")
    if i % 2 == 0:
        run.bash("git diff")  # looked again with nothing changed
    return run.record()


def strong_reproduce(i: int) -> dict[str, Any]:
    run = Run(f"strong-reproduce-{i}", "synthetic-strong", calc_repo(), 200 + i)
    run.bash("python reproduce.py")
    run.edit(
        "create",
        "/repo/reproduce.py",
        file_text="from calc import add\nassert add(2, 3) == 5\nprint('OK')\n",
    )
    run.bash("python reproduce.py")
    run.bash("grep -rn 'def add' src")
    run.edit("view", "/repo/src/calc.py")
    run.edit("str_replace", "/repo/src/calc.py", old_str="return a - b", new_str="return a + b")
    run.bash("python reproduce.py")
    run.edit("view", "/repo/src/calc.py")
    run.edit("view", "/repo/src/calc.py")  # viewed twice: redundant
    run.edit(
        "str_replace",
        "/repo/src/calc.py",
        old_str="def mul(a, b):\n    return a + b",
        new_str="def mul(a, b):\n    return a * b",
    )
    run.bash("python reproduce.py")
    run.bash("python -m pytest -q")
    run.bash("pip install -e .")
    run.bash("python -m pytest -q")
    return run.record()


def strong_poll(i: int) -> dict[str, Any]:
    run = Run(f"strong-poll-{i}", "synthetic-strong", cache_repo(), 300 + i)
    run.bash("cat src/cache.py")
    for _ in range(3):
        run.bash("sleep 2 && curl -s http://localhost:8000/health")
    run.bash("grep -rn 'return value' src")
    run.bash("grep -rn 'return value' src")  # the same search again: redundant
    run.edit(
        "str_replace",
        "/repo/src/cache.py",
        old_str="> self.ttl:\n            return value",
        new_str="> self.ttl:\n            return None",
    )
    run.bash("python -m pytest tests/test_cache.py -q")
    run.bash("git diff")
    return run.record()


def weak_missing_file(i: int, times: int) -> dict[str, Any]:
    run = Run(f"weak-missing-file-{i}", "synthetic-weak", calc_repo(), 400 + i)
    run.bash("ls")
    for _ in range(times):
        run.bash("cat src/utils/helpers.py")
    return run.record()


def weak_missing_view(i: int, times: int) -> dict[str, Any]:
    run = Run(f"weak-missing-view-{i}", "synthetic-weak", parser_repo(), 500 + i)
    for _ in range(times):
        run.edit("view", "/repo/src/parse.py")
    return run.record()


def weak_same_edit(i: int, times: int) -> dict[str, Any]:
    run = Run(f"weak-same-edit-{i}", "synthetic-weak", calc_repo(), 600 + i)
    run.bash("cat src/calc.py")
    for _ in range(times):
        run.edit("str_replace", "/repo/src/calc.py", old_str="return a-b", new_str="return a+b")
    return run.record()


def weak_same_create(i: int, times: int) -> dict[str, Any]:
    run = Run(f"weak-same-create-{i}", "synthetic-weak", calc_repo(), 700 + i)
    for _ in range(times):
        run.edit(
            "create", "/repo/reproduce.py", file_text="from calc import add\nprint(add(2, 3))\n"
        )
        run.bash("python reproduce.py")
    return run.record()


def weak_rerun_tests(i: int, times: int) -> dict[str, Any]:
    run = Run(f"weak-rerun-tests-{i}", "synthetic-weak", parser_repo(), 800 + i)
    run.bash("cat src/parser.py")
    for _ in range(times):
        run.bash("python -m pytest -q")
    return run.record()


def weak_alternate(i: int, times: int) -> dict[str, Any]:
    run = Run(f"weak-alternate-{i}", "synthetic-weak", calc_repo(), 900 + i)
    for _ in range(times):
        run.bash("cat src/calc.py")
        run.bash("git status")
    return run.record()


def weak_same_sed(i: int, times: int) -> dict[str, Any]:
    run = Run(f"weak-same-sed-{i}", "synthetic-weak", calc_repo(), 1000 + i)
    for _ in range(times):
        run.bash("sed -i 's/return a - b/return a + b/' src/calc.py")
        run.bash("cat src/calc.py")
    return run.record()


def swe_paging(i: int) -> dict[str, Any]:
    run = Run(f"swe-paging-{i}", "synthetic-swe-agent", cache_repo(), 1100 + i)
    run.swe("find_file", file_name="cache.py")
    run.swe("open", path="src/cache.py")
    for _ in range(2):
        run.swe("scroll_down")
    run.swe("scroll_up")
    run.swe("goto", line_number=12)
    run.swe("search_dir", search_term="ttl")
    run.swe("edit", start_line=12, end_line=12, replacement="            return None")
    run.bash("python -m pytest -q")
    run.swe("open", path="src/cache.py")
    run.swe("submit")
    return run.record()


def swe_scroll_loop(i: int, times: int) -> dict[str, Any]:
    run = Run(f"swe-scroll-loop-{i}", "synthetic-swe-agent", cache_repo(), 1200 + i)
    run.swe("open", path="src/cache.py")
    for _ in range(times):
        run.swe("scroll_down")  # past the end: the same last window again and again
    return run.record()


def swe_open_missing(i: int, times: int) -> dict[str, Any]:
    run = Run(f"swe-open-missing-{i}", "synthetic-swe-agent", parser_repo(), 1300 + i)
    run.swe("search_dir", search_term="parse")
    run.swe("search_dir", search_term="parse")  # the same search again: redundant
    for _ in range(times):
        run.swe("open", path="src/parsing/core.py")
    return run.record()


def trajectories() -> list[dict[str, Any]]:
    runs = []
    for i in range(6):
        runs.append(strong_calc(i, cd=i < 3))  # half of them OpenHands-style: `cd /repo && ...`
    for i in range(4):
        runs.append(strong_parser_sed(i))
    for i in range(3):
        runs.append(strong_reproduce(i))
    for i in range(2):
        runs.append(strong_poll(i))
    runs.append(weak_missing_file(0, 45))
    runs.append(weak_missing_file(1, 12))
    runs.append(weak_missing_view(0, 20))
    runs.append(weak_same_edit(0, 15))
    runs.append(weak_same_create(0, 8))
    runs.append(weak_rerun_tests(0, 10))
    runs.append(weak_alternate(0, 10))
    runs.append(weak_same_sed(0, 6))
    for i in range(3):
        runs.append(swe_paging(i))
    runs.append(swe_scroll_loop(0, 12))
    runs.append(swe_open_missing(0, 30))
    return runs


def main() -> None:
    runs = trajectories()
    with OUT.open("w", encoding="utf-8") as handle:
        for run in runs:
            handle.write(json.dumps(run, ensure_ascii=False) + "\n")
    calls = sum(len(r["calls"]) for r in runs)
    print(f"wrote {len(runs)} synthetic trajectories, {calls} calls, to {OUT}")


if __name__ == "__main__":
    main()
