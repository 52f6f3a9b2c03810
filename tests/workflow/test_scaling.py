"""The scaling study: its config resolves, a tiny study runs end to end beside the default, the deep model
has enough depth points."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from brownformer.config import load_config

from .test_workflow import ROOT, _snakemake


def _workdir(tmp_path: Path) -> Path:
    """A working directory with the project's configs (config/config.yaml is the Snakefile's default)."""
    shutil.copytree(ROOT / "config", tmp_path / "config")
    shutil.copy(ROOT / "config" / "ci.yaml", tmp_path / "config" / "config.yaml")
    return tmp_path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_scaling_config_resolves_under_its_own_root(tmp_path):
    work = _workdir(tmp_path)
    out = _snakemake("-n", "--cores", "1", "--directory", str(work), "--configfile", "config/scaling.yaml")
    assert out.returncode == 0, out.stderr[-3000:]
    cfg = load_config(ROOT / "config" / "scaling.yaml")
    text = out.stdout + out.stderr
    assert text.count("rule train_model:") == len(cfg.runs()) == 64
    assert "results/scaling/runs/vit-L32-w32__kfac-iterative__s1/metrics.parquet" in text
    assert "figures/scaling/scaling.png" in text
    # nothing of the study is written where the default run writes
    assert "output: results/runs/" not in text and " figures/scaling.png" not in text


def test_scaling_config_covers_the_study():
    cfg = load_config(ROOT / "config" / "scaling.yaml")
    for dataset in ("digits", "pydoc"):
        models = [cfg.models[m] for m in dict.fromkeys(r.model for r in cfg.runs())
                  if cfg.models[m].dataset == dataset]
        assert sorted(m.n_layers for m in models if m.d_model == cfg.scaling["width"]) == [2, 4, 8, 16, 32]
        assert sorted(m.d_model for m in models if m.n_layers == cfg.scaling["depth"]) == [16, 32, 64, 128]
        assert all(m.ln == "pre" for m in models)
    assert len(cfg.seeds) >= 2 and {r.optimizer for r in cfg.runs()} >= {"adamw", "kfac-iterative"}
    tuned = {m: cfg.optimizer_for(m, "adamw").lr for m in cfg.models}
    assert all(lr > 0 for lr in tuned.values())


def _deep_pre_ln_runs(cfg) -> dict[str, list]:
    deep = {r.model for r in cfg.runs() if cfg.models[r.model].n_layers >= 16 and cfg.models[r.model].ln == "pre"}
    return {model: [r for r in cfg.runs() if r.model == model] for model in deep}


def test_default_config_has_a_probed_deep_pre_ln_model():
    # the default grid keeps AdamW's 16-layer run (claim 3a's depth files); its K-FAC run left it for the 12-minute
    # budget (config.yaml, grid comment), so K-FAC over depth is the scaling study's (next test)
    cfg = load_config(ROOT / "config" / "config.yaml")
    deep = _deep_pre_ln_runs(cfg)
    assert deep, "no model with >= 16 pre-LN layers in the default grid"
    for runs in deep.values():
        assert "adamw" in {r.optimizer for r in runs}
        assert {r.run_id for r in runs} <= {r.run_id for r in cfg.probed_runs()}, "claim 3a needs its depth files"


def test_scaling_config_trains_deep_pre_ln_models_with_adamw_and_iterative_kfac():
    cfg = load_config(ROOT / "config" / "scaling.yaml")
    deep = _deep_pre_ln_runs(cfg)
    assert deep, "no model with >= 16 pre-LN layers in the scaling study"
    for runs in deep.values():
        assert {r.optimizer for r in runs} >= {"adamw", "kfac-iterative"}
        assert {r.run_id for r in runs} <= {r.run_id for r in cfg.probed_runs()}, "claim 3a needs its depth files"


def test_deep_model_depth_trajectories_have_n_layers_plus_one_points(tmp_path):
    """16 layers give depth trajectories (the residual stream) of 17 layer points."""
    from brownformer.data import prepare_dataset
    from brownformer.probes import extract_trajectories
    from brownformer.train import train_run

    raw = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    raw["models"] = {"vit-deep": {"arch": "vit", "dataset": "digits", "ln": "pre", "d_model": 8, "n_layers": 16,
                                  "n_heads": 2, "mlp_ratio": 1, "patch_size": 4, "steps": 4}}
    raw["grid"] = [{"models": ["vit-deep"], "optimizers": ["adamw"]}]
    raw["replicas"] = []  # ci.yaml's replicas name vit-pre
    raw["probes"].update(n_inputs=2, log_points=2, linear_every=2)
    (tmp_path / "deep.yaml").write_text(yaml.safe_dump(raw))
    cfg = load_config(tmp_path / "deep.yaml")
    prepare_dataset(cfg.datasets["digits"], tmp_path / "data")
    run = tmp_path / "run"
    metrics = train_run(cfg, "vit-deep__adamw__s0", tmp_path / "data", run, probes=True, progress=False)
    assert int(metrics["step"].max()) == 4  # the model's own `steps` overrides train.steps (60 in ci.yaml)
    extract_trajectories(cfg, run, run / "trajectories")
    resid = sorted((run / "trajectories" / "depth").glob("resid_c*.npy"))
    assert resid
    for path in resid:
        X = np.load(path)
        times = json.loads(path.with_suffix(".sidecar.json").read_text())["times"]
        assert X.shape[0] == len(times) == 17


@pytest.mark.slow
def test_tiny_scaling_study_end_to_end_beside_the_default(tmp_path):
    work = _workdir(tmp_path)
    study = ["--configfile", "config/scaling_ci.yaml"]
    # The default's data first: the study has a dataset of the same name and must not touch it.
    digits = "results/data/digits/meta.json"
    base = _snakemake("--cores", "2", "--directory", str(work), digits)
    assert base.returncode == 0, base.stderr[-3000:]
    before = {p: _sha(p) for p in (work / "results" / "data").rglob("*") if p.is_file()}

    out = _snakemake("--cores", "2", "--directory", str(work), *study, timeout=900)
    assert out.returncode == 0, out.stderr[-5000:]
    root, figures = work / "results" / "scaling_ci", work / "figures" / "scaling_ci"
    assert (figures / "scaling.png").stat().st_size > 10_000
    html = (root / "report" / "report.html").read_text()
    assert "Scaling: the claims against depth and width" in html
    assert "Training status" in html and "Depth series at d_model = 16" in html
    # The default run's files are untouched and its data job has nothing to do.
    assert {p: _sha(p) for p in (work / "results" / "data").rglob("*") if p.is_file()} == before
    again = _snakemake("-n", "--cores", "1", "--directory", str(work), digits)
    assert again.returncode == 0 and "rule prepare_data" not in again.stdout
    assert not (work / "results" / "runs").exists() and not (work / "figures" / "scaling.png").exists()
    # The study is complete, and its figure is byte-identical when drawn again.
    done = _snakemake("-n", "--cores", "1", "--directory", str(work), *study)
    assert "Nothing to be done" in done.stdout + done.stderr
    _redraw_is_identical(work / "config" / "scaling_ci.yaml", root, figures / "scaling.png", tmp_path / "redraw")


def _redraw_is_identical(config: Path, results: Path, png: Path, out: Path) -> None:
    from brownformer.plots import drawing_function
    from brownformer.plots._style import apply_style, save_figure
    from brownformer.results import FIGURES, Results

    apply_style()
    fig = drawing_function(FIGURES["scaling"])(Results(load_config(config), results))
    save_figure(fig, out, "scaling")
    assert _sha(out / "scaling.png") == _sha(png)
