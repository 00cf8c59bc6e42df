"""The package's import graph has no cycles, and the core imports no LangChain."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "langgraph_replay_guard"
ROOT = PACKAGE.name

# The deciding core: pure Python, free of LangChain/LangGraph (DESIGN.md, ARCHITECTURE.md).
# Every module of the core folders counts, so a new one is checked without being listed here;
# the few modules of those folders that touch LangGraph name the reason beside them.
CORE_FOLDERS = ["decisions", "policy", "replay"]
NOT_CORE = {
    "policy.options",  # checks that a checkpointer or store option is a LangGraph one
    "replay.result_codec",  # encodes LangChain values (messages, Commands) for the store
    "replay.safe_decode",  # reads LangGraph's msgpack format with its strict allow-list
}
CORE = [
    *sorted(
        f"{folder}.{path.stem}"
        for folder in CORE_FOLDERS
        for path in (PACKAGE / folder).glob("*.py")
        if path.stem != "__init__" and f"{folder}.{path.stem}" not in NOT_CORE
    ),
    # Dotted names are modules of a subpackage (`records.model` is records/model.py).
    "records.envelope",
    "records.model",
    "records.integrity",
    "records.engine",
    "records.files",
]


def _module_name(path: Path) -> str:
    parts = [ROOT, *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_module(name: str) -> bool:
    parts = name.split(".")
    if parts[0] != ROOT:
        return False
    path = PACKAGE.joinpath(*parts[1:])
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _runtime_imports(tree: ast.AST) -> list[str]:
    """Modules imported at run time (module level or inside functions), not for typing."""
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import submodule` depends on the submodule; a parent package is
            # imported by every submodule import and is not an edge of its own.
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            submodules = [name for name in names if _is_module(name)]
            found.extend(submodules if len(submodules) == len(names) else [node.module])
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported = _runtime_imports(ast.parse(path.read_text()))
        graph[name] = {target for target in imported if target in modules and target != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            connect(node)
    return found


# Allowed on purpose (ARCHITECTURE.md): guard.middleware() and middleware.guard are both
# public, so the two facade classes reach each other. Any other cycle, or a bigger one, fails.
KNOWN_CYCLES = [
    [f"{ROOT}.guard", f"{ROOT}.integrations.middleware"],
]


def test_no_import_cycles_beyond_the_allowed_one():
    assert [cycle for cycle in _cycles(_graph()) if cycle not in KNOWN_CYCLES] == []


@pytest.mark.parametrize("module", CORE)
def test_core_module_imports_no_framework(module):
    path = PACKAGE.joinpath(*module.split(".")).with_suffix(".py")
    imported = _runtime_imports(ast.parse(path.read_text()))
    frameworks = [
        m for m in imported if m.split(".")[0] in {"langchain", "langchain_core", "langgraph"}
    ]
    assert frameworks == [], f"{module} imports {frameworks}"
