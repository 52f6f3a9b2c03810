"""The pipeline calibrates each run on its own (the replica sets as context) and merges the tables: the merge must
hold the cells, and the rows, of one calibration over all runs."""

import numpy as np
import pandas as pd
import pytest

from brownformer.config import StatsConfig
from brownformer.io import to_jsonable
from brownformer.stats.diffusion.brownian import trajectory_battery
from brownformer.stats.core.calibration import KEY_COLUMNS
from brownformer.stats_stage import stages
from brownformer.io import write_json
from brownformer.statsfile import CalibrationShape, RunStatsSummary, SummaryRow

STATS = StatsConfig(fitted_null=("depth",))


def _shape(T: int) -> dict:
    X = np.random.default_rng(T).standard_normal((T, 8, 4)).cumsum(0)
    res = to_jsonable(trajectory_battery(X, kind="euclidean", times=np.arange(1.0, T + 1), n_resamples=19, rng=0))
    return CalibrationShape.from_dict(res["calibration_shape"])


@pytest.fixture()
def summaries(tmp_path):
    """A replica set (its weight file decides 3c) and two runs: run a's single-path weight file is left out because
    of the replica set, its depth file shares a shape with run b's (once in the merge), run b's says "brownian"."""
    shared, own_a, own_b = _shape(10), _shape(11), _shape(12)
    row = {"category": "weights", "verdict": "not brownian"}
    units = {"rep": [{**row, "path": "weights/l0_q.npy", "unit": "replica", "calibration_shape": own_a}],
             "a": [{**row, "path": "weights/l0_k.npy", "calibration_shape": own_a},
                   {**row, "category": "depth", "path": "depth/x.npy", "calibration_shape": shared}],
             "b": [{**row, "category": "depth", "path": "depth/x.npy", "calibration_shape": shared,
                    "verdict": "brownian"},
                   {**row, "category": "depth", "path": "depth/y.npy", "calibration_shape": own_b}]}
    paths = {}
    for name, rows in units.items():
        (tmp_path / name).mkdir()
        paths[name] = tmp_path / name / "summary.json"
        files = [SummaryRow(output=r["path"].replace(".npy", ".json"), **r) for r in rows]
        write_json(paths[name], RunStatsSummary(run_id=name, traj_dir=str(tmp_path / name), index_sha256="0",
                                                n_files=len(files), files=files, errors=[]))
    return paths


def _fake_cell(job):
    """A cell's rows depend only on what it simulates (its shape or file, and process), as the real cells' streams."""
    what, item, process, *_ = job
    key = item.id if what == "shape" else str(item[0])
    value = int.from_bytes(key.encode()[-4:], "little") % 997 + len(process)
    return pd.DataFrame([{"shape_id": key, "process": process, "test": t, "rejection_rate": value + i}
                         for i, t in enumerate(("verdict", "msd"))])


def test_runs_calibrated_alone_then_merged_equal_one_calibration_over_all(summaries, tmp_path, monkeypatch):
    monkeypatch.setattr(stages, "_cell", _fake_cell)
    order = [summaries["a"], summaries["b"], summaries["rep"]]
    whole = stages.stats_calibrate(order, tmp_path / "whole.parquet", stats=STATS)
    parts = []
    for name in ("a", "b", "rep"):
        parts.append(tmp_path / f"{name}.parquet")
        stages.stats_calibrate([summaries[name]], parts[-1], stats=STATS, context=[summaries["rep"]])
    merged = stages.merge_calibrations(parts, tmp_path / "merged.parquet")
    key = list(KEY_COLUMNS)
    assert not merged.duplicated(key).any()
    pd.testing.assert_frame_equal(merged.sort_values(key, ignore_index=True), whole.sort_values(key, ignore_index=True))
    both = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    assert both.duplicated(key).any()  # runs a and b share a depth shape: simulated in each, kept once


def test_without_the_replica_context_a_run_would_calibrate_its_single_path_weight_file(summaries, tmp_path):
    alone = {str(p.relative_to(tmp_path)) for _, p, *_ in stages.decided_files([summaries["a"]])}
    with_context = {str(p.relative_to(tmp_path)) for _, p, *_ in
                    stages.decided_files([summaries["a"]], [summaries["rep"]])}
    assert alone == {"a/weights/l0_k.npy", "a/depth/x.npy"} and with_context == {"a/depth/x.npy"}


def test_merging_no_rows_gives_the_empty_table(tmp_path):
    pd.DataFrame(columns=["shape_id", "process", "test", "rejection_rate"]).to_parquet(tmp_path / "e.parquet")
    merged = stages.merge_calibrations([tmp_path / "e.parquet"], tmp_path / "m.parquet")
    assert merged.empty and list(merged.columns)[:3] == list(KEY_COLUMNS)


def test_summaries_and_tables_to_merge_are_one_or_the_other(summaries, tmp_path):
    with pytest.raises(ValueError, match="not both"):
        stages.stats_calibrate([summaries["a"]], tmp_path / "x.parquet", stats=STATS, merge=[tmp_path / "y.parquet"])
    with pytest.raises(ValueError, match="--run-stats"):
        stages.stats_calibrate([], tmp_path / "x.parquet", stats=STATS)


def test_a_run_with_nothing_decided_writes_the_empty_table(summaries, tmp_path):
    """Only inconclusive files: no cell is simulated, and the table (with its key columns) is still written."""
    path = tmp_path / "undecided.json"
    row = SummaryRow(output="depth/z.json", path="depth/z.npy", category="depth", verdict="inconclusive",
                     calibration_shape=_shape(10))
    write_json(path, RunStatsSummary(run_id="u", traj_dir=str(tmp_path), index_sha256="0", n_files=1, files=[row],
                                     errors=[]))
    table = stages.stats_calibrate([path], tmp_path / "u.parquet", stats=STATS, context=[summaries["rep"]])
    back = pd.read_parquet(tmp_path / "u.parquet")
    assert table.empty and back.empty and list(back.columns)[:3] == list(KEY_COLUMNS)
