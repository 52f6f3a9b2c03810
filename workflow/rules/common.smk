# Shared state and input/param functions (no lambdas in rules).
import hashlib
from pathlib import Path

import yaml

from brownformer.config import ConfigError, from_dict
from brownformer.results.catalog import FIGURES

try:
    # Cross-reference checks the schema cannot express; fails before any job runs, naming the key.
    CFG = from_dict(config, source="config")
except ConfigError as exc:
    raise WorkflowError(str(exc))

RUNS = [r.run_id for r in CFG.runs()]
# Runs with probe captures: extraction, per-run statistics and calibration cover these only; the rest
# (grid blocks with `probes: false`) are metrics-only, for claim 4 and the training status.
PROBED_RUNS = [r.run_id for r in CFG.probed_runs()]
DATASETS = sorted({CFG.models[r.model].dataset for r in CFG.runs()})
ENV = "../../envs/brownformer.yaml"
# Output roots (config `paths`): another config (config/scaling.yaml) writes beside the default, never over it.
RESULTS = CFG.paths["results"]
FIGURES_DIR = CFG.paths["figures"]


def in_results(path):
    return f"{RESULTS}/{path}"


def in_figures(path):
    return f"{FIGURES_DIR}/{path}"


def results_root(wildcards):
    return RESULTS


def figures_root(wildcards):
    return FIGURES_DIR


def _effective_config_path():
    """The merged config (configfile + --config overrides) as one file the CLI can read.
    Rewritten only when its content changes, so timestamps do not trigger reruns."""
    text = yaml.safe_dump(dict(config), sort_keys=True)
    path = Path(in_results("config")) / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.yaml"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return str(path)


CONFIG_FILE = _effective_config_path()


wildcard_constraints:
    run="|".join(RUNS),
    dataset="|".join(DATASETS),


def data_dir_of_run(wildcards):
    return in_results(f"data/{CFG.models[CFG.run(wildcards.run).model].dataset}")


def data_meta_of_run(wildcards):
    return str(Path(data_dir_of_run(wildcards), "meta.json"))


def run_hash(wildcards):
    return CFG.run_hash(wildcards.run)


def train_resources_gpu(wildcards):
    import torch

    return 1 if CFG.device == "cuda" or (CFG.device == "auto" and torch.cuda.is_available()) else 0


def all_run_stats(wildcards):
    return expand(in_results("runs/{run}/stats/summary.json"), run=PROBED_RUNS)


def all_run_metrics(wildcards):
    return expand(in_results("runs/{run}/metrics.parquet"), run=RUNS)


def data_out_dir(wildcards):
    return in_results(f"data/{wildcards.dataset}")


def run_dir(wildcards):
    return in_results(f"runs/{wildcards.run}")


# ---- tune_optimizers (rules/tune.smk; on request only) ----

def tuning_data_meta(wildcards):
    """The prepared datasets of the tuned models (none when the config has no tuning block)."""
    models = (config.get("tuning") or {}).get("models", [])
    return sorted({in_results(f"data/{CFG.models[m].dataset}/meta.json") for m in models if m in CFG.models})


def tuning_config_source(wildcards):
    """The config file to rewrite: the first --configfile (default config/config.yaml)."""
    return str(workflow.configfiles[0]) if workflow.configfiles else "config/config.yaml"
