"""One home per default: no statistic, table, figure or report function restates a configured setting.

A setting of the config (`stats:`, `stats.window:`, `report:` in the schema) has its default in the schema only.
A function of stats/, results/, plots/ or report/ that takes such a setting (a parameter named as the key, or as
one of ALIASES) either requires it (the stage passes the typed config's value) or defaults to the one constant
read from the schema (brownformer.config.DEFAULT_STATS, DEFAULT_MARGINS). Two checks:
- in the source, such a parameter (or dataclass field) has no literal default (`n_resamples=9999`, `rng=0`,
  `margins={...}`): a literal restates the value even while it agrees with the schema;
- at run time, a default that names a constant equals the schema's value (a module constant `N = 499` used as
  `n_resamples=N` is a second home with another value). A setting that is deliberately not the configured one
  gets its own name (e.g. descriptive.tail_test's `n_surrogates`, markov's N_AGGREGATE_RESAMPLES).
"""
from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import brownformer
from brownformer.config import DEFAULT_MARGINS
from brownformer.config.checks import load_schema

SRC = Path(brownformer.__file__).parent
PACKAGES = ("stats", "results", "plots", "report")
_PROPS = load_schema()["properties"]
#: configured key -> its default in the schema (margins: the whole mapping); None: a key without a default
SCHEMA_DEFAULTS = {
    **{k: p.get("default") for k, p in _PROPS["stats"]["properties"].items()},
    **{k: p.get("default") for k, p in _PROPS["stats"]["properties"]["window"]["properties"].items()},
    **{k: p.get("default") for k, p in _PROPS["report"]["properties"].items()},
    "margins": DEFAULT_MARGINS,
}
#: parameter names that hold a configured setting under another name -> the key (None: no single value)
ALIASES = {"rng": "seed", "baseline": "target_optimizer", "replicates": "calibration_replicates",
           "n_replicates": "calibration_replicates", "margin": None}
CONFIGURED = set(SCHEMA_DEFAULTS) | set(ALIASES)
#: (module file, function) pairs owned by a change in flight (the calibration and window-reading modules are being
#: rewritten by another branch); each entry is a known restated default to remove when that branch lands
IN_FLIGHT: set[tuple[str, str]] = set()  # (module, function) exempt while another branch rewrites it


def _is_literal(node: ast.AST | None) -> bool:
    """A default written as a value (not None, not a name of a constant)."""
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return False
    try:
        ast.literal_eval(node)
        return True
    except ValueError:
        return False


def literal_defaults(source: str) -> list[tuple[str, str, str]]:
    """(function or class, parameter or field, default as written) for every configured name with a literal default."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            positional = a.posonlyargs + a.args
            pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults)) + list(
                zip(a.kwonlyargs, a.kw_defaults))
            found += [(node.name, arg.arg, ast.unparse(d)) for arg, d in pairs
                      if arg.arg in CONFIGURED and _is_literal(d)]
        elif isinstance(node, ast.ClassDef):  # dataclass fields
            found += [(node.name, s.target.id, ast.unparse(s.value)) for s in node.body
                      if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                      and s.target.id in CONFIGURED and _is_literal(s.value)]
    return found


def value_mismatches(fn) -> list[tuple[str, object, object]]:
    """(parameter, its default, the schema's) for every configured parameter whose default differs from the schema."""
    out = []
    for name, p in inspect.signature(fn).parameters.items():
        key = ALIASES.get(name, name)
        if name not in CONFIGURED or key is None or p.default in (inspect.Parameter.empty, None):
            continue
        want = SCHEMA_DEFAULTS.get(key)
        have = list(p.default) if isinstance(p.default, tuple) else p.default
        if want is not None and have != want:
            out.append((name, p.default, want))
    return out


def _modules():
    for pkg in PACKAGES:
        for path in sorted((SRC / pkg).rglob("*.py")):
            rel = path.relative_to(SRC).as_posix()
            yield rel, "brownformer." + rel[:-3].replace("/", ".").removesuffix(".__init__")


def test_no_statistic_restates_a_configured_default_as_a_literal():
    bad = [f"{rel}: {fn}({param}={default})" for rel, _ in _modules()
           for fn, param, default in literal_defaults((SRC / rel).read_text()) if (rel, fn) not in IN_FLIGHT]
    assert not bad, ("configured settings restated as literal defaults (require them, or default to "
                     "brownformer.config.DEFAULT_STATS / DEFAULT_MARGINS):\n" + "\n".join(bad))


def test_every_configured_default_a_function_names_is_the_schemas():
    bad = []
    for rel, name in _modules():
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if getattr(obj, "__module__", None) != name or (rel, attr) in IN_FLIGHT:
                continue
            fns = [(attr, obj)] if inspect.isfunction(obj) else [
                (f"{attr}.{m}", f) for m, f in vars(obj).items() if inspect.isfunction(f)] if inspect.isclass(obj) else []
            bad += [f"{rel}: {fn}({p}={have!r}), schema {want!r}" for fn, f in fns for p, have, want in value_mismatches(f)]
    assert not bad, "defaults of configured settings that differ from the schema's:\n" + "\n".join(bad)


def test_the_in_flight_exemptions_still_restate_something():
    """An exemption whose function no longer restates a default is stale: remove it (this keeps the list short)."""
    for rel, fn in IN_FLIGHT:
        found = [f for f, _, _ in literal_defaults((SRC / rel).read_text())]
        assert fn in found, f"{rel}: {fn} restates no configured default any more; drop it from IN_FLIGHT"


N_OTHER = 499  # a module constant standing in for a second home of n_resamples


@pytest.mark.parametrize("source,expected", [
    ("def f(x, *, n_resamples=9999, rng=0, alpha=None, confidence_level=DEFAULT_STATS.confidence_level): pass",
     [("f", "n_resamples", "9999"), ("f", "rng", "0")]),
    ("def f(z, margins={'hurst': (0.4, 0.6)}, margin=-0.5): pass",
     [("f", "margins", "{'hurst': (0.4, 0.6)}"), ("f", "margin", "-0.5")]),
    ("@dataclass\nclass R:\n    confidence_level: float = 0.95\n    other: float = 0.95", [("R", "confidence_level", "0.95")]),
    ("def f(n_surrogates=199, seed_text='a'): pass", []),
])
def test_the_source_check_finds_literals_and_only_them(source, expected):
    assert literal_defaults(source) == expected


def test_the_value_check_finds_a_second_home():
    from brownformer.config import DEFAULT_STATS

    def second_home(*, n_resamples=N_OTHER, confidence_level=DEFAULT_STATS.confidence_level, rng=None):
        pass

    assert value_mismatches(second_home) == [("n_resamples", N_OTHER, SCHEMA_DEFAULTS["n_resamples"])]


def test_the_contracts_result_default_level_is_the_schemas():
    """brownformer.statsfile sits below config (it imports nothing of the package), so its EffectResult states the
    confidence level once more; this keeps that copy equal to the schema's."""
    from brownformer.config import DEFAULT_STATS
    from brownformer.statsfile._results import _TEST_DEFAULTS

    level = _TEST_DEFAULTS["confidence_level"]  # what a test that names no level gets
    assert level == DEFAULT_STATS.confidence_level
