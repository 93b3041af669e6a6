"""The library's layout (issue 48): imports point one way (no circle among the modules, and no import inside a function
that would close one at module level), no file runs far past ~450 lines and no function body past 80.

Each check reads the source with ``ast`` (nothing is imported). Negative controls: each check is also run on a small
made-up package that breaks it, and must find the break."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "specdec"
MAX_FILE_LINES = 460  # "~450": a file may run a few lines past it, not a role's worth
MAX_BODY_LINES = 80  # a function's body, its docstring excluded


def modules(root: Path) -> dict[str, Path]:
    """``{dotted name: path}`` of every module under ``root`` (a package ``__init__`` as the package's name)."""
    out = {}
    for p in root.rglob("*.py"):
        parts = p.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def _target(mods: dict[str, Path], node: ast.ImportFrom, alias: ast.alias) -> str | None:
    """The module an ``from X import Y`` names (``X.Y`` when it is a module, else ``X``), if it is one of ``mods``."""
    name = f"{node.module}.{alias.name}"
    if name not in mods:
        name = node.module or ""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _imports(mods: dict[str, Path], body: list[ast.stmt], top: str) -> set[str]:
    out = set()
    for node in body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == top:
            out |= {t for a in node.names if (t := _target(mods, node, a))}
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """Each module's module-level imports of the package (``if`` blocks, e.g. ``TYPE_CHECKING``, left out)."""
    mods = modules(root)
    return {n: _imports(mods, ast.parse(p.read_text()).body, root.name) - {n} for n, p in mods.items()}


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        v = todo.pop()
        if v == goal:
            return True
        if v not in seen:
            seen.add(v)
            todo.extend(graph.get(v, ()))
    return False


def circles(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Module-level imports ``(a, b)`` that lie on a circle (``b`` imports its way back to ``a``)."""
    return sorted((a, b) for a, deps in graph.items() for b in deps if _reaches(graph, b, a))


def dodges(root: Path, graph: dict[str, set[str]]) -> list[tuple[str, str, str]]:
    """Imports inside functions ``(module, imported, function)`` that would close a circle at module level."""
    mods, out = modules(root), []
    for name, path in mods.items():
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = [n for n in ast.walk(fn) if isinstance(n, ast.ImportFrom)]
                out += [(name, dep, fn.name) for dep in _imports(mods, inner, root.name) if _reaches(graph, dep, name)]
    return sorted(set(out))


def long_files(root: Path, limit: int = MAX_FILE_LINES) -> list[tuple[str, int]]:
    sizes = ((str(p.relative_to(root.parent)), len(p.read_text().splitlines())) for p in root.rglob("*.py"))
    return [(p, n) for p, n in sizes if n > limit]


def long_functions(root: Path, limit: int = MAX_BODY_LINES) -> list[tuple[str, str, int]]:
    """Functions whose body (docstring excluded) runs past ``limit`` lines."""
    out = []
    for p in root.rglob("*.py"):
        for fn in ast.walk(ast.parse(p.read_text())):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                body = fn.body
                doc = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and len(body) > 1
                first = body[1] if doc else body[0]
                n = fn.end_lineno - first.lineno + 1
                if n > limit:
                    out.append((str(p.relative_to(root.parent)), fn.name, n))
    return out


def test_imports_point_one_way() -> None:
    graph = import_graph(ROOT)
    assert len(graph) > 100  # the whole package was read
    assert circles(graph) == []
    assert dodges(ROOT, graph) == []


def test_no_long_files_or_functions() -> None:
    assert long_files(ROOT) == []
    assert long_functions(ROOT) == []


@pytest.fixture
def broken_package(tmp_path: Path) -> Path:
    """``pkg``: ``a`` and ``b`` import each other at module level, ``c`` imports ``d`` inside a function while ``d``
    imports ``c`` at module level, and ``long`` has a file and a function past the limits."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import B\nA = 1\n")
    (pkg / "b.py").write_text("from pkg.a import A\nB = 2\n")
    (pkg / "c.py").write_text("def f():\n    from pkg.d import D\n    return D\n")
    (pkg / "d.py").write_text("from pkg import c\nD = 3\n")
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_BODY_LINES + 1))
    (pkg / "long.py").write_text('def f():\n    """doc"""\n' + body + "\n" * MAX_FILE_LINES)
    return pkg


def test_the_layout_checks_find_what_they_look_for(broken_package: Path) -> None:
    graph = import_graph(broken_package)
    assert circles(graph) == [("pkg.a", "pkg.b"), ("pkg.b", "pkg.a")]
    assert dodges(broken_package, graph) == [("pkg.c", "pkg.d", "f")]
    assert [p for p, _ in long_files(broken_package)] == ["pkg/long.py"]
    assert long_functions(broken_package) == [("pkg/long.py", "f", MAX_BODY_LINES + 1)]
