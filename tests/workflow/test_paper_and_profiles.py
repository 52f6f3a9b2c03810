"""config/paper.yaml and the SLURM profile: validate, build, dry-run (no job runs, nothing submitted).

Dry runs happen in a temporary folder that links workflow/ and config/ from the repo, so
the checkout gets no results/ or .snakemake/ (the Snakefile writes results/config/ even on -n).
Each dry run takes a few seconds; the whole module well under a minute.
"""
from __future__ import annotations

import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "config" / "paper.yaml"
SLURM_PROFILE = ROOT / "workflow" / "profiles" / "slurm"
CIFAR_TRAIN_IMAGES = 45_000  # official 50,000 less the 10% validation split
DRY_RUN_TIMEOUT_S = 120  # a generous ceiling on a slow CI machine, not a timed assertion
N_PAPER_RUNS = 2 * 5 * 3  # (pre, post) x 5 optimizers x 3 seeds
N_PAPER_REPLICA_RUNS = 3  # replicas 1-3 of vit-pre__adamw__s0 (claims 3b/3c over replicas)


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


needs_snakemake = pytest.mark.skipif(not _has("snakemake"), reason="snakemake is not installed")
needs_slurm_plugin = pytest.mark.skipif(not _has("snakemake_executor_plugin_slurm"),
                                        reason="snakemake-executor-plugin-slurm is not installed (extra 'cluster')")


@pytest.fixture(scope="module")
def paper():
    from brownformer.config import load_config
    return load_config(PAPER)


@pytest.fixture()
def workdir(tmp_path) -> Path:
    """A working directory that sees the repo's workflow, configs and envs but writes elsewhere."""
    for name in ("workflow", "config", "envs"):
        if (ROOT / name).exists():
            (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    return tmp_path


def _dry_run(workdir: Path, *args: str) -> str:
    cmd = [sys.executable, "-m", "snakemake", "-n", "--snakefile", "workflow/Snakefile",
           "--configfile", "config/paper.yaml", *args]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=DRY_RUN_TIMEOUT_S)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{out[-4000:]}"
    return out


def _job_counts(out: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run as {rule: count}."""
    table = out.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.M)}


def _train_resources(out: str) -> list[str]:
    """The `resources:` line of every train_model job in a dry run."""
    blocks = re.findall(r"^rule train_model:\n(.*?)(?:\n\n|\Z)", out, re.M | re.S)
    return [line for b in blocks for line in b.splitlines() if line.strip().startswith("resources:")]


# ---- the config ---------------------------------------------------------------------------------

def test_paper_config_validates_and_matches_the_author_vit(paper):
    assert len(paper.runs()) == N_PAPER_RUNS
    assert paper.seeds == (0, 1, 2)
    assert {o.type for o in paper.optimizers.values()} == {"sgd", "adamw", "muon", "kfac-eigen", "kfac-iterative"}
    assert {m.ln for m in paper.models.values()} == {"pre", "post"}
    data = paper.datasets["cifar10"]
    assert (data.source, data.data_dir, data.download, data.augment) == ("cifar10", "data/cifar10", False, True)
    for m in paper.models.values():
        assert (m.arch, m.dataset, m.d_model, m.n_layers, m.n_heads, m.patch_size) == ("vit", "cifar10", 64, 6, 8, 4)
        assert int(round(m.mlp_ratio * m.d_model)) == 256
    assert paper.train.batch_size == 128 and paper.train.precision == "bf16"
    assert paper.device == "auto"


def test_paper_steps_are_the_stated_epoch_budget(paper):
    epochs = int(re.search(r"Epoch budget: (\d+) epochs", PAPER.read_text()).group(1))
    assert paper.train.steps == math.ceil(epochs * CIFAR_TRAIN_IMAGES / paper.train.batch_size)
    assert paper.train.steps * paper.train.batch_size >= CIFAR_TRAIN_IMAGES * epochs


def test_paper_model_has_the_stated_size(paper):
    from brownformer.models import build_model

    model = build_model(paper.models["vit-pre"], n_classes=10, image_shape=(3, 32, 32))
    assert model.n_patches + 1 == 65
    assert 0.29e6 < sum(p.numel() for p in model.parameters()) < 0.33e6  # "0.31 M parameters"


@pytest.mark.parametrize("name", ["sgd", "adamw", "muon", "kfac-eigen", "kfac-iterative"])
def test_paper_optimizer_parameters_are_accepted(paper, name):
    """Every key the paper config gives an optimizer is accepted by its constructor (build_optimizer
    raises ValueError naming a key it does not take). Stepping is tested in tests/optim."""
    from brownformer.models import build_model
    from brownformer.optim import build_optimizer

    model = build_model(paper.models["vit-pre"], n_classes=10, image_shape=(3, 32, 32))
    o = paper.optimizers[name]
    opt = build_optimizer(model, o.type, o.lr, o.params)
    assert all(g["initial_lr"] > 0 for g in opt.param_groups)


# ---- dry runs -----------------------------------------------------------------------------------

@needs_snakemake
def test_paper_dry_run_builds_the_whole_dag(workdir):
    out = _dry_run(workdir, "--cores", "1")
    counts = _job_counts(out)
    assert counts["prepare_data"] == 1
    assert counts["train_model"] == N_PAPER_RUNS + N_PAPER_REPLICA_RUNS, counts
    for rule in ("extract_trajectories", "compute_stats"):
        assert counts[rule] == N_PAPER_RUNS, (rule, counts)
    assert counts["extract_replicas"] == counts["compute_replica_stats"] == 1, counts
    for rule in ("calibrate_tests", "summarize_stats", "plot_figures", "build_report"):
        assert counts[rule] == 1, (rule, counts)


def test_slurm_profile_parses():
    with open(SLURM_PROFILE / "config.yaml") as fh:
        prof = yaml.safe_load(fh)
    assert prof["executor"] == "slurm"
    assert prof["jobs"] >= 1 and prof["latency-wait"] >= 30 and prof["retries"] >= 1
    assert prof["set-resources"]["train_model"]["gpu"] == 1
    assert {"mem_mb", "runtime"} <= set(prof["default-resources"])
    # memory and runtime of training come from the config's `resources`, not the profile
    assert not {"mem_mb", "runtime"} & set(prof["set-resources"]["train_model"])


@needs_snakemake
@needs_slurm_plugin
@pytest.mark.parametrize("how", ["--workflow-profile", "--profile"])
def test_slurm_profile_dry_run_requests_a_gpu_per_training_job(workdir, how):
    out = _dry_run(workdir, how, "workflow/profiles/slurm")
    assert _job_counts(out)["train_model"] == N_PAPER_RUNS + N_PAPER_REPLICA_RUNS
    lines = _train_resources(out)
    assert len(lines) == N_PAPER_RUNS + N_PAPER_REPLICA_RUNS
    paper = yaml.safe_load(PAPER.read_text())["resources"]
    for line in lines:
        assert "gpu=1" in line, line
        assert f"mem_mb={paper['train_mem_mb']}" in line and f"runtime={paper['train_runtime_min']}" in line, line
