"""Write coding-same-failure.jsonl: SYNTHETIC runs for the same-failure layer (`replay-guard eval`).

Run: python benchmarks/data/make_same_failure_synthetic.py

Made up, deterministically, after two loops seen in real coding-agent recordings that are not
shared here: a model varying `javac` flags 25 times against "javac: command not found", and
one repeating an editor `create` 29 times, with a different file each time, against the same
"parameter required" error. Every call key differs, so identical-call counting cannot see
them. Next to them, the look-alikes the layer must leave alone (ids start with `lookalike-`):
a systematic search over many dates that keeps returning `[]` successfully, a batch of
different writes that each print nothing, re-running the failing tests after each edit (the
tests fail the same way until the fix lands), and several tools failing, each differently.

Failures are recognized the way a deployment would: an error result (`ERROR: ...`, the default
`--error-pattern`) or the guard's `failure_pattern` for shell output (see
`coding-failures.json`). Evaluate with:
`replay-guard eval benchmarks/data/coding-same-failure.jsonl
--policy benchmarks/data/coding-presets.json --config benchmarks/data/coding-failures.json`
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("coding-same-failure.jsonl")

_JAVAC_FLAGS = [
    "-g",
    "-O",
    "-Xlint",
    "-Xlint:all",
    "-source 8 -target 8",
    "-source 11",
    "-d out",
    "-d build/classes",
    "-cp .",
    "-cp lib/*",
    "-encoding UTF-8",
    "-verbose",
    "-nowarn",
    "-deprecation",
    "-parameters",
    "-release 17",
    "-release 11",
    "-sourcepath src",
    "-implicit:none",
    "-Werror",
    "-g:none",
    "-proc:none",
    "-J-Xmx512m",
    "-Xdiags:verbose",
    "-Xmaxerrs 5",
]


class Run:
    """One trajectory: calls with their recorded results."""

    def __init__(self, ident: str, model: str) -> None:
        self.ident, self.model = ident, model
        self.calls: list[dict[str, Any]] = []

    def add(self, name: str, args: dict[str, Any], result: str) -> None:
        self.calls.append({"name": name, "args": args, "result": result, "turn": 0})

    def record(self) -> dict[str, Any]:
        return {"id": self.ident, "source": "synthetic", "model": self.model, "calls": self.calls}


def loop_javac(i: int) -> dict[str, Any]:
    """`javac` with other flags each time, 25 times, against a missing compiler."""
    run = Run(f"loop-javac-flags-{i}", "synthetic-weak")
    run.add("bash", {"command": "ls"}, "Main.java\nREADME.md")
    run.add("bash", {"command": "cat Main.java"}, 'class Main { void main() { print("hi"); } }')
    rng = random.Random(i)
    for n, flags in enumerate(_JAVAC_FLAGS, start=1):
        path = rng.choice(["Main.java", "./Main.java", "src/Main.java", "/workspace/Main.java"])
        # The shell prefixes its line number on some calls and not on others.
        prefix = f"bash: line {n}: " if n % 3 else ""
        run.add("bash", {"command": f"javac {flags} {path}"}, f"{prefix}javac: command not found")
    return run.record()


def loop_create(i: int) -> dict[str, Any]:
    """An editor `create` without its `path`, 29 times, each with another file content."""
    run = Run(f"loop-editor-create-{i}", "synthetic-weak")
    run.add(
        "str_replace_editor",
        {"command": "view", "path": "/repo"},
        "Here's the files and directories up to 2 levels deep in /repo:\n/repo/src\n/repo/tests",
    )
    for n in range(29):
        content = f"def helper_{n}(x):\n    return x * {n + 2}\n"
        run.add(
            "str_replace_editor",
            {"command": "create", "file_text": content},
            "ERROR: Parameter `path` is required for command: create.",
        )
    return run.record()


def lookalike_dates(i: int) -> dict[str, Any]:
    """A systematic search over 40 dates, each returning `[]` successfully, then a hit."""
    run = Run(f"lookalike-search-dates-{i}", "synthetic-strong")
    for day in range(1, 41):
        date = f"2024-{5 + day // 31:02d}-{(day - 1) % 30 + 1:02d}"
        run.add("search_flights", {"origin": "SFO", "destination": "JFK", "date": date}, "[]")
    run.add(
        "search_flights",
        {"origin": "SFO", "destination": "OAK", "date": "2024-06-11"},
        '[{"flight_number": "HAT101", "price": 120}]',
    )
    return run.record()


def lookalike_writes(i: int) -> dict[str, Any]:
    """A batch of 20 different writes that each print nothing (success)."""
    run = Run(f"lookalike-silent-writes-{i}", "synthetic-strong")
    for n in range(20):
        run.add("bash", {"command": f"mkdir -p build/module_{n}"}, "")
        run.add("bash", {"command": f"touch build/module_{n}/__init__.py"}, "")
    run.add("bash", {"command": "ls build | wc -l"}, "20")
    return run.record()


def lookalike_tests(i: int) -> dict[str, Any]:
    """Re-running the tests after each of 8 edits: the same failure until the fix lands."""
    run = Run(f"lookalike-rerun-tests-{i}", "synthetic-strong")
    rng = random.Random(100 + i)
    run.add("bash", {"command": "cat src/parser.py"}, "def parse(text):\n    return text.split()\n")
    for n in range(8):
        run.add(
            "bash",
            {"command": "python -m pytest tests/test_parser.py -q"},
            "F.                                                                       [100%]\n"
            "FAILED tests/test_parser.py::test_strip - AssertionError\n"
            f"1 failed, 1 passed in {rng.uniform(0.1, 2.0):.2f}s",
        )
        run.add(
            "str_replace_editor",
            {
                "command": "str_replace",
                "path": "/repo/src/parser.py",
                "old_str": f"attempt {n}",
                "new_str": f"attempt {n + 1}",
            },
            "The file /repo/src/parser.py has been edited.",
        )
    run.add(
        "bash",
        {"command": "python -m pytest tests/test_parser.py -q"},
        "..                                                                       [100%]\n"
        "2 passed in 0.31s",
    )
    return run.record()


def lookalike_tools(i: int) -> dict[str, Any]:
    """Several tools failing, each with another error each time (exploration, not a loop)."""
    run = Run(f"lookalike-different-failures-{i}", "synthetic-strong")
    errors = {
        "bash": [
            ("python app.py", "ModuleNotFoundError: No module named 'requests'"),
            ("pip install requests", "ERROR: Could not find a version that satisfies it"),
            ("python3 -m venv .venv", "Error: ensurepip is not available"),
            ("bash setup.sh", "bash: setup.sh: Permission denied"),
        ],
        "str_replace_editor": [
            ({"command": "view", "path": "/repo/app.cfg"}, "ERROR: The path does not exist."),
            ({"command": "insert", "path": "/repo/a.py"}, "ERROR: Parameter `insert_line` needed"),
            ({"command": "undo_edit", "path": "/repo/a.py"}, "ERROR: No edit history found."),
            ({"command": "str_replace", "path": "/repo/a.py"}, "ERROR: old_str is empty."),
        ],
        "find_file": [
            ({"file_name": "settings.py"}, 'No matches found for "settings.py" in /repo'),
            ({"file_name": "config"}, "Error: Directory /repo/config not found"),
            ({"file_name": "*.yaml"}, "Error: invalid glob"),
            ({"file_name": "setup.cfg"}, "Error: permission denied reading /repo/.git"),
        ],
    }
    for n in range(4):
        command, result = errors["bash"][n]
        run.add("bash", {"command": command}, result)
        args, result = errors["str_replace_editor"][n]
        run.add("str_replace_editor", args, result)
        args, result = errors["find_file"][n]
        run.add("find_file", args, result)
    return run.record()


def trajectories() -> list[dict[str, Any]]:
    """Every run: two of each loop, two of each look-alike."""
    makers = [
        loop_javac,
        loop_create,
        lookalike_dates,
        lookalike_writes,
        lookalike_tests,
        lookalike_tools,
    ]
    return [make(i) for make in makers for i in range(2)]


def main() -> None:
    runs = trajectories()
    with OUT.open("w", encoding="utf-8") as handle:
        for run in runs:
            handle.write(json.dumps(run, ensure_ascii=False) + "\n")
    calls = sum(len(r["calls"]) for r in runs)
    print(f"wrote {len(runs)} synthetic trajectories, {calls} calls, to {OUT}")


if __name__ == "__main__":
    main()
