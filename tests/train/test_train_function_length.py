"""Every function of the training modules (src/brownformer/train*.py) fits on a screen: at most 60 lines."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "brownformer"
MAX_FUNCTION_LINES = 60


def _function_lengths(path: Path) -> dict[str, int]:
    """Qualified name -> lines from `def` to the last line of the body (docstring included), methods and nested
    functions too."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lengths[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(), filename=str(path)), "")
    return lengths


def test_measure_sees_functions_methods_and_nested_functions(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    return 1\n\n\nclass C:\n    def g(self):\n        def h():\n"
                      "            pass\n        return h\n")
    assert _function_lengths(source) == {"f": 2, "C.g": 4, "C.g.h": 2}


def test_every_training_function_is_at_most_60_lines():
    files = sorted(PACKAGE.glob("train*.py"))
    assert {p.name for p in files} >= {"train.py", "train_step.py"}
    lengths = {f"{p.name}:{name}": n for p in files for name, n in _function_lengths(p).items()}
    assert "train.py:train_plan" in lengths and "train.py:_train_steps" in lengths
    too_long = {name: n for name, n in lengths.items() if n > MAX_FUNCTION_LINES}
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines (split them by step): {too_long}"
