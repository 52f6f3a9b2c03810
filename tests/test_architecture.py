"""The package's shape: no import cycles, and the allowed-imports table of
docs/ARCHITECTURE.md (read from that file, so the document is the rule).

Imports are found by parsing every module with `ast` (imports inside functions and under
TYPE_CHECKING count: they are dependencies all the same). A module-level cycle is reported as
the chain of modules; a package-level cycle as the chain of packages, each edge with one import
that makes it.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "brownformer"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"


def _module_name(path: Path) -> str:
    parts = ("brownformer",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _unit(module: str) -> str:
    """The top-level package (or module) of brownformer that `module` belongs to; "__init__" for the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _imports(module: str) -> list[tuple[str, int]]:
    """(imported module, line) for every import in `module`, resolved to modules of brownformer or
    to external top-level names (e.g. "argparse")."""
    path = MODULES[module]
    package = module if _is_package(module) else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                # `from pkg import sub` imports the submodule when there is one, else a name of pkg
                full = f"{base}.{alias.name}"
                out.append((full if full in MODULES else base, node.lineno))
    return out


def _internal_target(name: str) -> str | None:
    """The brownformer module an imported dotted name refers to (longest existing prefix)."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        candidate = ".".join(parts[:k])
        if candidate in MODULES:
            return candidate
    return None


def _module_graph() -> nx.DiGraph:
    """Edges importer -> imported module, plus the package __init__s an import outside a package runs."""
    g = nx.DiGraph()
    g.add_nodes_from(MODULES)
    for module in MODULES:
        for name, line in _imports(module):
            target = _internal_target(name) if name.startswith("brownformer") else None
            if target is None or target == module:
                continue
            g.add_edge(module, target, line=line)
            # Importing a.b.c first runs a/__init__ and a/b/__init__; inside its own package a module
            # is already past that point, so only packages it is not part of add edges.
            parts = target.split(".")
            for k in range(2, len(parts)):
                parent = ".".join(parts[:k])
                if not (module == parent or module.startswith(parent + ".")) and parent != module:
                    g.add_edge(module, parent, line=line)
    return g


def _unit_graph(modules: nx.DiGraph) -> nx.DiGraph:
    g = nx.DiGraph()
    for a, b, data in modules.edges(data=True):
        ua, ub = _unit(a), _unit(b)
        if ua != ub and not g.has_edge(ua, ub):
            g.add_edge(ua, ub, example=f"{a}:{data['line']} imports {b}")
    return g


def _allowed_imports() -> dict[str, set[str]]:
    """The table between the allowed-imports markers of docs/ARCHITECTURE.md: package -> allowed names."""
    text = ARCHITECTURE.read_text()
    m = re.search(r"<!-- allowed-imports:start -->(.*?)<!-- allowed-imports:end -->", text, flags=re.S)
    assert m, f"{ARCHITECTURE} has no allowed-imports table between its markers"
    table = {}
    for line in m.group(1).strip().splitlines()[2:]:  # skip the header and the |---| row
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        package, allowed = cells[0].strip("`"), cells[1]
        table[package] = set(re.findall(r"`([^`]+)`", allowed))
    return table


def _cycle_text(g: nx.DiGraph, cycle: list[tuple]) -> str:
    return "\n  ".join(f"{a} -> {b}  ({g.edges[a, b].get('example') or 'line ' + str(g.edges[a, b]['line'])})"
                       for a, b, *_ in cycle)


@pytest.mark.parametrize("level", ["modules", "packages"])
def test_no_import_cycle(level):
    g = _module_graph() if level == "modules" else _unit_graph(_module_graph())
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        return
    pytest.fail(f"import cycle between {level}:\n  " + _cycle_text(g, cycle))


def test_every_package_is_in_the_allowed_imports_table():
    table = _allowed_imports()
    missing = sorted({_unit(m) for m in MODULES} - set(table))
    assert not missing, f"packages missing from the allowed-imports table of {ARCHITECTURE.name}: {missing}"
    unknown = sorted(a for allowed in table.values() for a in allowed
                     if a not in ("*", "argparse") and _internal_target("brownformer." + a) is None)
    assert not unknown, f"the allowed-imports table names what does not exist: {unknown}"


def _permitted(target: str, allowed: set[str]) -> bool:
    """Whether importing brownformer module `target` is covered by an allowed package or module."""
    if "*" in allowed:
        return True
    rel = target.removeprefix("brownformer.") if target != "brownformer" else "__init__"
    return any(rel == a or rel.startswith(a + ".") for a in allowed)


def test_imports_follow_the_allowed_imports_table():
    table = _allowed_imports()
    violations = []
    for module in MODULES:
        unit = _unit(module)
        allowed = table.get(unit, set())
        for name, line in _imports(module):
            if name.split(".")[0] == "argparse":
                if "argparse" not in allowed:
                    violations.append(f"{module}:{line} imports argparse (only the CLI may)")
                continue
            target = _internal_target(name) if name.startswith("brownformer") else None
            if target is None or _unit(target) == unit:
                continue
            if not _permitted(target, allowed):
                violations.append(f"{module}:{line} imports {target} ({unit} may import: "
                                  f"{', '.join(sorted(allowed)) or 'nothing'})")
    violations = list(dict.fromkeys(violations))  # `from x import a, b` is one violation, not two
    assert not violations, "imports the table in docs/ARCHITECTURE.md does not allow:\n  " + "\n  ".join(violations)


def test_the_checks_see_what_they_claim_to_see():
    """The parser finds imports inside functions, resolves relative imports, and finds a planted cycle."""
    imports = dict(_imports("brownformer.plots._traj"))
    assert "brownformer.stats.sphere.sphere_distance" in imports  # a function-level import in the figures' helpers
    assert "brownformer.cli" in dict(_imports("brownformer.__main__"))
    g = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "a")])
    assert {e[:2] for e in nx.find_cycle(g)} == {("a", "b"), ("b", "c"), ("c", "a")}
    assert _permitted("brownformer.optim.registry", {"optim.registry"})
    assert not _permitted("brownformer.optim.kfac", {"optim.registry"})


def test_no_two_modules_share_a_name():
    """A module's name points at one file: `plots/fig_<x>`, `report/section_<x>`, `stats/claims/claim<N>_<x>`."""
    by_name: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        if path.name not in ("__init__.py", "__main__.py"):
            by_name.setdefault(module.rpartition(".")[2], []).append(module)
    for module, path in MODULES.items():  # a package's name is a module name too
        if path.name == "__init__.py" and module != "brownformer":
            by_name.setdefault(module.rpartition(".")[2], []).append(module)
    shared = {name: mods for name, mods in by_name.items() if len(mods) > 1}
    assert not shared, f"module names used twice (rename one to say what it holds): {shared}"


#: what reads or writes a file: pathlib, and calls of these names (open(), np.load, pd.read_parquet, ...)
FILE_IO_CALLS = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "load", "save", "savez",
                 "read_parquet", "to_parquet", "read_csv", "to_csv", "read_json", "write_json", "atomic_path",
                 "mkdir", "exists", "glob", "sha256_file"}


def _file_io(module: str) -> list[str]:
    path = MODULES[module]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
            if "pathlib" in names:
                found.append(f"line {node.lineno}: imports pathlib")
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name in FILE_IO_CALLS:
                found.append(f"line {node.lineno}: calls {name}()")
    return found


def test_stats_is_pure():
    """stats/ holds functions of arrays, tables and typed results; every file is read and written in stats_stage."""
    impure = {m: found for m in MODULES if _unit(m) == "stats" and (found := _file_io(m))}
    assert not impure, f"file I/O in brownformer.stats (move it to brownformer.stats_stage): {impure}"
    assert _file_io("brownformer.stats_stage.trajectory_io"), "the check finds the stage's own file reads"
