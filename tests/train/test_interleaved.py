"""`brownformer train --one-at-a-time`: several runs in one process, each as it trains alone with `--out`."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from brownformer.cli import main

ROOT = Path(__file__).resolve().parents[2]
CI = str(ROOT / "config" / "ci.yaml")
#: claim 4's pair of config/ci.yaml: K-FAC first (the order of an interleaved group), then AdamW
RUNS = ["vit-pre__kfac-iterative__s0", "vit-pre__adamw__s0"]
TINY = ["--set", "train.steps=12", "--set", "train.eval_every=4", "--set", "train.checkpoint_every=4",
        "--no-probes", "--quiet"]
#: columns that read the clock: the only ones a run's process may change
CLOCK = ("wall_time", "examples_per_s", "tokens_per_s", "eval_wall_time", "probe_wall_time")


def _train(*args) -> int:
    return main(["train", "--config", CI, *args, *TINY])


def _group(data: Path, runs_dir: Path, *extra: str) -> int:
    return _train(*(a for r in RUNS for a in ("--run", r)), "--data", str(data), "--runs-dir", str(runs_dir),
                  "--one-at-a-time", *extra)


def _not_clock(metrics: pd.DataFrame) -> pd.DataFrame:
    return metrics.drop(columns=[c for c in metrics if c in CLOCK or c.startswith("opt_time_")])


def _weights(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)["model"]


def test_each_run_equals_the_run_trained_alone(digits_dir, tmp_path):
    assert _group(digits_dir, tmp_path / "group") == 0
    for run in RUNS:
        assert _train("--run", run, "--data", str(digits_dir), "--out", str(tmp_path / "alone" / run)) == 0
        group, alone = tmp_path / "group" / run, tmp_path / "alone" / run
        together, apart = pd.read_parquet(group / "metrics.parquet"), pd.read_parquet(alone / "metrics.parquet")
        assert list(together.columns) == list(apart.columns)
        assert together["step"].tolist() == [4, 5, 8, 10, 12]  # logged every 5 (ci.yaml), evaluated every 4
        pd.testing.assert_frame_equal(_not_clock(together), _not_clock(apart))  # exactly: one CPU, same kernels
        group_w, alone_w = _weights(group), _weights(alone)
        assert group_w.keys() == alone_w.keys()
        for name in alone_w:
            torch.testing.assert_close(group_w[name], alone_w[name], rtol=0, atol=0, msg=name)
        manifests = [json.loads((d / "manifest.json").read_text()) for d in (group, alone)]
        assert manifests[0]["run_hash"] == manifests[1]["run_hash"] and "ensemble" not in manifests[0]
        assert (group / "probes" / "index.parquet").is_file()


def test_a_complete_run_is_not_trained_again_and_a_removed_one_is(digits_dir, tmp_path, capsys):
    runs_dir = tmp_path / "runs"
    assert _group(digits_dir, runs_dir) == 0
    first = {r: (runs_dir / r / "manifest.json").read_text() for r in RUNS}
    (runs_dir / RUNS[1] / "metrics.parquet").unlink()  # as Snakemake removes a job's outputs to rerun it
    capsys.readouterr()
    assert _group(digits_dir, runs_dir) == 0
    err = capsys.readouterr().err
    assert f"{RUNS[0]}: outputs complete for its config; not trained again" in err
    assert (runs_dir / RUNS[0] / "manifest.json").read_text() == first[RUNS[0]]  # untouched
    assert "training from step 0" in err  # the other: its finished checkpoint without metrics is a rerun
    assert (runs_dir / RUNS[1] / "manifest.json").read_text() != first[RUNS[1]]
    # under another config (another run slice) the outputs are not complete: the run goes to training, which
    # refuses its checkpoint of the other config as a run trained alone does
    with pytest.raises(RuntimeError, match="another config"):
        _group(digits_dir, runs_dir, "--set", "train.eval_batches=1")


def test_a_cut_run_resumes_from_its_checkpoint(digits_dir, tmp_path, capsys):
    runs_dir = tmp_path / "runs"
    assert _group(digits_dir, runs_dir, "--stop-after", "8") == 0  # both cut at step 8, checkpointed
    assert not any((runs_dir / r / "metrics.parquet").exists() for r in RUNS)
    capsys.readouterr()
    assert _group(digits_dir, runs_dir) == 0
    assert capsys.readouterr().err.count("from step 8") == len(RUNS)  # each resumed its checkpoint
    full = tmp_path / "full"
    assert _group(digits_dir, full) == 0
    for run in RUNS:
        pd.testing.assert_frame_equal(_not_clock(pd.read_parquet(runs_dir / run / "metrics.parquet")),
                                      _not_clock(pd.read_parquet(full / run / "metrics.parquet")))


@pytest.mark.parametrize(("args", "message"), [
    (["--run", RUNS[0], "--run", RUNS[1], "--out", "OUT", "--one-at-a-time"], "--one-at-a-time"),
    (["--run", RUNS[0], "--one-at-a-time"], "--runs-dir"),
    (["--run", RUNS[0], "--run", RUNS[0], "--runs-dir", "OUT", "--one-at-a-time"], "distinct runs"),
    (["--run", RUNS[0], "--run", "lm-pre__adamw__s0", "--runs-dir", "OUT", "--one-at-a-time"], "one prepared dataset"),
], ids=["with-out", "without-runs-dir", "a-run-twice", "two-datasets"])
def test_wrong_combinations_exit_2_naming_the_problem(digits_dir, tmp_path, capsys, args, message):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    assert _train(*args, "--data", str(digits_dir)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
