"""K-FAC's settings table (optim/kfac_settings.py) is the one home of every setting: the constructor, the registry, the
config schema and the docs agree with it, and no other module under optim/ spells a setting's key or default."""
from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import jsonschema
import pytest
import torch.nn as nn
import yaml

from brownformer.config import SCHEMA_PATH
from brownformer.optim import kfac_settings as table
from brownformer.optim.kfac import KFAC
from brownformer.optim.registry import REGISTRY, default_momentum

ROOT = Path(__file__).resolve().parents[2]
OPTIM = ROOT / "src" / "brownformer" / "optim"
DOCS = ROOT / "docs" / "methods" / "kfac.md"
MAX_HOMES = 2  # kfac_settings.py and kfac.py
NOT_SETTINGS = ("self", "model", "params")  # the constructor's other arguments


def _outside(rule):
    """A value the rule must reject, built from the rule's own bounds or kind."""
    if isinstance(rule, table.Interval):
        if rule.low is not None:
            return rule.low if rule.low_open else rule.low - 1
        return 0.5 if rule.integer else "1"
    if isinstance(rule, table.OneOf):
        return "not-a-choice"
    if isinstance(rule, table.Flag):
        return "yes"
    if isinstance(rule, table.Optional):
        return _outside(rule.rule)
    return (0.5,)  # a pair of one


def _model():
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def test_the_constructor_signature_is_the_table():
    signature = inspect.signature(KFAC.__init__).parameters
    got = {name: p.default for name, p in signature.items() if name not in NOT_SETTINGS}
    want = dict(table.DEFAULTS)
    assert list(got) == [name for name in signature if name in want]
    assert got == want


@pytest.mark.parametrize("setting", table.SETTINGS, ids=lambda s: s.name)
def test_every_setting_is_checked_by_its_rule(setting):
    with pytest.raises(ValueError, match=rf"^{setting.name} must be "):
        KFAC(_model(), **{setting.name: _outside(setting.rule)})
    assert setting.rule.accepts(setting.default), "a default its own rule rejects"


def test_settings_are_stored_where_their_kind_says():
    opt = KFAC(_model(), factor_decay=0.5, damping=0.3, fisher="mc", factor_every=2.0)
    assert opt.factor_decay == 0.5 and opt.fisher == "sampled" and type(opt.factor_every) is int
    assert all(opt.param_groups[0][key] == table.DEFAULTS[key] for key in table.GROUP_SETTINGS if key != "damping")
    assert opt.param_groups[0]["damping"] == 0.3
    assert set(opt.state_dict()["kfac"]) >= set(table.OPTIMIZER_SETTINGS)


def test_an_unknown_setting_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown K-FAC setting.*factor_decy"):
        table.validate({"factor_decy": 0.9})


def test_registry_keys_and_replica_momentum_come_from_the_table():
    for name in ("kfac-eigen", "kfac-iterative"):
        assert REGISTRY[name].keys == table.CONFIG_KEYS
        assert default_momentum(name) == table.DEFAULTS["momentum"]


def test_the_config_schema_has_each_settings_rule_and_doc():
    """K-FAC-only keys: the schema's entry is the rule's fragment with the doc; keys shared with other optimizers
    (their fragment is theirs too) must at least admit the K-FAC default. Every rule's fragment is checked against
    the rule on the default and on a rejected value, so the fragment and the rule cannot drift apart."""
    properties = yaml.safe_load(SCHEMA_PATH.read_text())["$defs"]["optimizer_settings"]["properties"]
    for s in table.SETTINGS:
        fragment = s.rule.schema()
        default = list(s.default) if isinstance(s.default, tuple) else s.default
        jsonschema.validate(default, fragment)
        with pytest.raises(jsonschema.ValidationError):
            outside = _outside(s.rule)
            jsonschema.validate(list(outside) if isinstance(outside, tuple) else outside, fragment)
        if not s.config:
            assert s.name not in properties or s.name == "lr", s.name
            continue
        if s.shared:
            jsonschema.validate(default, properties[s.name])
            continue
        assert properties[s.name] == {**fragment, "description": "K-FAC: " + s.doc}, s.name


def test_the_docs_settings_table_is_the_rendered_table():
    text = DOCS.read_text()
    m = re.search(r"<!-- settings-table:start -->\n(.*?)\n<!-- settings-table:end -->", text, flags=re.S)
    assert m, f"{DOCS} has no settings table between its markers"
    assert m.group(1) == table.markdown_table(), "regenerate it with brownformer.optim.kfac_settings.markdown_table()"


def _homes(path: Path, names: set[str]) -> set[str]:
    """The setting names ``path`` spells as a string constant (a key, as registries, checks and persistence write
    them) or gives a default to (a keyword parameter with a default value)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and node.value in names:
            found.add(node.value)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            with_default = args.args[len(args.args) - len(args.defaults):] + \
                [a for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            found |= {a.arg for a in with_default if a.arg in names}
    return found


def test_every_setting_has_at_most_two_homes_under_optim():
    # group settings are param-group keys torch-wide; n_heads is also the model attribute _kfac_capture reads
    names = {s.name for s in table.SETTINGS if s.kind != "group"} - {"n_heads"}
    names |= {"damping", "kl_clip"}  # the K-FAC group settings
    homes: dict[str, list[str]] = {}
    for path in sorted(OPTIM.glob("*.py")):
        for name in _homes(path, names):
            homes.setdefault(name, []).append(path.name)
    crowded = {name: files for name, files in homes.items() if len(files) > MAX_HOMES}
    assert not crowded, f"settings spelled as a key or given a default in more than {MAX_HOMES} files: {crowded}"
    assert sorted(homes["factor_decay"]) == ["kfac.py", "kfac_settings.py"]


def test_the_homes_rule_sees_a_second_default():
    """Positive control: a helper giving ``factor_decay`` a default is a home."""
    probe = OPTIM.parent.parent.parent / "tests" / "optim" / "_planted_home.py"
    try:
        probe.write_text("def fold(x, *, factor_decay=0.95):\n    return x\nKEY = 'cg_tol'\n")
        assert _homes(probe, {"factor_decay", "cg_tol", "scope"}) == {"factor_decay", "cg_tol"}
    finally:
        probe.unlink()
