"""No import circle between modules or between packages of `gpu_platform/`, `resources/` and
`assets/`: the code's imports, read from its source (module-level and inside functions alike; only
`if TYPE_CHECKING:` blocks are left out, they run for type checkers alone), form a graph with no
cycle, at module grain and at package grain (a module counts for its package; `gpu_platform.cli`,
`gpu_platform.finops.feeds`, ... are packages; a flat module at the root of `gpu_platform/` is its
own package). A cycle found is named in full, so the failure says which import to move down.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = ("gpu_platform", "resources", "assets")


def _modules() -> dict[str, Path]:
    out = {}
    for top in TOP:
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()

    def resolve(target: str) -> str | None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if (m := resolve(alias.name)) is not None:
                        found.add(m)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    pkg = name if is_pkg else name.rpartition(".")[0]
                    for _ in range(child.level - 1):
                        pkg = pkg.rpartition(".")[0]
                    base = f"{pkg}.{base}" if base else pkg
                for alias in child.names:
                    # `from pkg import mod` imports the module pkg.mod when there is one
                    m = resolve(f"{base}.{alias.name}") if f"{base}.{alias.name}" in known else resolve(base)
                    if m is not None:
                        found.add(m)
            visit(child)

    visit(tree)
    found.discard(name)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {name: _imports(name, path, known) for name, path in mods.items()}


def _package(name: str, packages: set[str]) -> str:
    while name not in packages and "." in name:
        name = name.rpartition(".")[0]
    return name


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one node (Tarjan), each as one cycle path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(_path(graph, sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def _path(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """One cycle through the component's first node (breadth-first back to it)."""
    members, start = set(comp), comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def test_no_module_imports_itself_back():
    cycles = _cycles(_graph())
    assert not cycles, "import circles between modules:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_package_imports_itself_back():
    graph = _graph()
    packages = {n for n, p in _modules().items() if p.name == "__init__.py"}
    # a flat module at the root of a top package (gpu_platform/paths.py) is its own room
    pkg_graph: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        a = _package(mod, packages)
        for dep in deps:
            b = _package(dep, packages)
            if a != b and not a.startswith(b + ".") and not b.startswith(a + "."):
                pkg_graph.setdefault(a, set()).add(b)
            pkg_graph.setdefault(b, set())
    cycles = _cycles(pkg_graph)
    assert not cycles, "import circles between packages:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_check_finds_a_planted_circle():
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}}
    assert _cycles(graph) == [["a.x", "a.y", "a.z", "a.x"]]
