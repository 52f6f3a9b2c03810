"""Claims 3b/3c over replicas: replica files decide, single-path files describe; calibration skips the latter."""
import numpy as np

from brownformer.config import StatsConfig
from brownformer.probes.replicas import replica_contrasts
from brownformer.io import to_jsonable
from brownformer.stats.diffusion.brownian import trajectory_battery
from brownformer.stats.claims.claim3_brownian import brownian_family_claim
from brownformer.stats.diffusion.replica_sets import base_run, calibrated_files, replica_set_key, split_by_unit
from brownformer.statsfile import CalibrationShape, RunStatsSummary, SummaryRow

STATS = StatsConfig(n_resamples=99)
BASE = "vit-pre__adamw__s0"


def _result(X, *, replica: bool, groups=None, drift="none"):
    res = to_jsonable(trajectory_battery(X, kind="euclidean", times=np.arange(1.0, X.shape[0] + 1), groups=groups,
                                         drift=drift,
                                         n_resamples=99, rng=0))
    res["entry"] = {"category": "weights", **({"unit": "replica"} if replica else {})}
    return res


def _files():
    rng = np.random.default_rng(0)
    R, T, N, d = 5, 12, 8, 4
    X = rng.standard_normal((R, T, N, d)).cumsum(1)
    C = replica_contrasts(X).transpose(1, 0, 2, 3).reshape(T, (R - 1) * N, d)
    rep = _result(C, replica=True, groups=np.repeat(np.arange(R - 1), N))
    single = _result(X[0], replica=False, drift="per_walker")
    return [{"run": replica_set_key(BASE), "path": "weights/l0_q.npy", "result": rep},
            {"run": BASE, "path": "weights/l0_q.npy", "result": single},
            {"run": "vit-post__adamw__s0", "path": "weights/l0_q.npy", "result": single}]


def test_keys_round_trip():
    assert base_run(replica_set_key(BASE)) == BASE and base_run(BASE) == BASE


def test_replica_files_decide_and_single_paths_describe():
    files = _files()
    deciding, single = split_by_unit("weights", files)
    assert [f["run"] for f in deciding] == [BASE] and len(single) == 2
    assert split_by_unit("depth", files) == (files, [])  # 3a is not a claim about training noise
    assert split_by_unit("weights", files[1:]) == (files[1:], [])  # no replicas: the single paths decide
    claim = brownian_family_claim("3c", files, STATS, calibration=None)
    assert set(claim.per_run) == {BASE} and claim.details.unit_of_replication == "replica contrasts"
    assert set(claim.details.single_path) == {BASE, "vit-post__adamw__s0"}
    assert claim.per_run[BASE].details.n_files == 1
    without = brownian_family_claim("3c", files[1:], STATS, calibration=None)
    assert without.details.unit_of_replication == "probe inputs of one path" and without.details.single_path is None
    assert "single_path" not in without.details.to_dict()


def test_calibration_skips_single_path_files_of_replicated_families():
    rows = [SummaryRow(path="weights/l0_q.npy", output="weights/l0_q.json", category="weights", unit="replica"),
            SummaryRow(path="weights/l0_q.npy", output="weights/l0_q.json", category="weights"),
            SummaryRow(path="training/ln_l0.npy", output="training/ln_l0.json", category="training"),
            SummaryRow(path="depth/ln_c0.npy", output="depth/ln_c0.json", category="depth")]
    kept = calibrated_files(rows)
    assert kept == [rows[0], rows[2], rows[3]]  # training has no replica file here: its single paths still decide
    assert calibrated_files(rows[1:]) == rows[1:]


def test_decided_replica_files_get_a_fitted_null_whatever_stats_fitted_null_lists(tmp_path, monkeypatch):
    """The replica files decide 3b/3c, so each claim-3 verdict can cite its size under the fitted null: the calibration
    fits them even when `stats.fitted_null` leaves their category out (the default leaves out weights)."""
    import pandas as pd

    from brownformer.io import write_json
    from brownformer.stats_stage import stages
    shape = _files()[0]["result"]["calibration_shape"]
    row = {"category": "weights", "verdict": "not brownian", "calibration_shape": CalibrationShape.from_dict(shape)}
    for name, rows in {"rep": [{**row, "path": "weights/l0_q.npy", "unit": "replica"}],
                       "run": [{**row, "path": "weights/l0_k.npy"}, {**row, "category": "depth", "path": "depth/x.npy"}]
                       }.items():
        files = [SummaryRow(output=r["path"].replace(".npy", ".json"), **r) for r in rows]
        write_json(tmp_path / name / "summary.json", RunStatsSummary(
            run_id=name, traj_dir=str(tmp_path / name), index_sha256="0", n_files=len(files), files=files, errors=[]))
    jobs = []
    monkeypatch.setattr(stages, "_cell", lambda job: jobs.append(job) or pd.DataFrame())
    stats = StatsConfig(fitted_null=("depth",))
    stages.stats_calibrate([tmp_path / "rep" / "summary.json", tmp_path / "run" / "summary.json"],
                           tmp_path / "cal.parquet", stats=stats)
    fitted = sorted(str(j[1][0].relative_to(tmp_path)) for j in jobs if j[0] == "fitted")
    # the replica weight file and the depth file (listed); not the single-path weight file (replicas decide 3c)
    assert fitted == ["rep/weights/l0_q.npy", "run/depth/x.npy"]
