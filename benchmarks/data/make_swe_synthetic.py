"""Write swe-synthetic.jsonl: SYNTHETIC SWE-agent-style trajectories for the `swe-agent` toolkit.

Run: python benchmarks/data/make_swe_synthetic.py

SYNTHETIC: made up by hand, deterministic, after the way SWE-agent's function-calling agents
use their commands (`open`, `goto`, `scroll_down`, `search_dir`, `find_file`, `edit`...). Every
result is computed by the small simulated repository of `make_coding_synthetic.py`, so a repeat
returns the identical text exactly when nothing it depends on changed.

Two kinds of runs, told apart by their `model`:

- `synthetic-swe-redundant`: an agent that asks again for what it already has: the same
  `search_dir`, `find_file` or `search_file` with no edit in between. Every identical repeat
  in these runs is a redundant read a guard may answer from the earlier result.
- `synthetic-swe-lookalike`: calls that look like repeats and must run: a search after an
  edit, `goto` and `scroll_*` moving through a file (a `goto` back to a line already seen
  included), `open` of a file after an edit, the tests run again after each edit, the same
  `edit 1:1 ...` in each of several files in turn (SWE-agent's `edit` edits the file open in
  the viewer, so after `open` of another file it is another edit). Any block in these runs is
  a wrong block.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from make_coding_synthetic import Repo, Run, cache_repo, calc_repo, parser_repo

OUT = Path(__file__).with_name("swe-synthetic.jsonl")
REDUNDANT = "synthetic-swe-redundant"
LOOKALIKE = "synthetic-swe-lookalike"


class SweRun(Run):
    """A run whose SWE-agent commands include `search_file` (the shared simulator lacks it)."""

    def swe(self, name: str, **kw: Any) -> None:
        if name == "search_file":
            self._add(name, kw, _search_file(self.repo, kw["search_term"], kw["file"]))
            return
        super().swe(name, **kw)


def _search_file(repo: Repo, term: str, path: str) -> str:
    text = repo.read(path)
    if text is None:
        return f"Usage: search_file <search_term> [<file>]\nError: File name {path} not found."
    hits = [f"Line {i}:{line}" for i, line in enumerate(text.splitlines(), 1) if term in line]
    return f'Found {len(hits)} matches for "{term}" in {path}:\n' + "\n".join(hits)


# --- redundant reads: every identical repeat here may be answered from memory ---------------


def redundant_search(i: int) -> dict[str, Any]:
    run = SweRun(f"swe-redundant-search-{i}", REDUNDANT, cache_repo(), 2000 + i)
    run.swe("find_file", file_name="cache.py")
    run.swe("search_dir", search_term="ttl")
    run.swe("open", path="src/cache.py")
    run.swe("scroll_down")
    run.swe("search_dir", search_term="ttl")  # the same search, nothing written: redundant
    if i % 2 == 0:
        run.swe("find_file", file_name="cache.py")  # found it already: redundant
    run.swe("search_file", search_term="return value", file="src/cache.py")
    run.swe("goto", line_number=12)
    if i % 3 != 2:
        run.swe("search_file", search_term="return value", file="src/cache.py")  # redundant
    run.swe("edit", start_line=12, end_line=12, replacement="            return None")
    run.bash("python -m pytest -q")
    run.swe("submit")
    return run.record()


def redundant_lost(i: int) -> dict[str, Any]:
    run = SweRun(f"swe-redundant-lost-{i}", REDUNDANT, parser_repo(), 2100 + i)
    run.swe("search_dir", search_term="def parse")
    run.swe("find_file", file_name="parser.py")
    run.swe("search_dir", search_term="def parse")  # lost track: redundant
    run.swe("open", path="src/parser.py")
    run.swe("find_file", file_name="parser.py")  # redundant
    run.swe("search_file", search_term="split", file="src/parser.py")
    run.swe("search_dir", search_term="def parse")  # a third time: redundant
    fixed = "    return [p.strip() for p in parts if p]"
    run.swe("edit", start_line=3, end_line=3, replacement=fixed)
    run.bash("python -m pytest -q")
    return run.record()


# --- look-alikes: must run ------------------------------------------------------------------


def lookalike_paging(i: int) -> dict[str, Any]:
    run = SweRun(f"swe-lookalike-paging-{i}", LOOKALIKE, cache_repo(), 2200 + i)
    run.swe("open", path="src/cache.py")
    run.swe("scroll_down")
    run.swe("scroll_down")  # the same call, the next page
    run.swe("scroll_up")
    run.swe("goto", line_number=12)
    run.swe("goto", line_number=200)
    run.swe("goto", line_number=12 + i)  # back to a line seen: runs, it moves the window
    run.swe("scroll_down")
    return run.record()


def lookalike_after_edit(i: int) -> dict[str, Any]:
    run = SweRun(f"swe-lookalike-after-edit-{i}", LOOKALIKE, cache_repo(), 2300 + i)
    run.swe("search_dir", search_term="return value")
    run.swe("search_file", search_term="return value", file="src/cache.py")
    run.swe("open", path="src/cache.py")
    run.bash("python -m pytest -q")
    run.swe("edit", start_line=12, end_line=12, replacement="            return None")
    run.swe("search_dir", search_term="return value")  # after an edit: must run (same text)
    run.swe("search_file", search_term="return value", file="src/cache.py")  # changed lines
    run.swe("open", path="src/cache.py")  # the file changed: must run
    run.bash("python -m pytest -q")  # the tests again after the edit
    return run.record()


def lookalike_fix_and_retest(i: int) -> dict[str, Any]:
    run = SweRun(f"swe-lookalike-retest-{i}", LOOKALIKE, calc_repo(), 2400 + i)
    run.swe("find_file", file_name="calc.py")
    run.swe("open", path="src/calc.py")
    run.bash("python -m pytest -q")
    run.swe("edit", start_line=2, end_line=2, replacement="    return a + b")
    run.swe("open", path="src/calc.py")
    run.bash("python -m pytest -q")
    run.swe("edit", start_line=6, end_line=6, replacement="    return a * b")
    run.swe("open", path="src/calc.py")
    run.bash("python -m pytest -q")
    run.swe("find_file", file_name="calc.py")  # after two edits: must run
    run.swe("submit")
    return run.record()


def java_repo(count: int) -> Repo:
    """Java sources that all start with the same wrong package line."""
    files = {
        f"src/app/Part{n}.java": f"package old;\n\npublic class Part{n} {{\n}}\n"
        for n in range(count)
    }
    return Repo(files, {})


def lookalike_same_edit_each_file(i: int) -> dict[str, Any]:
    files = 5 + i
    run = SweRun(f"swe-lookalike-edit-each-file-{i}", LOOKALIKE, java_repo(files), 2500 + i)
    run.swe("search_dir", search_term="package old;")
    for n in range(files):
        run.swe("open", path=f"src/app/Part{n}.java")
        # The identical call in every file: the viewer's open file is what it edits.
        run.swe("edit", start_line=1, end_line=1, replacement="package app;")
    run.swe("search_dir", search_term="package old;")  # after the edits: must run
    run.swe("submit")
    return run.record()


def trajectories() -> list[dict[str, Any]]:
    runs = [redundant_search(i) for i in range(6)]
    runs += [redundant_lost(i) for i in range(3)]
    runs += [lookalike_paging(i) for i in range(3)]
    runs += [lookalike_after_edit(i) for i in range(3)]
    runs += [lookalike_fix_and_retest(i) for i in range(3)]
    runs += [lookalike_same_edit_each_file(i) for i in range(3)]
    return runs


def main() -> None:
    runs = trajectories()
    with OUT.open("w", encoding="utf-8") as handle:
        for run in runs:
            handle.write(json.dumps({**run, "source": "synthetic"}, ensure_ascii=False) + "\n")
    calls = sum(len(r["calls"]) for r in runs)
    print(f"wrote {len(runs)} SYNTHETIC trajectories, {calls} calls, to {OUT}")


if __name__ == "__main__":
    main()
