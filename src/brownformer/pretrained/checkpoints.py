"""A series of checkpoints of one training run (claims 3b and 3c on a real run).

`--checkpoints GLOB` matches checkpoint folders (each a Hugging Face folder with config.json and
*.safetensors weights, e.g. Pythia's step1000/ ... or a Trainer's checkpoint-500/ ...); the clock is the
last integer in each folder's name (its training step). Per checkpoint: the pre-affine norm output of the
probe tokens at every layer (training/ln_l<l>.npy) and the rows of W_Q, W_K, W_V, W_O of every layer
(weights/l<l>_<m>.npy), projected to `projection_dim` columns by a fixed seeded Gaussian matrix when a
matrix has more than `max_weight_size` entries (the same rule and projection as the project's own runs).
"""
from __future__ import annotations

import glob
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from brownformer.config import ProbeConfig
from brownformer.io import sha256_file
from brownformer.probes.capture import MATRICES, projection_matrix

from .adapters import Adapter
from .hooked_forward import capture_model, head_counts
from .packaged import weight_files

log = logging.getLogger(__name__)

__all__ = ["Checkpoint", "find_checkpoints", "capture_series"]


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int


def find_checkpoints(pattern: str) -> list[Checkpoint]:
    """Checkpoint folders matching `pattern`, ordered by the step number in their names.

    Raises:
        ValueError: fewer than 3 matches, a folder without config.json or safetensors weights, no step number
            in a name, or two folders with the same step.
    """
    dirs = sorted(Path(p) for p in glob.glob(pattern) if Path(p).is_dir())
    if len(dirs) < 3:
        raise ValueError(f"--checkpoints {pattern!r}: {len(dirs)} checkpoint folder(s) found, need at least 3")
    out = []
    for d in dirs:
        if not (d / "config.json").is_file():
            raise ValueError(f"checkpoint {d}: no config.json")
        if not list(d.glob("*.safetensors")):
            raise ValueError(f"checkpoint {d}: no *.safetensors weights")
        numbers = re.findall(r"\d+", d.name)
        if not numbers:
            raise ValueError(f"checkpoint {d}: no step number in the folder name")
        out.append(Checkpoint(d, int(numbers[-1])))
    out.sort(key=lambda c: c.step)
    steps = [c.step for c in out]
    if len(set(steps)) != len(steps):
        raise ValueError(f"--checkpoints {pattern!r}: repeated step numbers {steps}")
    return out


def _projections(blocks_weights: dict, probes: ProbeConfig) -> tuple[dict, dict]:
    """Per (layer, matrix): the projection tensor or None, and its sidecar description."""
    tensors, info = {}, {}
    for (l, m), w in blocks_weights.items():
        rows, cols = w.shape
        projected = rows * cols > probes.max_weight_size
        info[(l, m)] = {"projected": projected, "matrix_shape": [rows, cols]}
        tensors[(l, m)] = None
        if projected:
            info[(l, m)].update(kind="gaussian_rows", dim=probes.projection_dim, seed=probes.seed)
            tensors[(l, m)] = torch.from_numpy(projection_matrix(probes.seed, l, m, cols, probes.projection_dim))
    return tensors, info


def _matrices(model, adapter: Adapter) -> dict:
    H, H_kv = head_counts(getattr(model, "config", None), adapter)
    out = {}
    for l, block in enumerate(adapter.blocks(model)):
        mats = adapter.head_weights(block, H, H_kv).matrices()
        for m in MATRICES:
            out[(l, m)] = mats[m].detach().float()
    return out


def capture_series(checkpoints: list[Checkpoint], load, adapter: Adapter, inputs: torch.Tensor, writer,
                   *, probes: ProbeConfig) -> list[dict]:
    """Fill training/ and weights/ for every checkpoint (one model in memory at a time).

    Args:
        checkpoints: find_checkpoints output; load: path -> model (eval mode, eager attention).
        writer: the TrajectoryWriter; probes: max_weight_size, projection_dim, seed.

    Returns:
        [{"path", "step", "sha256": {file: hex}}] per checkpoint.
    """
    steps, names = [c.step for c in checkpoints], [str(c.path) for c in checkpoints]
    training, weights, projections, records = None, None, None, []
    for i, ckpt in enumerate(checkpoints):
        model = load(ckpt.path)
        cap = capture_model(model, adapter, inputs)
        L, d = cap.ln_hat.shape[0], cap.ln_hat.shape[-1]
        if training is None:
            training = writer.open_training(L, d, steps, names)
        elif len(training) != L:
            raise ValueError(f"checkpoint {ckpt.path}: {L} layers, the first checkpoint has {len(training)}")
        for l in range(L):
            training[l][i] = cap.ln_hat[l].reshape(-1, d)
        if adapter.weights is not None:
            mats = _matrices(model, adapter)
            if weights is None:
                projections, info = _projections(mats, probes)
                shapes = {k: (w.shape[0], probes.projection_dim if info[k]["projected"] else w.shape[1])
                          for k, w in mats.items()}
                weights = writer.open_weights(shapes, steps, names, info)
            for key, w in mats.items():
                P = projections[key]
                weights[key][i] = (w if P is None else w @ P).numpy()
        records.append({"path": str(ckpt.path), "step": ckpt.step,
                        "sha256": {f.name: sha256_file(f) for f in weight_files(ckpt.path)}})
        log.info("checkpoint %s (step %d): captured", ckpt.path, ckpt.step)
        del model
    for arr in [*(training or {}).values(), *(weights or {}).values()]:
        arr.flush()
    return records
