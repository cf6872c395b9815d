"""A module of `gpu_platform/` whose docstring says what it may import (``May import `a/b.py`,
`c.py`, `d/`.``) imports nothing else of `gpu_platform/`: its imports, read from the source as the
import-graph check reads them (module-level and inside functions), are each a named module, a
module of a named package (`d/`), or, when the sentence names none of its own package's modules,
a module of its own package. A name without a folder (`c.py`) is in the folder of the last one
named with a folder, else in the module's own package; `dcgm_*` matches by pattern; the module's
own package itself is always allowed (a compiled extension is imported from it). Only
modules are checked (a package's docstring speaks for its modules in broader words).
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

from tests.house.test_import_graph import ROOT, _graph, _modules

_SENTENCE = re.compile(r"May import (.*?)(?:\.\s*$|\.\s+[A-Z(]|\Z)", re.S | re.M)


def _allowed(text: str, own_package: str) -> list[str]:
    """The dotted names (or patterns) the sentence allows; a package allows its modules."""
    out: list[str] = []
    last_dir: str | None = None
    for token in re.findall(r"`([^`]+)`", text):
        token = token.strip()
        if token.endswith("/"):
            out.append("gpu_platform." + token.rstrip("/").replace("/", "."))
            continue
        if "/" in token:
            last_dir, _, leaf = token.rpartition("/")
            out.append(f"gpu_platform.{last_dir.replace('/', '.')}.{leaf.removesuffix('.py')}")
            continue
        base = "gpu_platform." + last_dir.replace("/", ".") if last_dir else own_package
        out.append(f"{base}.{token.removesuffix('.py')}")
    return out


def _covered(dep: str, allowed: list[str]) -> bool:
    return any(dep == a or dep.startswith(a + ".") or fnmatch.fnmatchcase(dep, a) for a in allowed)


def _stray_imports(name: str, doc: str, deps: set[str]) -> list[str] | None:
    """The imports of module `name` its docstring does not allow; None: it states nothing."""
    found = _SENTENCE.search(doc)
    if found is None:
        return None
    own = name.rpartition(".")[0]
    allowed = _allowed(found.group(1), own)
    names_own = any(a.startswith(own + ".") for a in allowed)
    stray = []
    for dep in sorted(deps):
        if not dep.startswith("gpu_platform.") or dep == own or _covered(dep, allowed):
            continue  # `own`: its package itself (where a compiled extension module is found)
        if dep.startswith(own + ".") and not names_own:
            continue  # the sentence speaks of other packages only
        stray.append(dep)
    return stray


def test_modules_import_only_what_their_docstring_allows():
    graph = _graph()
    checked, problems = 0, []
    for name, path in sorted(_modules().items()):
        if not name.startswith("gpu_platform.") or path.name == "__init__.py":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""
        stray = _stray_imports(name, doc, graph[name])
        if stray is None:
            continue
        checked += 1
        if stray:
            problems.append(f"{path.relative_to(ROOT)} imports {', '.join(stray)}, which its docstring does not allow")
    assert checked >= 20  # the modules split by job state theirs
    assert not problems, "\n".join(problems)


def test_the_check_reads_the_sentence_as_written():
    doc = "Reads things.\n\nMay import `admission/model.py`, `quota.py`, `devices/` and the `dcgm_*` modules.\n"
    name = "gpu_platform.admission.cycle"
    ok = {"gpu_platform.admission.model", "gpu_platform.admission.quota", "gpu_platform.devices.sharing",
          "gpu_platform.admission.dcgm_x"}
    assert _stray_imports(name, doc, ok) == []
    assert _stray_imports(name, doc, ok | {"gpu_platform.admission.tas", "gpu_platform.policy"}) == [
        "gpu_platform.admission.tas", "gpu_platform.policy"]
    # naming only other packages leaves the module's own package free
    assert _stray_imports("gpu_platform.x.y", "May import `policy/`.", {"gpu_platform.x.z"}) == []
    assert _stray_imports("gpu_platform.x.y", "No sentence here.", {"gpu_platform.policy"}) is None
    assert Path(ROOT, "gpu_platform").is_dir()
