"""brownformer.io.staged_folder: results take effect only when the block succeeds."""
import pytest

from brownformer.io import staged_folder


def _tree(root):
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def earlier(tmp_path):
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "a.txt").write_text("old a")
    (out / "keep.txt").write_text("old keep")
    (out / "sub" / "x.txt").write_text("old x")
    return out


def test_replace_mode_swaps_the_whole_folder(earlier):
    with staged_folder(earlier) as tmp:
        (tmp / "a.txt").write_text("new a")
    assert _tree(earlier) == {"a.txt": "new a"}
    assert sorted(p.name for p in earlier.parent.iterdir()) == ["out"]  # no staging or old folder left behind


def test_merge_mode_replaces_only_same_named_entries_and_moves_the_marker_last(earlier, monkeypatch):
    import os

    moved = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (moved.append(os.path.basename(b)), real_replace(a, b)))
    with staged_folder(earlier, merge=True, last="a.txt") as tmp:
        (tmp / "a.txt").write_text("new a")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "y.txt").write_text("new y")
    assert _tree(earlier) == {"a.txt": "new a", "keep.txt": "old keep", "sub/y.txt": "new y"}
    assert moved[-1] == "a.txt"


@pytest.mark.parametrize("merge", [False, True])
def test_a_failing_block_leaves_earlier_results_intact(earlier, merge):
    before = _tree(earlier)
    with pytest.raises(RuntimeError), staged_folder(earlier, merge=merge) as tmp:
        (tmp / "a.txt").write_text("half-written")
        raise RuntimeError("stage failed")
    assert _tree(earlier) == before
    assert sorted(p.name for p in earlier.parent.iterdir()) == ["out"]


def test_a_missing_output_folder_is_created(tmp_path):
    out = tmp_path / "deep" / "out"
    with staged_folder(out) as tmp:
        (tmp / "f").write_text("1")
    assert _tree(out) == {"f": "1"}


class _Record:
    def __init__(self, **fields):
        self.fields = fields

    def to_dict(self):
        return self.fields


class _DictWithView(dict):
    def to_dict(self):
        return {"view": True}


def test_to_jsonable_gives_plain_json_types_with_non_finite_as_none():
    import math
    from pathlib import Path

    import numpy as np

    from brownformer.io import to_jsonable
    nested = {"a": (1, 2.5, float("nan")), 3: [np.float32(0.5), np.int64(4), np.bool_(True), None, "s", Path("p")],
              "arr": np.array([[1.0, np.inf], [-np.inf, 2.0]]), "ints": np.arange(3, dtype=np.uint8),
              "flags": np.array([True, False]), "finite": np.array([0.1, 0.2], np.float32), "zero_d": np.array(1.5),
              "rec": _Record(x=np.array([np.nan]), y=(np.float64(math.inf),)), "sub": _DictWithView(hidden=1)}
    assert to_jsonable(nested) == {
        "a": [1, 2.5, None], "3": [0.5, 4, True, None, "s", "p"], "arr": [[1.0, None], [None, 2.0]],
        "ints": [0, 1, 2], "flags": [True, False], "finite": [float(np.float32(0.1)), float(np.float32(0.2))],
        "zero_d": 1.5, "rec": {"x": [None], "y": [None]}, "sub": {"view": True}}
    plain = to_jsonable(nested)
    kinds = set()

    def walk(v):
        kinds.add(type(v))
        for w in v.values() if isinstance(v, dict) else v if isinstance(v, list) else ():
            walk(w)
    walk(plain)
    assert kinds <= {dict, list, str, int, float, bool, type(None)}


def test_to_jsonable_writes_infinities_as_strings_only_when_asked():
    """infinity="string": "inf"/"-inf" at any depth (records, numpy arrays and scalars), NaN still null; an unknown
    form is an error."""
    import math

    import numpy as np
    import pytest

    from brownformer.io import to_jsonable
    values = {"x": [1.5, math.inf, -math.inf, math.nan], "arr": np.array([np.inf, 2.0]), "np": np.float64(-np.inf),
              "rec": _Record(x=(math.inf,), y=None)}
    assert to_jsonable(values, infinity="string") == {
        "x": [1.5, "inf", "-inf", None], "arr": ["inf", 2.0], "np": "-inf", "rec": {"x": ["inf"], "y": None}}
    assert to_jsonable(values) == {"x": [1.5, None, None, None], "arr": [None, 2.0], "np": None,
                                   "rec": {"x": [None], "y": None}}
    with pytest.raises(ValueError, match="infinity='text'"):
        to_jsonable([1.0], infinity="text")
