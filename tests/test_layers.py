"""The package's layout holds: stages import only earlier stages, nothing imports the package root, and no
module takes part in an import cycle (deferred imports included; `if TYPE_CHECKING:` imports are not
dependencies). The order lives in pyproject.toml's [tool.importlinter] layers contract."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("scellis_jupyter", exclude_type_checking_imports=True)


def test_layers_contract_is_kept():
    # in a fresh process: import-linter writes through the stdout it first saw, which a Pool's logging in an
    # earlier test can leave closed ("I/O operation on closed file")
    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}, no_cache=True, no_logo=True))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "1 kept, 0 broken" in out


def test_the_contract_names_every_stage():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    named = {m.strip().split(".")[1] for layer in conf["layers"] for m in layer.split("|")}
    pkg = ROOT / "scellis_jupyter"
    stages = {p.name for p in pkg.iterdir() if p.is_dir() and (p / "__init__.py").exists()} | \
             {p.stem for p in pkg.glob("*.py") if p.name != "__init__.py"}
    assert stages - named == set(), "every stage (package or top-level module) must have its place in the order"


def test_nothing_imports_the_package_root(graph):
    importers = sorted(graph.find_modules_that_directly_import("scellis_jupyter"))
    assert importers == [], f"these modules import the package root (import the stage instead): {importers}"


def test_no_import_cycles(graph):
    mods = sorted(graph.modules)
    edges = {m: {t for t in graph.find_modules_directly_imported_by(m) if t.startswith("scellis_jupyter")}
             for m in mods}
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):                       # Tarjan's strongly connected components, iterative-safe sizes here
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
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
            # a package importing its own submodules (re-exports in __init__) is not a cycle of concern
            # unless a submodule imports the package back: that shows up as a component of size > 1 too
            if len(comp) > 1:
                cycles.append(sorted(comp))
    for m in mods:
        if m not in index:
            visit(m)
    assert cycles == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)
