"""benchmarks/typed_results_counts.py: the dict counts on a tiny package whose answer is written out by hand, every
spelling of a dict (and of its aliases) counted once, every typed spelling not at all."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ALIASES = '''
from typing import Dict as D, Mapping, TypeAlias
Table = dict[str, float]
Nested: TypeAlias = "Table | None"
NotAnAlias = dict(a=1)
Word = "dict"
'''

STATS = '''
import typing
import collections.abc
from typing import Any, Dict, Mapping, MutableMapping, Optional, Union
from .aliases import Table, Nested

def a() -> dict: ...
def b() -> dict[str, int] | None: ...
def c() -> Mapping[str, int]: ...
def d() -> MutableMapping: ...
def e() -> Dict[str, int]: ...
def f() -> typing.Mapping[str, int]: ...
def g() -> collections.abc.MutableMapping: ...
def h() -> Optional[dict]: ...
def i() -> Union[int, Mapping]: ...
def j() -> Table: ...
def k() -> Nested: ...
def l() -> "dict[str, int]": ...
def to_dict(self) -> dict: ...
def typed() -> list[dict]: ...
def plain() -> int: ...
def record() -> "Record": ...
def anything() -> Any: ...
'''

FIELDS = '''
from dataclasses import dataclass
from typing import Mapping
from ..aliases import Table

@dataclass
class R:
    a: dict
    b: list[dict] | None
    c: Table
    d: "Mapping[str, int]"
    ok: list[int]
    _private: dict
'''


@pytest.fixture()
def counts(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import typed_results_counts

    (tmp_path / "stats").mkdir()
    (tmp_path / "statsfile").mkdir()
    (tmp_path / "aliases.py").write_text(ALIASES)
    (tmp_path / "stats" / "m.py").write_text(STATS)
    (tmp_path / "statsfile" / "f.py").write_text(FIELDS)
    return typed_results_counts, tmp_path


def test_every_spelling_of_a_dict_return_is_counted_and_nothing_else(counts):
    module, root = counts
    names = sorted(h.split()[-1] for h in module.dict_returns(root))
    assert names == list("abcdefghijkl")


def test_dict_fields_count_aliases_and_nested_dicts_but_not_private_or_typed_fields(counts):
    module, root = counts
    assert sorted(h.split(".")[-1] for h in module.dict_fields(root)) == ["a", "b", "c", "d"]
