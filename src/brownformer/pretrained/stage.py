"""The `brownformer pretrained MODEL_DIR --out DIR` stage: capture, trajectories, statistics, pretrained.json.

Offline only: HF_HUB_OFFLINE=1 is set and every load uses local_files_only=True. Everything is built in a
staging folder beside DIR and moved in at the end, so a bad input (no model, an unknown model_type,
attention weights unavailable, ...) writes nothing. DIR then holds:
    trajectories/   the project's trajectory layout (trajectories.py), index.json
    stats/          per-file statistics and summary.json (`brownformer stats run`), calibration.parquet
    pretrained.json model, inputs, provenance (sha256 of the weights, versions), each claim's verdict
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from brownformer.config import ProbeConfig, StatsConfig
from brownformer.io import sha256_file, staged_folder, write_json

from .adapters import ModuleMap, adapter_for
from .checkpoints import capture_series, find_checkpoints, weight_files
from .hooked_forward import capture_model, head_counts
from .inputs import InputSpec, build_inputs
from .pretrained_claims import pretrained_claims, stats_for_norm
from .trajectories import NULL_CAPTURE, PRETRAINED_CAPTURE, TrajectoryWriter

log = logging.getLogger(__name__)

__all__ = ["PretrainedRequest", "analyze_pretrained", "model_config", "OFF_DISTRIBUTION_NOTE"]

OFF_DISTRIBUTION_NOTE = ("descriptive: the probe inputs (windows of a local text, or digits resized to the model's "
                         "image size) may be off-distribution for the model, and one checkpoint is one model, not a "
                         "replicated experiment")


@dataclass(frozen=True)
class PretrainedRequest:
    """What to analyse: the model folder, its inputs, an optional checkpoint series and module map."""
    model_dir: Path
    out: Path
    inputs: InputSpec
    name: str | None = None
    checkpoints: str | None = None
    module_map: Path | None = None
    calibration_replicates: int = 0
    null_seed: int = 0


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


def _weights_provenance(model_dir: Path) -> dict:
    files = {f.name: sha256_file(f) for f in weight_files(model_dir)}
    combined = hashlib.sha256("".join(f"{k}:{v}\n" for k, v in sorted(files.items())).encode()).hexdigest()
    return {"files": files, "combined": combined}


def analyze_pretrained(req: PretrainedRequest, *, stats: StatsConfig | None = None,
                       probes: ProbeConfig | None = None) -> dict:
    """Capture and analyse one local checkpoint (module docstring); returns pretrained.json's content.

    Raises:
        ValueError: no model in the folder, an unknown model_type (UnknownModelType), attention weights
            unavailable (AttentionUnavailable), bad inputs or checkpoints: nothing is written.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"  # never a network call, whatever the environment says
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import transformers
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # stderr stays the one-line error channel of the CLI
    stats, probes = stats or StatsConfig(), probes or ProbeConfig()
    t0 = time.perf_counter()
    model_dir = Path(req.model_dir)
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
    name = req.name or model_dir.resolve().name
    stats = stats_for_norm(stats, adapter.norm_kind, d)
    with staged_folder(req.out, merge=True, last="pretrained.json") as tmp:
        writer = TrajectoryWriter(tmp / "trajectories", name, placement=adapter.placement, norm_kind=adapter.norm_kind,
                                  causal=adapter.causal, n_inputs=B, n_tokens=n, cls_token=adapter.modality == "image")
        writer.depth(cap, PRETRAINED_CAPTURE)
        writer.attention(null, NULL_CAPTURE, step=0, label=f"random init of the same config (seed {req.null_seed})")
        writer.attention(cap, PRETRAINED_CAPTURE, step=None, label="pretrained")
        series = capture_series(checkpoints, _load_model, adapter, inputs, writer, probes=probes) if checkpoints else []
        writer.index()
        from brownformer.stats_stage.run_stats import stats_for_run
        stats_for_run(tmp / "trajectories", tmp / "stats", stats=stats, run_id=name)
        calibration = None
        if req.calibration_replicates > 0:
            from brownformer.stats_stage.stages import stats_calibrate
            calibration = tmp / "stats" / "calibration.parquet"
            stats_calibrate([tmp / "stats" / "summary.json"], calibration, stats=stats,
                            replicates=req.calibration_replicates)
        claims = pretrained_claims(name, tmp / "stats", stats, calibration=calibration,
                                   replicates=req.calibration_replicates)
        result = {
            "name": name, "model_dir": str(model_dir), "model_type": config.model_type,
            "architecture": type(model).__name__,
            "adapter": {"placement": adapter.placement, "norm_kind": adapter.norm_kind, "causal": adapter.causal,
                        "modality": adapter.modality, "rotary": adapter.rotary, "notes": adapter.notes,
                        "module_map": str(req.module_map) if req.module_map else None},
            "shape": {"n_layers": L, "d_model": d, "n_heads": H, "n_kv_heads": H_kv},
            "weights_sha256": _weights_provenance(model_dir),
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
            "inputs": {**req.inputs.describe(), "n_inputs": B, "n_tokens": n, "note": OFF_DISTRIBUTION_NOTE},
            "qk_max_deviation": cap.qk_max_deviation,
            "null": {"kind": "random init of the same config", "seed": req.null_seed, "capture": NULL_CAPTURE},
            "checkpoints": series,
            "calibration": {"replicates": req.calibration_replicates,
                            "path": "stats/calibration.parquet" if calibration else None},
            "claims": claims, "trajectories": "trajectories/index.json", "stats": "stats/summary.json",
            "cost": {"capture_seconds": capture_s, "seconds_per_layer_token": capture_s / (L * B * n),
                     "wall_seconds": time.perf_counter() - t0, "threads": torch.get_num_threads()},
        }
        write_json(tmp / "pretrained.json", result)
    log.info("%s (%s): %s", name, config.model_type,
             ", ".join(f"{k}: {v['verdict']}" for k, v in result["claims"].items()))
    return result
