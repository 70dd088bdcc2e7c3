"""The shape of the house, checked from the source: the core never reaches into the CLI, and no two modules import
each other in a circle. Every import counts, including the lazy ones inside functions, since a lazy import is still
a dependency (it only moves the moment it bites)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "reef_cli"
ENTRY_POINTS = {"reef_cli.__main__"}  # `python -m reef_cli` is the console script by another name


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every reef_cli module `name` imports, anywhere in its body (`from . import x` names the submodule x, not the
    package around it)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    typing_only = {id(n) for block in ast.walk(tree) if _is_type_checking(block) for n in ast.walk(block)}
    for node in ast.walk(tree):
        if id(node) in typing_only:  # `if TYPE_CHECKING:` never runs: annotations only
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                # `from . import sub` needs the package only as a namespace; an attribute needs its __init__
                found.add(sub if sub in known else module)
    return {m for m in found if m in known and m != name}


def _is_type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    """Parsed once per process (~0.5 s of CPU each time, four tests read it); frozen so no test can change it for
    the next."""
    mods = _modules()
    return {name: frozenset(_imports(name, path, set(mods))) for name, path in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_graph_sees_lazy_and_relative_imports():
    graph = _graph()
    assert "reef_cli.cli.hot" in graph["reef_cli.cli.entry"]
    assert "reef_cli.cli.main" in graph["reef_cli.cli.entry"]  # imported inside main()
    assert "reef_cli.runs" in graph["reef_cli.cli.hot"]  # imported inside record_run()
    assert "reef_cli.ci" in graph["reef_cli.cli.gate_cmds"]


def test_no_core_module_imports_the_cli():
    offenders = {name: sorted(d for d in deps if d == "reef_cli.cli" or d.startswith("reef_cli.cli."))
                 for name, deps in _graph().items()
                 if not name.startswith("reef_cli.cli") and name not in ENTRY_POINTS}
    assert not {k: v for k, v in offenders.items() if v}, "core modules import reef_cli.cli"


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_hot_path_and_the_error_boundary_do_not_import_typer():
    graph = _graph()
    for name in ("reef_cli.cli.hot", "reef_cli.cli.boundary", "reef_cli.cli.entry", "reef_cli.ci"):
        text = _modules()[name].read_text(encoding="utf-8")
        assert "import typer" not in text and "from typer" not in text and "rich" not in text, name
    assert "reef_cli.cli.main" not in graph["reef_cli.cli.hot"]
