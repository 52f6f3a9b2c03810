"""Metrics-only runs that stop at claim 4's target (grid `stop_at_target`): where they stop, what they record,
and that no reader takes a stopped run for a full one."""
from __future__ import annotations

import copy
import json
import shutil

import dataclasses

import numpy as np
import pandas as pd
import pytest

from brownformer.config import DEFAULT_STATS, ReportConfig, ConfigError, from_dict
from brownformer.stats.comparison.time_to_target import time_to_target as time_to_target_rule
from brownformer.stats.core.training_status import reached_plateau
from brownformer.target_stop import BUDGET, STOPPED, smoothed, stopped_at_target
from brownformer.train import train_run

RUN = "vit-pre__adamw__s0"
STEPS = 60
CURVE = ["step", "lr", "train_loss", "val_loss", "val_accuracy"]


def _raw(ci_raw, *, stop: bool, target: float | None = None, optimizers=("adamw",)) -> dict:
    raw = copy.deepcopy(ci_raw)
    raw["train"].update(steps=STEPS, eval_every=5, checkpoint_every=20)
    raw["grid"] = [{"models": ["vit-pre"], "optimizers": list(optimizers), "probes": False, "eval_every": 5,
                    "stop_at_target": stop}]
    raw.pop("replicas", None)
    if target is not None:
        raw.setdefault("report", {})["targets"] = {"vit-pre": target}
    return raw


@pytest.fixture(scope="module")
def full_run(ci_raw, digits_dir, tmp_path_factory):
    """The run trained over its whole budget, and a target it first reaches mid-run."""
    metrics = train_run(from_dict(_raw(ci_raw, stop=False)), RUN, digits_dir,
                        tmp_path_factory.mktemp("full") / RUN, progress=False)
    evals = metrics.dropna(subset=["val_accuracy"]).reset_index(drop=True)
    target = float(evals["val_accuracy"].iat[len(evals) // 2])
    first = int(evals.loc[smoothed(evals["val_accuracy"]) >= target, "step"].iat[0])  # claim 4 reads the running median
    assert first < STEPS, "the test needs a target reached before the budget"
    return metrics, target, first


@pytest.fixture(scope="module")
def stopped_run(ci_raw, digits_dir, tmp_path_factory, full_run):
    _, target, _ = full_run
    out = tmp_path_factory.mktemp("stopped") / RUN
    cfg = from_dict(_raw(ci_raw, stop=True, target=target))
    return train_run(cfg, RUN, digits_dir, out, progress=False), out, cfg


def test_run_stops_at_its_first_evaluation_on_target_with_the_full_runs_curve(full_run, stopped_run):
    full, target, first = full_run
    metrics, out, _ = stopped_run
    assert int(metrics["step"].iat[-1]) == first
    # the same training up to there: the stop changes nothing before it
    pd.testing.assert_frame_equal(metrics[CURVE], full.loc[full["step"] <= first, CURVE].reset_index(drop=True),
                                  check_exact=True)
    on_disk = pd.read_parquet(out / "metrics.parquet")
    assert on_disk[STOPPED].all() and (on_disk[BUDGET] == STEPS).all() and stopped_at_target(on_disk)
    assert STOPPED not in full, "runs of blocks without the option carry no stop columns"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stopped_at_target"] == {"step": first, "target": target, "metric": "val_accuracy"}
    assert manifest["steps"] == STEPS and manifest["steps_trained"] == first


def test_rerun_of_a_stopped_run_trains_nothing_more(digits_dir, stopped_run, tmp_path):
    metrics, out, cfg = stopped_run
    again = tmp_path / RUN
    shutil.copytree(out / "checkpoints", again / "checkpoints")  # as Snakemake leaves it: outputs gone
    rerun = train_run(cfg, RUN, digits_dir, again, progress=False)
    pd.testing.assert_frame_equal(rerun[CURVE], metrics[CURVE], check_exact=True)
    assert rerun[STOPPED].all()


def test_unreachable_target_trains_the_whole_budget_and_says_so(ci_raw, digits_dir, tmp_path, full_run):
    full, _, _ = full_run
    cfg = from_dict(_raw(ci_raw, stop=True, target=1.01))  # accuracy never exceeds 1
    metrics = train_run(cfg, RUN, digits_dir, tmp_path / RUN, progress=False)
    pd.testing.assert_frame_equal(metrics[CURVE], full[CURVE], check_exact=True)
    assert not metrics[STOPPED].any() and not stopped_at_target(metrics)
    assert reached_plateau(metrics) == reached_plateau(full)


def test_claim4_times_of_a_stopped_run_equal_the_full_runs(full_run, stopped_run):
    """The event time is the full run's; censoring stays at the budget; a stopped run has no final value."""
    full, target, first = full_run
    metrics, _, _ = stopped_run
    rows = {}
    for name, df in (("full", full), ("stopped", metrics)):
        res = time_to_target_rule({RUN: df}, {"vit-pre": target}, stats=dataclasses.replace(DEFAULT_STATS, n_resamples=9),
                                  report=ReportConfig())["vit-pre"]
        rows[name] = res.runs.iloc[0]
    assert rows["full"]["steps"] == rows["stopped"]["steps"] == first
    assert rows["full"]["censored_at"] == rows["stopped"]["censored_at"] == STEPS
    assert rows["stopped"]["stopped"] and not rows["full"]["stopped"]
    assert np.isnan(rows["stopped"]["final"]) and np.isfinite(rows["full"]["final"])
    assert reached_plateau(metrics) is None


def test_readers_leave_stopped_runs_out_of_final_values_and_curves(ci_raw, digits_dir, tmp_path, full_run,
                                                                   stopped_run):
    from brownformer.plots.fig_training import plot_training_curves
    from brownformer.results import Results, time_to_target_table

    _, target, _ = full_run
    _, stopped_dir, _ = stopped_run
    raw = _raw(ci_raw, stop=True, target=target)
    raw["grid"].append({"models": ["vit-pre"], "optimizers": ["adamw"], "seeds": [1], "probes": False,
                        "eval_every": 5})
    cfg = from_dict(raw)
    assert cfg.stop_target("vit-pre__adamw__s1") is None
    root = tmp_path / "results"
    shutil.copytree(stopped_dir, root / "runs" / RUN)
    train_run(cfg, "vit-pre__adamw__s1", digits_dir, root / "runs" / "vit-pre__adamw__s1", progress=False)
    table = time_to_target_table(Results(cfg, root)).set_index("run")
    assert table.loc[RUN, "stopped"] and np.isnan(table.loc[RUN, ["final", "total_seconds"]].astype(float)).all()
    assert not table.loc["vit-pre__adamw__s1", "stopped"]
    assert np.isfinite(table.loc["vit-pre__adamw__s1", ["final", "total_seconds"]].astype(float)).all()
    fig = plot_training_curves(Results(cfg, root))
    assert "1 runs stopped at claim 4's target (x), not in the median" in fig._suptitle.get_text()
    median, thin, stop_mark = fig.axes[1].lines[:3]  # val accuracy vs step
    assert median.get_xdata()[-1] == STEPS, "the median is the full run's"
    assert thin.get_xdata()[-1] == stop_mark.get_xdata()[-1] < STEPS and thin.get_linewidth() < median.get_linewidth()


def test_config_rules(ci_raw):
    raw = _raw(ci_raw, stop=True)
    raw["report"] = {"targets": {"lm-pre": 3.0}}
    with pytest.raises(ConfigError, match=r"grid\.0\.stop_at_target.*vit-pre"):
        from_dict(raw)
    raw = _raw(ci_raw, stop=True, target=0.5)
    raw["grid"][0]["probes"] = True
    with pytest.raises(ConfigError, match=r"grid\.0\.stop_at_target.*probes: false"):
        from_dict(raw)
    # a run another block names without the option trains in full; the option is in the run's slice (its hash)
    raw = _raw(ci_raw, stop=True, target=0.5, optimizers=("adamw", "kfac-iterative"))
    raw["grid"].append({"models": ["vit-pre"], "optimizers": ["kfac-iterative"], "probes": False})
    cfg = from_dict(raw)
    assert cfg.stop_target(RUN) == 0.5 and cfg.stop_target("vit-pre__kfac-iterative__s0") is None
    plain = from_dict(_raw(ci_raw, stop=False, target=0.5))
    assert cfg.run_slice(RUN) == {**plain.run_slice(RUN), "stop_at_target": 0.5}
    assert "stop_at_target" not in cfg.run_slice("vit-pre__kfac-iterative__s0")
