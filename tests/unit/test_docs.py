"""The documentation runs as written.

Every fenced ```python block of README.md and docs/*.md is a test: it runs in a fresh, empty
directory with fresh globals and `LANGSMITH_TRACING=false`, offline, and fails on any exception.
Fragments that are not meant to run are fenced as `text`, `bash`, `json`, `toml`... Each test is
named after its file and the line its fence opens on (`README.md:93`).

By default a block runs in this process, as a module of its own (fast: the imports are shared).
`REPLAY_GUARD_DOCS_SUBPROCESS=1` runs each block in a fresh interpreter instead, as a reader
who pastes it into a file would.

The other tests keep the docs honest: README.md stays short, every link points at a file a
clone has (anchors too), README links every docs page, docs/configuration.md lists every
option, every page links docs/glossary.md (and its first use of the guard's own words does),
every glossary term is defined, the paths the pages name exist, and what the pages say of the
package (its core dependencies, the Python versions tested, `ScriptedChatModel`'s members, the
shadow counts they print) agrees with the code.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import types
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DOC_FILES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
README_LIMIT = 20_480

# Fence languages a doc may use. Python is written `python` (and then runs); the aliases below
# would silently escape the run, so they are refused.
LANGUAGES = {"python", "bash", "text", "json", "toml", "yaml", "sql", "diff"}
PYTHON_ALIASES = {"py", "python3", "pycon", "ipython", "py3"}

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a Markdown file."""

    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, with its language and opening line."""
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        indent, fence = match["indent"], match["fence"]
        language = match["info"].strip().split(" ")[0] if match["info"].strip() else ""
        body: list[str] = []
        end = index + 1
        while end < len(lines):
            closing = lines[end].strip()
            if closing.startswith(fence) and not closing.strip(fence[0]):
                break
            body.append(lines[end][len(indent) :] if lines[end].startswith(indent) else lines[end])
            end += 1
        else:
            msg = f"{path.name}:{index + 1}: a fence that is never closed"
            raise AssertionError(msg)
        blocks.append(Block(path, index + 1, language, "\n".join(body) + "\n"))
        index = end + 1
    return blocks


ALL_BLOCKS = [block for path in DOC_FILES for block in fenced_blocks(path)]
PYTHON_BLOCKS = [block for block in ALL_BLOCKS if block.language == "python"]


def _run_here(block: Block, directory: Path) -> None:
    # Pad with blank lines so that a traceback names the Markdown file and its real line.
    source = "\n" * block.line + block.code
    code = compile(source, str(block.path), "exec")
    name = f"docs_snippet_{uuid.uuid4().hex}"
    module = types.ModuleType(name)
    module.__file__ = str(directory / "snippet.py")
    sys.modules[name] = module  # classes defined in the block resolve their annotations here
    try:
        exec(code, module.__dict__)
    finally:
        del sys.modules[name]


def _run_in_subprocess(block: Block, directory: Path) -> None:
    script = directory / "snippet.py"
    script.write_text(block.code, encoding="utf-8")
    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    sys.stdout.write(done.stdout)
    assert done.returncode == 0, f"{block.name} failed:\n{done.stderr[-4000:]}"


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[b.name for b in PYTHON_BLOCKS])
def test_python_block_runs_as_written(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    monkeypatch.chdir(tmp_path)  # a fresh, empty directory: files a block writes stay there
    if os.environ.get("REPLAY_GUARD_DOCS_SUBPROCESS") == "1":
        _run_in_subprocess(block, tmp_path)
    else:
        _run_here(block, tmp_path)


def test_the_docs_have_python_blocks_to_run() -> None:
    assert len(PYTHON_BLOCKS) >= 10
    assert {b.path for b in PYTHON_BLOCKS} >= {ROOT / "README.md"}


def test_every_fence_names_a_known_language() -> None:
    problems = []
    for block in ALL_BLOCKS:
        if block.language in PYTHON_ALIASES:
            problems.append(
                f"{block.name}: `{block.language}` is not run; write `python` (runs) or `text`"
            )
        elif block.language not in LANGUAGES:
            problems.append(
                f"{block.name}: fence language {block.language!r}; use one of {sorted(LANGUAGES)}"
            )
    assert not problems, "\n".join(problems)


def test_readme_is_short() -> None:
    size = (ROOT / "README.md").stat().st_size
    assert size <= README_LIMIT, f"README.md is {size:,} bytes; keep it under {README_LIMIT:,}"


# -- links ----------------------------------------------------------------------------------------


def _slug(title: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    inside = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            inside = not inside
        elif not inside and (match := HEADING.match(line)):
            anchors.add(_slug(match["title"]))
    return anchors


def _links(path: Path) -> list[tuple[int, str]]:
    found = []
    inside = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            found.extend((number, m["target"]) for m in LINK.finditer(line))
    return found


def _tracked() -> set[str] | None:
    try:
        done = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None  # not a git checkout (an sdist): existence is checked only
    return set(done.stdout.splitlines())


def test_links_point_at_files_a_clone_has() -> None:
    tracked = _tracked()
    problems = []
    for path in DOC_FILES:
        for number, target in _links(path):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto:
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)}:{number}: {target}"
            if ROOT not in resolved.parents and resolved != ROOT:
                problems.append(f"{where} points outside the repository")
                continue
            if not resolved.exists():
                problems.append(f"{where} does not exist")
                continue
            relative = resolved.relative_to(ROOT).as_posix()
            if (
                tracked is not None
                and resolved.is_file()
                and relative not in tracked
                and not any(t.startswith(relative + "/") for t in tracked)
            ):
                problems.append(f"{where} is not in the repository (git ls-files)")
            if anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                problems.append(f"{where}: no heading with the anchor #{anchor}")
    assert not problems, "\n".join(problems)


def test_the_readme_links_every_docs_page() -> None:
    linked = {
        (ROOT / target.partition("#")[0]).resolve()
        for _, target in _links(ROOT / "README.md")
        if not target.startswith(("http:", "https:", "#"))
    }
    missing = [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked]
    assert not missing, f"README.md does not link {missing}"


# -- the configuration reference ------------------------------------------------------------------


def _documented_names() -> set[str]:
    """Names written as `name` in the first column of a table row of docs/configuration.md."""
    names: set[str] = set()
    for line in (DOCS / "configuration.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("|"):
            first = line.split("|")[1]
            names.update(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", first))
    return names


def test_the_configuration_page_lists_every_option() -> None:
    from langgraph_replay_guard import (
        ClassRule,
        GuardConfig,
        ReplayGuard,
        ReplayGuardCallbackHandler,
        ReplayGuardMiddleware,
        ToolPolicy,
    )

    documented = _documented_names()
    expected: dict[str, set[str]] = {
        "GuardConfig": set(GuardConfig.model_fields),
        "ToolPolicy": set(ToolPolicy.model_fields),
        "ClassRule": set(ClassRule.model_fields),
    }
    for cls in (ReplayGuard, ReplayGuardMiddleware, ReplayGuardCallbackHandler):
        parameters = inspect.signature(cls.__init__).parameters.values()
        expected[cls.__name__] = {
            p.name
            for p in parameters
            if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
        }
    missing = {owner: sorted(names - documented) for owner, names in expected.items()}
    missing = {owner: names for owner, names in missing.items() if names}
    assert not missing, f"docs/configuration.md has no table row for {missing}"


# -- the glossary ---------------------------------------------------------------------------------

GLOSSARY = DOCS / "glossary.md"

GLOSSARY_TERMS = (
    "abort",
    "call key",
    "claim",
    "come-back",
    "cut",
    "cycle",
    "dedup",
    "epoch",
    "execution record",
    "guard answer",
    "guard channel",
    "idempotency key",
    "ledger",
    "outcome",
    "preset",
    "redundant",
    "reminder",
    "repeat limit",
    "replay class",
    "scope",
    "shadow",
    "short-circuit",
    "toolkit",
    "trajectory",
    "turn",
    "volatile",
    "wrong block",
)
"""The words the pages use in a sense of their own: each has an entry in docs/glossary.md."""

FIRST_USE_LINKED = ("epoch", "come-back")
"""Words of the guard's own that mean nothing outside it: a page's first use links the glossary."""


def _prose_lines(path: Path) -> list[tuple[int, str]]:
    """The lines outside fenced blocks, with inline code removed (numbered from 1)."""
    found = []
    inside = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            found.append((number, re.sub(r"`[^`]*`", "", line)))
    return found


def _glossary_entries() -> dict[str, str]:
    """Each `## term` heading of the glossary and the text under it."""
    entries: dict[str, str] = {}
    current: str | None = None
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            entries[current] = ""
        elif current is not None:
            entries[current] += line.strip() + " "
    return entries


def test_every_glossary_term_is_defined() -> None:
    entries = _glossary_entries()
    missing = [term for term in GLOSSARY_TERMS if term not in entries]
    assert not missing, f"docs/glossary.md has no `## term` entry for {missing}"
    empty = [term for term, text in entries.items() if len(text.split()) < 8]
    assert not empty, f"docs/glossary.md: entries without a definition: {empty}"
    assert list(entries) == sorted(entries), "keep the glossary's entries in alphabetical order"


def test_every_page_links_the_glossary() -> None:
    pages = [p for p in DOC_FILES if p != GLOSSARY]
    unlinked = [
        p.relative_to(ROOT).as_posix()
        for p in pages
        if not any("glossary.md" in target for _, target in _links(p))
    ]
    assert not unlinked, f"these pages never link docs/glossary.md: {unlinked}"


def test_the_first_use_of_the_guards_own_words_links_the_glossary() -> None:
    problems = []
    for path in DOC_FILES:
        if path == GLOSSARY:
            continue
        for term in FIRST_USE_LINKED:
            word = re.compile(rf"(?<![\w-]){re.escape(term)}s?(?![\w-])", re.IGNORECASE)
            first = next(((n, line) for n, line in _prose_lines(path) if word.search(line)), None)
            if first is not None and "glossary.md" not in first[1]:
                where = f"{path.relative_to(ROOT).as_posix()}:{first[0]}"
                problems.append(f"{where}: first use of '{term}' without a glossary link")
    assert not problems, "\n".join(problems)


# -- what the pages say agrees with the code ------------------------------------------------------

REPO_PATH = re.compile(
    r"(?<![\w./-])(?P<path>(?:examples|tests/(?:unit|integration|fixtures)|benchmarks|notebooks|"
    r"langgraph_replay_guard)/"
    r"[\w.*/-]*[\w*/])"
)


def test_the_paths_the_pages_name_exist() -> None:
    # In prose, commands and code alike: a reader runs `replay-guard records verify --file
    # examples/...` as written.
    problems = []
    for path in DOC_FILES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for match in REPO_PATH.finditer(line):
                named = match["path"].rstrip("/").split(":")[0]
                exists = any(ROOT.glob(named)) if "*" in named else (ROOT / named).exists()
                if not exists:
                    where = f"{path.relative_to(ROOT).as_posix()}:{number}"
                    problems.append(f"{where}: {named} does not exist")
    assert not problems, "\n".join(problems)


def _pyproject() -> dict[str, Any]:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_readme_lists_the_core_packages_pyproject_requires() -> None:
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    sentence = re.search(r"The core needs only (?P<names>[^.]+)\.", text)
    assert sentence is not None, "README.md: the sentence 'The core needs only ...' is gone"
    listed = set(re.findall(r"`([\w.-]+)`", sentence["names"]))
    required = {
        re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0]
        for spec in _pyproject()["project"]["dependencies"]
    }
    assert listed == required, f"README.md lists {sorted(listed)}; pyproject {sorted(required)}"


def test_the_classifiers_name_the_python_versions_the_docs_say_are_tested() -> None:
    project = _pyproject()["project"]
    classified = {
        c.rsplit(" :: ", 1)[1]
        for c in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    page = " ".join((DOCS / "development.md").read_text(encoding="utf-8").split())
    tested = re.search(r"Tested: Python (?P<versions>[\d., and]+?) \(", page)
    assert tested is not None, "docs/development.md: the 'Tested: Python ...' line is gone"
    documented = set(re.findall(r"3\.\d+", tested["versions"]))
    assert classified == documented, f"classifiers {classified}, tested per the docs {documented}"
    oldest = min(documented, key=lambda v: int(v.split(".")[1]))
    assert project["requires-python"] == f">={oldest}"
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"Tested on Python {', '.join(sorted(documented))}" in readme


def test_a_page_that_prints_the_shadow_counts_says_what_they_count() -> None:
    problems = []
    for path in DOC_FILES:
        prints_shadow = any(
            re.search(r"print\(.*\.shadow\b", block.code)
            for block in PYTHON_BLOCKS
            if block.path == path
        )
        text = " ".join(path.read_text(encoding="utf-8").split())
        if prints_shadow and "runs it would have stopped" not in text:
            problems.append(path.relative_to(ROOT).as_posix())
    assert not problems, f"these pages print GuardView.shadow and never explain it: {problems}"


def test_the_scripted_models_api_is_documented() -> None:
    from langgraph_replay_guard.testing import ScriptedChatModel

    page = DOCS / "testing.md"
    text = page.read_text(encoding="utf-8")
    public = {
        name
        for name, value in vars(ScriptedChatModel).items()
        if not name.startswith("_")
        and (callable(value) or isinstance(value, property | classmethod))
    }
    public |= {"script", "final"}
    public = {name for name in public if not name.startswith("model_")}
    missing = sorted(name for name in public if f"`{name}" not in text and f".{name}" not in text)
    assert not missing, f"docs/testing.md does not document ScriptedChatModel's {missing}"
    assert any(b.path == page and "ScriptedChatModel(" in b.code for b in PYTHON_BLOCKS)
