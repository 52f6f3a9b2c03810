import json

import numpy as np
import pytest

from brownformer.stats_stage.trajectory_io import load_trajectory


def test_without_sidecar_defaults(tmp_path):
    X = np.random.default_rng(0).standard_normal((5, 4, 3)).astype(np.float32)
    np.save(tmp_path / "a.npy", X)
    Y, meta = load_trajectory(tmp_path / "a.npy")
    assert Y.dtype == np.float64 and Y.shape == (5, 4, 3)
    assert meta.kind == "euclidean" and meta.times == [0, 1, 2, 3, 4]
    assert len(meta.sha256) == 64 and not meta.has_sidecar


def test_sidecar_and_kind_override(tmp_path):
    X = np.random.default_rng(0).standard_normal((4, 4, 3))
    np.save(tmp_path / "b.npy", X)
    (tmp_path / "b.sidecar.json").write_text(json.dumps({"kind": "sphere", "time": "lr_sum", "times": [0, 0.1, 0.3, 0.7]}))
    _, meta = load_trajectory(tmp_path / "b.npy")
    assert meta.kind == "sphere" and meta.times[-1] == 0.7 and meta.time == "lr_sum"
    _, meta = load_trajectory(tmp_path / "b.npy", kind="euclidean")
    assert meta.kind == "euclidean"


@pytest.mark.parametrize("shape,fill,match", [
    ((5, 4), 0.0, "ndim"),
    ((2, 4, 3), 0.0, "at least 3 time"),
    ((5, 3, 3), 0.0, "at least 4 walkers"),
    ((5, 4, 3), np.nan, "non-finite"),
], ids=["ndim", "short", "one-walker", "nan"])
def test_bad_arrays_refused(tmp_path, shape, fill, match):
    X = np.ones(shape)
    if np.isnan(fill):
        X[0, 0, 0] = np.nan
    np.save(tmp_path / "c.npy", X)
    with pytest.raises(ValueError, match=match):
        load_trajectory(tmp_path / "c.npy")


def test_bad_times_refused(tmp_path):
    np.save(tmp_path / "d.npy", np.random.default_rng(0).standard_normal((4, 4, 2)))
    (tmp_path / "d.json").write_text(json.dumps({"kind": "euclidean", "times": [0, 2, 1, 3]}))
    with pytest.raises(ValueError, match="increasing"):
        load_trajectory(tmp_path / "d.npy")
    (tmp_path / "d.json").write_text(json.dumps({"times": [0, 1]}))
    with pytest.raises(ValueError, match="times"):
        load_trajectory(tmp_path / "d.npy")


def test_old_sidecar_name_is_read_with_a_warning_and_the_new_one_wins(tmp_path, caplog):
    """FILE.json (the old sidecar name) is still read, with a warning; FILE.sidecar.json takes precedence."""
    np.save(tmp_path / "c.npy", np.random.default_rng(1).standard_normal((4, 4, 3)))
    (tmp_path / "c.json").write_text(json.dumps({"kind": "sphere", "times": [0, 1, 2, 5]}))
    with caplog.at_level("WARNING"):
        _, meta = load_trajectory(tmp_path / "c.npy")
    assert meta.has_sidecar and meta.times[-1] == 5 and "old name" in caplog.text
    (tmp_path / "c.sidecar.json").write_text(json.dumps({"kind": "euclidean", "times": [0, 1, 2, 7]}))
    _, meta = load_trajectory(tmp_path / "c.npy")
    assert meta.kind == "euclidean" and meta.times[-1] == 7


def test_stats_trajectory_output_is_never_read_as_the_next_runs_sidecar(tmp_path):
    """`stats trajectory rw.npy --out rw.json` twice: the second run sees no sidecar and gives the first's result."""
    from brownformer.config import DEFAULT_STATS
    from brownformer.io import sidecar_path
    from brownformer.stats_stage.stages import stats_trajectory
    rw = tmp_path / "rw.npy"
    np.save(rw, np.cumsum(np.random.default_rng(2).standard_normal((20, 16, 2)), 0))
    first = stats_trajectory(rw, tmp_path / "rw.json", stats=DEFAULT_STATS)
    second = stats_trajectory(rw, tmp_path / "rw.json", stats=DEFAULT_STATS)
    assert sidecar_path(rw).name == "rw.sidecar.json" and not sidecar_path(rw).exists()
    assert not second["input"]["sidecar"] and second["verdict"] == first["verdict"]
    assert second["msd_exponent"] == first["msd_exponent"]


def test_sidecar_is_parsed_once_into_its_record(tmp_path):
    """The sidecar's keys become the record's attributes, its descriptive notes are kept as written, and a key no
    reader knows is named in the error (with the file) rather than silently ignored."""
    np.save(tmp_path / "e.npy", np.random.default_rng(2).standard_normal((4, 6, 3)))
    side = {"kind": "sphere", "time": "lr_sum", "times": [0, 1, 2, 3], "clocks": {"step": [0, 5, 10, 20]},
            "momentum": 0.9, "n_inputs": 2, "n_tokens": 3, "note": "a note for people", "radius": "unit"}
    (tmp_path / "e.sidecar.json").write_text(json.dumps(side))
    _, meta = load_trajectory(tmp_path / "e.npy")
    assert (meta.kind, meta.time, meta.momentum, meta.n_inputs, meta.n_tokens) == ("sphere", "lr_sum", 0.9, 2, 3)
    assert meta.step_clock(4) == [0, 5, 10, 20] and meta.step_clock(5) is None
    assert meta.described == {"note": "a note for people", "radius": "unit"} and meta.drift == "common"
    (tmp_path / "e.sidecar.json").write_text(json.dumps({**side, "n_tokenz": 3}))
    with pytest.raises(ValueError, match=r"e\.sidecar\.json.*n_tokenz"):
        load_trajectory(tmp_path / "e.npy")


def test_index_entries_are_parsed_once_and_recorded_as_written(tmp_path):
    """index.json's entries become IndexEntry records (paths resolved under the index's folder) that keep the entry
    exactly as written; an entry with an unknown key or without a path is named in the error."""
    from brownformer.stats_stage.trajectory_io import read_index
    written = {"path": "depth/ln_c0.npy", "category": "depth", "kind": "sphere", "time": None, "layer": None,
               "tensor": "ln", "capture": 0}
    (tmp_path / "index.json").write_text(json.dumps({"files": [written, {**written, "unit": "replica"}]}))
    first, second = read_index(tmp_path)
    assert (first.category, first.tensor, first.capture, first.unit, second.unit) == ("depth", "ln", 0, None, "replica")
    assert first.resolve(tmp_path) == tmp_path / "depth" / "ln_c0.npy" and first.to_dict() == written
    (tmp_path / "index.json").write_text(json.dumps({"files": [written, {**written, "tensr": "ln"}]}))
    with pytest.raises(ValueError, match=r"files\[1\].*tensr"):
        read_index(tmp_path)
    (tmp_path / "index.json").write_text(json.dumps({"files": [written, {"category": "depth"}]}))
    with pytest.raises(ValueError, match=r"files\[1\].*path"):
        read_index(tmp_path)
