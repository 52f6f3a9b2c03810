"""The cross-run summary: claims.json in the verdicts schema, runs that did not train left out and named."""
import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from brownformer.config import ReportConfig, StatsConfig
from brownformer.io import write_json
from brownformer.stats.markov.markov_chain import analyze_attention, attention_null_models, weight_isotropy
from brownformer.stats.sphere.sphere_distance import tensor_sphere_summary
from brownformer.stats.core.training_status import ChanceBaseline
from brownformer.stats_stage.summary import summarize
from brownformer.statsfile import HeadKernels, RunStatsSummary, SphereStats, SummaryRow
from brownformer.verdicts import read_claims

STATS = StatsConfig(n_resamples=199)
REPORT = ReportConfig(target_optimizer="adamw", proposed="kfac-iterative")
TRAINED, AT_CHANCE = "vit-pre__adamw__s0", "vit-pre__sgd__s0"
#: claims 1 and 2 decide over seeds (stats/core/pooling.py MIN_SEEDS): the trained configuration has three
TRAINED_SEEDS = (TRAINED, "vit-pre__adamw__s1", "vit-pre__adamw__s2")
CHANCE = ChanceBaseline("val_accuracy", 0.1, 0.05, "10 balanced classes")


def _stats_dir(tmp_path, run, rng):
    """A run's stats folder as the per-run stage writes it (brownformer.statsfile): a depth (sphere) file and an
    attention file."""
    sdir = tmp_path / run / "stats"
    x = rng.standard_normal((2, 48, 12))
    z = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
    files = []
    for name, tensor in (("ln_c1", "ln_raw"), ("lnaff_c1", "ln_affine")):  # gamma = 1, beta = 0: a sphere
        sphere = tensor_sphere_summary(z, tensor=tensor, z_raw=z, n_inputs=8, n_tokens=6, n_resamples=199)
        sphere = dataclasses.replace(sphere, ln="pre", step=100)
        write_json(sdir / "depth" / f"{name}.json", SphereStats(sphere, category="depth", entry={"capture": 1}).to_dict())
        files.append(SummaryRow(f"depth/{name}.npy", f"depth/{name}.json", "depth"))
    U = rng.standard_normal((1, 8, 10, 6))
    U /= np.linalg.norm(U, axis=-1, keepdims=True)
    S = 6.0 * np.einsum("lbid,lbjd->lbij", U, U)[:, None]
    A = np.exp(S - S.max(-1, keepdims=True))
    A /= A.sum(-1, keepdims=True)
    att = dataclasses.replace(analyze_attention(A, features=U), category="attention", step=100,
                              null_models=attention_null_models(A, features=U, rng=1),
                              head_kernels=HeadKernels(per_layer=[weight_isotropy(np.eye(6), np.eye(6), n_heads=1)]))
    write_json(sdir / "attention" / "c1.json", att.to_dict())
    files.append(SummaryRow("attention/c1.npy", "attention/c1.json", "attention"))
    write_json(sdir / "summary.json", RunStatsSummary(run, str(tmp_path), "0" * 64, len(files), files, []).to_dict())
    return sdir


def _metrics(final_acc):
    s = np.arange(10, 101, 10)
    return pd.DataFrame({"step": s, "train_loss": np.linspace(2.3, 1.0, s.size), "wall_time": s * 0.1,
                         "val_accuracy": np.linspace(0.1, final_acc, s.size)})


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("summary")
    rng = np.random.default_rng(0)
    dirs = {run: _stats_dir(tmp, run, rng) for run in (*TRAINED_SEEDS, AT_CHANCE)}
    metrics = {**{run: _metrics(0.9) for run in TRAINED_SEEDS}, AT_CHANCE: _metrics(0.11)}
    out = tmp / "stats"
    res = summarize(dirs, out, stats=STATS, report=REPORT, metrics_by_run=metrics,
                    baselines={run: CHANCE for run in (*TRAINED_SEEDS, AT_CHANCE)})
    return out, res


def test_claims_file_round_trips_through_the_schema(summary):
    out, res = summary
    back = read_claims(out / "claims.json")
    assert set(back.claims) == {"1", "2", "3a", "3b", "3c", "4"}
    assert back.to_dict() == json.loads((out / "claims.json").read_text())
    for rec in back.claims.values():
        assert rec.verdict in ("supported", "not supported", "inconclusive", "did not train") and rec.reason


def test_runs_that_did_not_train_are_named_and_left_out(summary):
    out, res = summary
    assert [d["run"] for d in res.did_not_train] == [AT_CHANCE]
    assert "chance" in res.did_not_train[0]["reason"]
    for key in ("1", "2"):
        assert res.claims[key].per_run[AT_CHANCE].verdict == "did not train"
        assert res.claims[key].per_model["vit-pre__adamw"].verdict == "supported"  # decided on its seeds
        assert res.claims[key].verdict == "supported"
    status = json.loads((out / "training_status.json").read_text())["runs"]
    assert status[AT_CHANCE]["did_not_train"] is True and status[TRAINED]["did_not_train"] is False
    table = pd.read_parquet(out / "summary.parquet")
    dnt = table[(table["quantity"] == "did_not_train")].set_index("run")["estimate"]
    assert dnt[AT_CHANCE] == 1.0 and dnt[TRAINED] == 0.0


def test_holm_across_headline_claims(summary):
    _, res = summary
    raw = {k: c.details.pvalue for k, c in res.claims.items() if c.details.pvalue is not None}
    adjusted = {k: res.claims[k].pvalue_holm for k in raw}
    assert len(raw) >= 2
    assert all(adjusted[k] >= raw[k] - 1e-15 for k in raw)
    assert min(adjusted.values()) == pytest.approx(min(1.0, min(raw.values()) * len(raw)))


def test_report_config_carries_claim4_optimizers_from_the_schema():
    from pathlib import Path

    from brownformer.config import load_config
    cfg = load_config(Path(__file__).resolve().parents[2] / "config" / "ci.yaml")
    assert cfg.report.target_optimizer in cfg.optimizers and cfg.report.proposed in cfg.optimizers
    for key in ("fraction_on_sphere", "radius_spread_ratio", "sphere_offset", "head_isotropy", "vmf_output_error",
                "reversibility_residual", "time_to_target_steps_ratio",
                "time_to_target_seconds_ratio"):
        lo, hi = cfg.stats.margins[key]
        assert lo < hi


def test_metrics_only_runs_enter_the_status_and_claim_4_but_need_no_statistics(raw_config, tmp_path):
    from brownformer.config import from_dict
    from brownformer.stats_stage.summary import summarize_results

    raw_config["grid"].append({"models": ["vit-pre"], "optimizers": ["adamw"], "seeds": [0, 1], "probes": False})
    cfg = from_dict(raw_config)
    metrics_only = "vit-pre__adamw__s1"
    assert [r.run_id for r in cfg.runs() if not cfg.probed(r.run_id)] == [metrics_only]
    rng = np.random.default_rng(0)
    for spec in cfg.runs():
        if cfg.probed(spec.run_id):  # a metrics-only run has no stats/ folder at all
            _stats_dir(tmp_path / "runs", spec.run_id, rng)
        (tmp_path / "runs" / spec.run_id).mkdir(parents=True, exist_ok=True)
        _metrics(0.9).to_parquet(tmp_path / "runs" / spec.run_id / "metrics.parquet")
    res = summarize_results(cfg, tmp_path, tmp_path / "stats")
    assert res.runs == sorted(r.run_id for r in cfg.runs())
    status = json.loads((tmp_path / "stats" / "training_status.json").read_text())["runs"]
    assert set(status) == {r.run_id for r in cfg.runs()}
    claim4_runs = res.claims["4"].per_model["vit-pre"].details.runs
    assert [r["run"] for r in claim4_runs if r["optimizer"] == "adamw"] == ["vit-pre__adamw__s0", metrics_only]
    table = pd.read_parquet(tmp_path / "stats" / "summary.parquet")
    assert set(table.loc[table["run"] == metrics_only, "category"]) == {"training_status"}
