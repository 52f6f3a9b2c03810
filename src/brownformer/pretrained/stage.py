"""The `brownformer pretrained MODEL_DIR --out DIR` stage: capture, trajectories, statistics, pretrained.json.

Offline only: HF_HUB_OFFLINE=1 is set and every load uses local_files_only=True. Everything is built in a
staging folder beside DIR and moved in at the end, so a bad input (no model, an unknown model_type,
attention weights unavailable, ...) writes nothing. DIR then holds:
    trajectories/   the project's trajectory layout (trajectories.py), index.json
    stats/          per-file statistics and summary.json (`brownformer stats run`), calibration.parquet
    pretrained.json model, inputs, provenance (sha256 of the weights, versions), each claim's verdict
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping

import torch

from brownformer.config import ProbeConfig, StatsConfig
from brownformer.io import staged_folder, write_json

from .adapters import ModuleMap, adapter_for
from .checkpoints import capture_series, find_checkpoints
from .hooked_forward import capture_model, head_counts
from .inputs import InputSpec, build_inputs
from .packaged import resolve_model, weight_files
from .pretrained_claims import pretrained_claims, stats_for_norm
from .trajectories import NULL_CAPTURE, PRETRAINED_CAPTURE, TrajectoryWriter

log = logging.getLogger(__name__)

__all__ = ["PretrainedRequest", "analyze_pretrained", "model_config", "unavailable_result", "OFF_DISTRIBUTION_NOTE"]

OFF_DISTRIBUTION_NOTE = ("descriptive: the probe inputs (windows of a local text, or digits resized to the model's "
                         "image size) may be off-distribution for the model, and one checkpoint is one model, not a "
                         "replicated experiment")


@dataclass(frozen=True)
class PretrainedRequest:
    """What to analyse: the model (a folder or "package:NAME"), its inputs, an optional checkpoint series and
    module map; `calibrate` simulates claim 3's rule at each decided file's shape (`calibration_replicates`
    per null, None: the StatsConfig's); `sha256` the expected hash per weight file (packages: the published)."""
    model_dir: Path | str
    out: Path
    inputs: InputSpec
    name: str | None = None
    checkpoints: str | None = None
    module_map: Path | None = None
    calibrate: bool = True
    calibration_replicates: int | None = None
    null_seed: int = 0
    depth_steps: str = "sublayer"
    sha256: Mapping[str, str] | None = None
    nested: bool = False  # one of several models: the outputs go to out/<name>/
    jobs: int = 1  # calibration worker processes (results do not depend on it)

    def output_dir(self, name: str) -> Path:
        return Path(self.out) / name if self.nested else Path(self.out)


def model_config(model_dir: Path):
    """The checkpoint's transformers config, read offline.

    Raises:
        ValueError: no config.json in model_dir, or one transformers cannot read.
    """
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise ValueError(f"{model_dir}: no config.json (not a Hugging Face model folder)")
    from transformers import AutoConfig
    try:
        return AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{model_dir}/config.json: transformers cannot read it ({first})") from None


def _load_model(model_dir: Path):
    from transformers import AutoModel
    if not weight_files(model_dir):
        raise ValueError(f"{model_dir}: no weights (*.safetensors or pytorch_model*.bin)")
    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True, attn_implementation="eager")
    return model.float().eval()


def _random_init(config, seed: int):
    """The step-0 null: the same config with fresh random weights (seeded)."""
    from transformers import AutoModel
    torch.manual_seed(seed)
    return AutoModel.from_config(config, attn_implementation="eager").float().eval()


def _read_module_map(path: Path | None) -> ModuleMap | None:
    if path is None:
        return None
    try:
        return ModuleMap.from_dict(json.loads(Path(path).read_text()))
    except (OSError, json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"--module-map {path}: {exc}") from None


def unavailable_result(req: PretrainedRequest, reason: str) -> dict:
    """pretrained.json of a model that could not be had (ModelUnavailable): the pipeline records it and goes on."""
    return {"name": req.name or str(req.model_dir), "status": "unavailable", "reason": reason,
            "model_dir": str(req.model_dir), "claims": {}}


def _calibrate(tmp: Path, stats, replicates: int, jobs: int, echo: Callable[[str], None]) -> tuple[Path | None, dict]:
    """calibration.parquet at the shapes of the decided files (none decided: None), with the cost estimate first:
    the worst case (every process to its cap) and the usual one (every gate decided after its first chunk)."""
    from brownformer.stats.core.calibration import CHUNK, processes_for
    from brownformer.stats_stage.stages import decided_files, stats_calibrate
    from brownformer.stats_stage.user_calibration import PROBE_REPLICATES, cost_estimate
    summary = tmp / "stats" / "summary.json"
    files = decided_files([summary])
    if not files:
        return None, {"shapes": 0, "note": "no decided battery file: nothing to calibrate"}
    shapes = {s.id: s for s, *_ in files}
    brownian = {s.id for s, _, verdict, *_ in files if verdict == "brownian"}
    cal_stats = replace(stats, calibration_replicates=replicates)
    worst, usual = 0.0, 0.0
    for sid, shape in shapes.items():
        cost = cost_estimate(shape, stats=cal_stats)
        # the idealised and the fitted null; the alternatives only where a file says "brownian"
        cells = 2 + (len(processes_for(shape.kind)) - 1 if sid in brownian else 0)
        worst += cost.worst_case_seconds
        # the probe's time is PROBE_REPLICATES replicates plus the window's envelope null, which every chunk pays once
        envelope = int(shape.window.envelope_replicates or 0) if shape.window is not None else 0
        chunk = cost.seconds_per_replicate * PROBE_REPLICATES * (min(CHUNK, replicates) + envelope) / (
            PROBE_REPLICATES + envelope)
        usual += chunk * cells
    echo(f"calibration of claim 3's rule at {len(shapes)} file shape(s) "
         f"({', '.join(f'T={len(s.times)} N={s.n_walkers} d={s.d}' for s in shapes.values())}), {jobs} worker(s): "
         f"usually about {usual / jobs:.0f} s (every gate decided after {min(CHUNK, replicates)} replicates), at "
         f"most {worst / jobs:.0f} s ({replicates} replicates per null); --no-calibration skips it")
    t0 = time.perf_counter()
    out = tmp / "stats" / "calibration.parquet"
    stats_calibrate([summary], out, stats=stats, replicates=replicates, jobs=jobs)
    return out, {"shapes": len(shapes), "usual_seconds": usual / jobs, "worst_case_seconds": worst / jobs,
                 "jobs": jobs, "seconds": time.perf_counter() - t0}


def analyze_pretrained(req: PretrainedRequest, *, stats: StatsConfig | None = None,
                       probes: ProbeConfig | None = None, echo: Callable[[str], None] | None = None) -> dict:
    """Capture and analyse one local checkpoint (module docstring); returns pretrained.json's content.

    Args:
        echo: where the calibration's cost estimate goes before it runs (default: the log).

    Raises:
        ModelUnavailable: a package not installed, no weights, a sha256 mismatch (a ValueError): nothing is written.
        ValueError: no model in the folder, an unknown model_type (UnknownModelType), attention weights
            unavailable (AttentionUnavailable), bad inputs or checkpoints: nothing is written.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"  # never a network call, whatever the environment says
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    echo = echo or log.info
    stats, probes = stats or StatsConfig(), probes or ProbeConfig()
    t0 = time.perf_counter()
    resolved = resolve_model(req.model_dir, sha256=req.sha256)  # sha256 checked before anything reads the weights
    import transformers
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # stderr stays the one-line error channel of the CLI
    model_dir = resolved.path
    config = model_config(model_dir)
    module_map = _read_module_map(req.module_map)
    adapter = adapter_for(config.model_type, module_map)
    checkpoints = find_checkpoints(req.checkpoints) if req.checkpoints else []
    model = _load_model(model_dir)
    inputs = build_inputs(model_dir, config, adapter.modality, req.inputs)
    t_cap = time.perf_counter()
    cap = capture_model(model, adapter, inputs)
    capture_s = time.perf_counter() - t_cap
    null = capture_model(_random_init(config, req.null_seed), adapter, inputs)
    L, B, n, d = cap.ln_hat.shape
    H, H_kv = head_counts(config, adapter)
    name = req.name or resolved.name
    stats = stats_for_norm(stats, adapter.norm_kind, d)
    # 0 replicates, like calibrate=False, means no calibration (the config's calibration_replicates: 0)
    asked = stats.calibration_replicates if req.calibration_replicates is None else req.calibration_replicates
    replicates = int(asked) if req.calibrate else 0
    with staged_folder(req.output_dir(name), merge=True, last="pretrained.json") as tmp:
        writer = TrajectoryWriter(tmp / "trajectories", name, placement=adapter.placement, norm_kind=adapter.norm_kind,
                                  causal=adapter.causal, n_inputs=B, n_tokens=n, cls_token=adapter.modality == "image")
        depth_steps = writer.depth(cap, PRETRAINED_CAPTURE, steps=req.depth_steps)
        writer.attention(null, NULL_CAPTURE, step=0, label=f"random init of the same config (seed {req.null_seed})")
        writer.attention(cap, PRETRAINED_CAPTURE, step=None, label="pretrained")
        series = capture_series(checkpoints, _load_model, adapter, inputs, writer, probes=probes) if checkpoints else []
        writer.index()
        from brownformer.stats_stage.run_stats import stats_for_run
        t_stats = time.perf_counter()
        stats_for_run(tmp / "trajectories", tmp / "stats", stats=stats, run_id=name)
        stats_s = time.perf_counter() - t_stats
        calibration, cal_cost = (_calibrate(tmp, stats, replicates, req.jobs, echo) if replicates
                                 else (None, {"note": "--no-calibration"}))
        claims = pretrained_claims(name, tmp / "stats", stats, calibration=calibration,
                                   replicates=replicates, calibrated=bool(replicates))
        result = {
            "name": name, "status": "analysed", "model_dir": str(model_dir), "origin": resolved.origin,
            "model_type": config.model_type, "architecture": type(model).__name__,
            "adapter": {"placement": adapter.placement, "norm_kind": adapter.norm_kind, "causal": adapter.causal,
                        "modality": adapter.modality, "rotary": adapter.rotary, "notes": adapter.notes,
                        "module_map": str(req.module_map) if req.module_map else None},
            "shape": {"n_layers": L, "d_model": d, "n_heads": H, "n_kv_heads": H_kv},
            "depth_steps": depth_steps,
            "weights_sha256": resolved.origin["sha256"],
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
            "inputs": {**req.inputs.describe(), "n_inputs": B, "n_tokens": n, "note": OFF_DISTRIBUTION_NOTE},
            "qk_max_deviation": cap.qk_max_deviation,
            "null": {"kind": "random init of the same config", "seed": req.null_seed, "capture": NULL_CAPTURE},
            "checkpoints": series,
            "calibration": {"replicates": replicates, **cal_cost,
                            "path": "stats/calibration.parquet" if calibration else None},
            "claims": claims, "trajectories": "trajectories/index.json", "stats": "stats/summary.json",
            "cost": {"capture_seconds": capture_s, "seconds_per_layer_token": capture_s / (L * B * n),
                     "stats_seconds": stats_s, "calibration_seconds": cal_cost.get("seconds", 0.0),
                     "wall_seconds": time.perf_counter() - t0, "threads": torch.get_num_threads()},
        }
        write_json(tmp / "pretrained.json", result)
    log.info("%s (%s): %s", name, config.model_type,
             ", ".join(f"{k}: {v['verdict']}" for k, v in result["claims"].items()))
    return result
