# Shared state and input/param functions (no lambdas in rules).
from pathlib import Path

import yaml

from brownformer.config import ConfigError, from_dict
from brownformer.config.ensembles import ensembles
from brownformer.config.interleaved import interleaved_groups
from brownformer.config.slices import SLICES, slice_path, write_slices
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
# Replicas of the training noise (config `replicas:`): base run -> its replicas (replica 0 = the base run itself);
# REPLICA_RUNS are the extra training runs (replicas the grid does not name): probed, combined by extract_replicas only.
REPLICA_SETS = {base: [r.run_id for r in reps] for base, reps in CFG.replica_sets().items()}
REPLICA_RUNS = [r.run_id for r in CFG.replica_runs()]
# Ensembles (config train.ensemble > 1): AdamW/SGD runs of one model and schedule trained by one job as one batched
# model (rule train_ensemble_<first run>, one per ensemble, each declaring every member's outputs); the other runs
# train alone (rule train_model). Every member keeps its own run folder, so every downstream rule is the same.
ENSEMBLES = ensembles(CFG)
# Interleaved groups (config train.interleave > 0): claim 4's timed runs of one model (each trains alone: claim 4
# compares their wall-clock), a few seeds per job, trained one at a time seed-major across optimizers (rule
# train_interleaved_<first run>, each declaring every member's outputs); saves a process start-up per run.
INTERLEAVED = interleaved_groups(CFG)
SOLO_RUNS = [r for r in RUNS + REPLICA_RUNS if r not in {m for g in (*ENSEMBLES, *INTERLEAVED) for m in g.runs}]
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
    """The config (the --configfile, or config/config.yaml, with --config edits) as one file the CLI reads.
    Rewritten only when its content changes. A constant path, so no job reruns because of it: each rule
    lists the slice of the config it reads among its inputs instead (`config_slice`)."""
    text = yaml.safe_dump(dict(config), sort_keys=True)
    path = Path(in_results("config")) / "config.yaml"
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return str(path)


CONFIG_FILE = _effective_config_path()
write_slices(CFG, RESULTS)


def config_slice(kind):
    """Input function of a rule: the file of the config slice `kind` (brownformer.config.slices.SLICES)
    that the rule reads, so that the rule reruns when, and only when, that slice changes."""
    wildcard = SLICES[kind].wildcard

    def path(wildcards):
        return str(slice_path(RESULTS, kind, wildcards[wildcard] if wildcard else None))

    return path


wildcard_constraints:
    run="|".join(RUNS + REPLICA_RUNS),
    rset="|".join(REPLICA_SETS) or "(?!)",  # (?!) matches nothing: no replica sets, no replica jobs
    dataset="|".join(DATASETS),


def data_dir_of_run(wildcards):
    return in_results(f"data/{CFG.models[CFG.run(wildcards.run).model].dataset}")


def data_meta_of_run(wildcards):
    return str(Path(data_dir_of_run(wildcards), "meta.json"))


def group_rule_name(prefix, group):
    """`prefix` (train_ensemble_, train_interleaved_) and the first member's id as a rule name (rules defined in a
    loop need their own names)."""
    first = "".join(c if c.isalnum() else "_" for c in group.runs[0])
    return f"{prefix}{first}"


def group_outputs(group, name):
    """Every member's file `name` (metrics.parquet, manifest.json, probes/index.parquet) of an ensemble or an
    interleaved group."""
    return [in_results(f"runs/{run}/{name}") for run in group.runs]


def group_inputs(group):
    """Every member's run slice and the prepared dataset of their model (one for the whole group)."""
    dataset = CFG.models[CFG.run(group.runs[0]).model].dataset
    return {"config": [str(slice_path(RESULTS, "run", run)) for run in group.runs],
            "meta": in_results(f"data/{dataset}/meta.json")}


def group_data_dir(wildcards, input):
    """The prepared dataset folder of a group's job (its meta.json's folder)."""
    return str(Path(input.meta).parent)


def group_runs_dir(wildcards, output):
    """The folder of a group's run folders (results/runs): its first member's metrics file's grandparent."""
    return str(Path(output.metrics[0]).parents[1])


def train_resources_gpu(wildcards):
    import torch

    return 1 if CFG.device == "cuda" or (CFG.device == "auto" and torch.cuda.is_available()) else 0


def all_run_stats(wildcards):
    """Per-run statistics of every probed run, and of every replica set's contrast trajectories."""
    return (expand(in_results("runs/{run}/stats/summary.json"), run=PROBED_RUNS)
            + expand(in_results("replicas/{rset}/stats/summary.json"), rset=list(REPLICA_SETS)))


def replica_set_stats(wildcards):
    """The replica sets' statistics: they choose which single-run files a run's calibration simulates."""
    return expand(in_results("replicas/{rset}/stats/summary.json"), rset=list(REPLICA_SETS))


def all_run_calibrations(wildcards):
    """The calibration table of every probed run and replica set, in the order of all_run_stats."""
    return (expand(in_results("runs/{run}/stats/calibration.parquet"), run=PROBED_RUNS)
            + expand(in_results("replicas/{rset}/stats/calibration.parquet"), rset=list(REPLICA_SETS)))


def replica_probe_indexes(wildcards):
    return expand(in_results("runs/{run}/probes/index.parquet"), run=REPLICA_SETS[wildcards.rset])


def replica_dir(wildcards):
    return in_results(f"replicas/{wildcards.rset}")


def all_run_metrics(wildcards):
    return expand(in_results("runs/{run}/metrics.parquet"), run=RUNS)


def data_out_dir(wildcards):
    return in_results(f"data/{wildcards.dataset}")


def run_dir(wildcards):
    return in_results(f"runs/{wildcards.run}")


# Local pretrained checkpoints (config `pretrained:`; rules/pretrained.smk). Absent or empty: no job, and
# PRETRAINED_OUTPUTS (in `rule all` and the report's inputs) is empty.
from brownformer.pretrained.settings import cli_arguments, model_files, model_spec, pretrained_entries

try:
    PRETRAINED = pretrained_entries(config)
except ConfigError as exc:
    raise WorkflowError(str(exc))
PRETRAINED_OUTPUTS = expand(in_results("pretrained/{name}/pretrained.json"), name=list(PRETRAINED))


def pretrained_model_files(wildcards):
    """config.json and the weights: a changed checkpoint is analysed again."""
    return model_files(PRETRAINED[wildcards.name])


def pretrained_model_dir(wildcards):
    return model_spec(PRETRAINED[wildcards.name])


def pretrained_options(wildcards):
    return cli_arguments(PRETRAINED[wildcards.name])


def pretrained_out_dir(wildcards):
    return in_results(f"pretrained/{wildcards.name}")

# ---- tune_optimizers (rules/tune.smk; on request only) ----

def tuning_data_meta(wildcards):
    """The prepared datasets of the tuned models (none when the config has no tuning block)."""
    models = (config.get("tuning") or {}).get("models", [])
    return sorted({in_results(f"data/{CFG.models[m].dataset}/meta.json") for m in models if m in CFG.models})


def tuning_config_source(wildcards):
    """The config file to rewrite: the first --configfile (default config/config.yaml)."""
    return str(workflow.configfiles[0]) if workflow.configfiles else "config/config.yaml"
