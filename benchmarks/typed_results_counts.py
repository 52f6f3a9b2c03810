"""Issue 29 item 1's four counts, measured on the source with `ast` (not grep), plus the effect types and the JSON
converters.

    python benchmarks/typed_results_counts.py [--src src/brownformer] [--list COUNT] [--by-file COUNT]

- dict_returns: functions under stats/ whose return annotation is a dict: ``dict``, ``Dict``, ``Mapping`` or
  ``MutableMapping``, bare or subscripted, plain or through their module (``typing.Mapping``), alone, in ``X | None``,
  ``Optional[...]``, ``Union[...]`` or ``Annotated[...]``, or a module-level alias of one (``Table = dict[str, X]``,
  ``X: TypeAlias = ...``, ``from typing import Dict as X``; also imported from another module); ``to_dict`` itself
  not counted.
- round_trips: a parse (``parse_*`` or ``*.from_dict``) whose argument is a conversion to JSON (``to_jsonable(...)``
  or ``.to_dict()``), or whose result is converted back (``parse_*(...).to_dict()``), anywhere in the package.
- string_key_lookups: ``x["key"]`` read (a subscript by a string constant, load context) and ``x.get("key")`` calls
  under stats/ and stats_stage/.
- dict_fields: annotated class fields under statsfile/ whose annotation names a dict anywhere (the names and
  aliases of dict_returns; ``list[dict]`` counts too).
- effect_types: classes named TestResult, EffectEstimate, Estimate (the three before) or EffectResult (the one after);
  json_converters: functions with "json" in their name that are no reader or writer (``to_jsonable``,
  ``_json_float``, ``json_number``).
"""
from __future__ import annotations

import argparse
import ast
from collections import Counter
from pathlib import Path

DICT_NAMES = {"dict", "Dict", "Mapping", "MutableMapping"}
EFFECT_TYPE_NAMES = {"TestResult", "EffectEstimate", "Estimate", "EffectResult"}


def _modules(root: Path, *subdirs: str):
    for sub in subdirs:
        base = root / sub
        files = [base] if base.suffix == ".py" else sorted(base.rglob("*.py"))
        for path in files:
            yield path, ast.parse(path.read_text(), filename=str(path))


def _name_of(node: ast.AST) -> str | None:
    """The name an annotation part refers to: `dict`, or the last part of `typing.Mapping`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _names_dict(node: ast.AST | None, *, root_only: bool, aliases: frozenset[str] = frozenset()) -> bool:
    """Whether an annotation is a dict (root_only: the annotation itself, one side of `X | None`, or one member of
    `Optional[...]`/`Union[...]`/the first of `Annotated[...]`), or mentions one anywhere. A dict is one of DICT_NAMES,
    bare or subscripted (`dict[str, X]`, `Mapping[...]`), spelt plainly or through its module (`typing.Dict`), or
    one of `aliases` (module-level aliases of them, `_dict_aliases`)."""
    if node is None:
        return False
    names = DICT_NAMES | aliases
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return False
    if not root_only:
        return any(_name_of(n) in names for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute)))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _names_dict(node.left, root_only=True, aliases=aliases) \
            or _names_dict(node.right, root_only=True, aliases=aliases)
    if isinstance(node, ast.Subscript):
        members = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        wrapper = _name_of(node.value)
        if wrapper in ("Optional", "Union"):
            return any(_names_dict(m, root_only=True, aliases=aliases) for m in members)
        if wrapper == "Annotated":
            return _names_dict(members[0], root_only=True, aliases=aliases)
        node = node.value
    return _name_of(node) in names


def _module_aliases(tree: ast.Module, known: frozenset[str]) -> set[str]:
    """Names that a module binds at its top level to a dict type: `X = dict[str, float]`, `X: TypeAlias = Mapping`,
    `type X = ...` (Python 3.12), `from typing import Dict as X`; `known`: aliases found so far (alias of alias)."""
    out = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and not isinstance(stmt.value, ast.Constant) \
                and _names_dict(stmt.value, root_only=True, aliases=known | out):
            out.add(stmt.targets[0].id)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                and _name_of(stmt.annotation) == "TypeAlias" \
                and _names_dict(stmt.value, root_only=True, aliases=known | out):
            out.add(stmt.target.id)
        elif type(stmt).__name__ == "TypeAlias" and _names_dict(stmt.value, root_only=True, aliases=known | out):
            out.add(stmt.name.id)
        elif isinstance(stmt, ast.ImportFrom):
            out |= {a.asname for a in stmt.names if a.asname and a.name in DICT_NAMES}
    return out


def _dict_aliases(root: Path) -> dict[Path, frozenset[str]]:
    """Per module of the package, the dict aliases it can use: its own and those it imports by name from another
    module (found over every module, to a fixed point for aliases of aliases)."""
    trees = dict(_modules(root, "."))
    aliases: set[str] = set()
    while True:
        found = set().union(*(_module_aliases(t, frozenset(aliases)) for t in trees.values()))
        if found <= aliases:
            break
        aliases |= found
    out = {}
    for path, tree in trees.items():
        own = _module_aliases(tree, frozenset(aliases))
        imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        out[path] = frozenset(own | (imported & aliases))
    return out


def dict_returns(root: Path) -> list[str]:
    out = []
    aliases = _dict_aliases(root)
    for path, tree in _modules(root, "stats"):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "to_dict" \
                    and _names_dict(node.returns, root_only=True, aliases=aliases.get(path, frozenset())):
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    return out


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return None


def _is_parse(node: ast.AST) -> bool:
    name = _call_name(node)
    return bool(name) and (name.startswith("parse_") or name == "from_dict")


def _is_conversion(node: ast.AST) -> bool:
    name = _call_name(node)
    return name in ("to_jsonable", "to_dict") or bool(name and name.endswith("_jsonable"))


def round_trips(root: Path) -> list[str]:
    out = []
    for path, tree in _modules(root, "."):
        for node in ast.walk(tree):
            if not _is_parse(node):
                continue
            converted_in = any(_is_conversion(a) for a in [*node.args, *(k.value for k in node.keywords)])
            if converted_in:
                out.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(node)[:80]}")
        for node in ast.walk(tree):  # parse_*(...).to_dict()
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to_dict" \
                    and _is_parse(node.func.value) \
                    and not any(_is_conversion(a) for a in node.func.value.args):  # counted above already
                out.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(node)[:80]}")
    return out


def string_key_lookups(root: Path) -> list[str]:
    out = []
    for path, tree in _modules(root, "stats", "stats_stage"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                    and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                out.append(f"{path.relative_to(root)}:{node.lineno}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


def dict_fields(root: Path) -> list[str]:
    out = []
    aliases = _dict_aliases(root)
    for path, tree in _modules(root, "statsfile"):
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                        and not stmt.target.id.startswith("_") \
                        and _names_dict(stmt.annotation, root_only=False, aliases=aliases.get(path, frozenset())):
                    out.append(f"{path.relative_to(root)}:{stmt.lineno} {cls.name}.{stmt.target.id}")
    return out


def effect_types(root: Path) -> list[str]:
    out = []
    for path, tree in _modules(root, "."):
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in EFFECT_TYPE_NAMES:
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    return out


def json_converters(root: Path) -> list[str]:
    out = []
    for path, tree in _modules(root, "."):
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and "json" in node.name \
                    and not node.name.startswith(("read_", "write_", "_read", "_write")):
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    return out


COUNTS = {"dict_returns": dict_returns, "round_trips": round_trips, "string_key_lookups": string_key_lookups,
          "dict_fields": dict_fields, "effect_types": effect_types, "json_converters": json_converters}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src" / "brownformer"))
    ap.add_argument("--list", action="append", default=[], choices=sorted(COUNTS), help="print the hits of a count")
    ap.add_argument("--by-file", action="append", default=[], choices=sorted(COUNTS),
                    help="print a count's hits per file, most first")
    args = ap.parse_args()
    root = Path(args.src)
    for name, count in COUNTS.items():
        hits = count(root)
        print(f"{name}: {len(hits)}")
        if name in args.list:
            print("\n".join(f"  {h}" for h in hits))
        if name in args.by_file:
            for path, n in Counter(h.split(":")[0] for h in hits).most_common():
                print(f"  {n:5d}  {path}")


if __name__ == "__main__":
    main()
