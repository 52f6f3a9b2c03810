"""No module uses another module's private names (the rule that replaced the line cap; docs/STYLE.md sec. 1).

A *private name* starts with one underscore (``_x``; dunders such as ``__init__`` are public protocol).
Checked statically over every module of ``src/brownformer`` and ``benchmarks``:

1. ``from M import _x`` (or ``import M._x``) is allowed only when ``M._x`` is a private **module** of package
   ``M`` and the importing module belongs to that package (a package's own private modules, imported by it).
   Importing a private function, class or constant from anywhere is a violation, and so is importing anything
   from a private module ``P._m`` in a module of ``src`` outside package ``P``. Benchmarks, like tests, may import
   public names of private modules: they time and check the parts (the attribute rule below holds for them).
2. An attribute access ``expr._x`` is allowed when ``expr`` is ``self``, ``cls`` or ``super()``; when the name
   ``_x`` is defined in the accessing module itself (a function, class or assignment of that name, or an
   assignment to ``self._x``: a module's hooks may call its own class's private methods); or when ``expr`` is
   rooted in an imported third-party module (``torch._foreach_add``: that library's API, not this project's).
   Every other ``expr._x`` reaches into an object another module owns: a violation (``opt._stats`` in a helper
   module, ``overhead._median_row`` on an imported benchmark).

The rule is by name, so it cannot see types: a module that defines ``_x`` itself may also access an unrelated
object's ``_x``. ``KNOWN`` lists the violations in code owned by other work when this rule was written (module
file name, name); the test fails when a new one appears and when a listed one is gone (so the list only shrinks).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = (ROOT / "src" / "brownformer", ROOT / "benchmarks")
# (module file name, private name) of violations outside the K-FAC work, to be removed by their owners
KNOWN = {
    ("device.py", "_split"),
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _package_of(path: Path, tree_root: Path) -> tuple[str, ...]:
    """Dotted package of a module file, relative to the folder above its tree (``("brownformer", "optim")``)."""
    return path.relative_to(tree_root.parent).parent.parts


def _defined_here(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {n for n in names if _private(n)}


def _third_party_names(tree: ast.Module, own_top: set[str]) -> set[str]:
    """Names bound by imports of modules outside this project (``torch``, ``np``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in own_top:
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] not in own_top:
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _root(expr: ast.expr) -> ast.expr:
    while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Call)):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return expr


def _resolve(node: ast.ImportFrom, package: tuple[str, ...]) -> tuple[str, ...]:
    if node.level == 0:
        return tuple(node.module.split("."))
    base = package[: len(package) - node.level + 1]
    return base + (tuple(node.module.split(".")) if node.module else ())


def _is_private_module(parts: tuple[str, ...], tree_root: Path) -> bool:
    where = tree_root.parent.joinpath(*parts)
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def violations(path: Path, tree_root: Path) -> list[tuple[int, str, str]]:
    """``(line, private name, what)`` for every use of another module's private name in ``path``."""
    tree = ast.parse(path.read_text())
    package = _package_of(path, tree_root)
    own_top = {tree_root.name} | {p.stem for p in tree_root.glob("*.py")}
    local, third_party = _defined_here(tree), _third_party_names(tree, own_top)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _resolve(node, package)
            hidden = [i for i, part in enumerate(source) if _private(part)]
            if hidden and tree_root.name == "brownformer" and package[: hidden[0]] != source[: hidden[0]]:
                out.append((node.lineno, source[hidden[0]], f"from {'.'.join(source)} import ..."))
            for alias in node.names:
                if not _private(alias.name):
                    continue
                own_module = source == package and _is_private_module(source + (alias.name,), tree_root)
                if not own_module:
                    out.append((node.lineno, alias.name, f"from {'.'.join(source)} import {alias.name}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = tuple(alias.name.split("."))
                hidden = [p for p in parts if _private(p)]
                if hidden and parts[0] in own_top and parts[:-1] != package:
                    out.append((node.lineno, hidden[0], f"import {alias.name}"))
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
                continue
            root = _root(base)
            if node.attr in local or (isinstance(root, ast.Name) and root.id in third_party):
                continue
            out.append((node.lineno, node.attr, ast.unparse(node)))
    return out


def _all_violations() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for tree_root in TREES:
        for path in sorted(tree_root.rglob("*.py")):
            for line, name, what in violations(path, tree_root):
                found.setdefault((path.name, name), []).append(f"{path.relative_to(ROOT)}:{line}: {what}")
    return found


def test_no_module_uses_another_modules_private_names():
    found = _all_violations()
    new = {key: where for key, where in found.items() if key not in KNOWN}
    assert not new, "private names used outside their module:\n  " + "\n  ".join(w for ws in new.values() for w in ws)
    gone = KNOWN - set(found)
    assert not gone, f"fixed, so remove from KNOWN: {sorted(gone)}"


def test_the_rule_catches_planted_violations(tmp_path):
    """Positive control: a planted package with each kind of violation, and the allowed forms beside them."""
    pkg = tmp_path / "brownformer" / "optim"
    pkg.mkdir(parents=True)
    (tmp_path / "brownformer" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "_helper.py").write_text("def _hidden():\n    pass\ndef shown():\n    pass\n")
    (pkg / "owner.py").write_text(
        "import torch\n"
        "from brownformer.optim import _helper\n"          # allowed: the package's own private module
        "from brownformer.optim._helper import shown\n"    # allowed: a public name of it
        "from brownformer.optim._helper import _hidden\n"  # violation 1: a private function
        "class Box:\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "    def peek(self, other):\n"
        "        return other._mine, self._mine, torch._foreach_add\n"  # allowed: own name, self, third party
        "def reach(opt):\n"
        "    return opt._stats\n")                          # violation 2: another object's private state
    (tmp_path / "brownformer" / "train.py").write_text(
        "from brownformer.optim import _helper\n"           # violation 3: another package's private module
        "import brownformer.optim._helper\n"                # violation 4: the same, as an import
        "from brownformer.optim._helper import shown\n")    # violation 5: a name from it
    got = {(p.name, name) for p in (pkg / "owner.py", tmp_path / "brownformer" / "train.py")
           for _, name, _ in violations(p, tmp_path / "brownformer")}
    assert got == {("owner.py", "_hidden"), ("owner.py", "_stats"), ("train.py", "_helper")}, got
    assert len(violations(tmp_path / "brownformer" / "train.py", tmp_path / "brownformer")) == 3


if __name__ == "__main__":  # list every violation, known ones included
    for key, where in sorted(_all_violations().items()):
        print(("known " if key in KNOWN else "NEW   ") + "\n      ".join(where))
    sys.exit(0)
