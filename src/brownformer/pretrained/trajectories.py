"""Captures of a pretrained model -> trajectory files in the project's layout (docs/ARTIFACTS.md).

Capture 0 is the random-init model of the same config (attention only: claim 2's step-0 null);
capture 1 is the pretrained model (depth files and attention). With a checkpoint series, training/
and weights/ hold one time point per checkpoint, on the clock of the checkpoints' step numbers.
Every array has its sidecar: {"kind", "time", "times", "walkers", "source", ...} plus "n_inputs" /
"n_tokens" (tokens of one input are dependent walkers), "sum_zero", "ln", "norm_kind".

Depth steps (`DEPTH_STEPS`): "sublayer" (the default where the adapter knows both norms of a block) reads the
residual stream after every sub-layer, attention and MLP each one step of half a layer: a 6-layer model gives
12 norm points and 13 residual states instead of 6 and 7, above the battery's minimum of 8 time points. It
assumes that the two kinds of update share one clock; a walk whose attention and MLP steps differ in size
reads as non-Brownian there, which is the claim's question. "block" reads one point per block.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from brownformer.io import sidecar_path, write_json
from brownformer.probes.capture import sphere_normalize

from .settings import DEPTH_STEPS

__all__ = ["TrajectoryWriter", "PRETRAINED_CAPTURE", "NULL_CAPTURE", "DEPTH_STEPS", "SUBLAYER_NOTE"]

SUBLAYER_NOTE = ("depth at sub-layer resolution: the attention and the MLP update are one step each (half a layer "
                 "of time); the clock assumes they are steps of one walk")

NULL_CAPTURE = 0
PRETRAINED_CAPTURE = 1
_DRIFT_WEIGHTS = ("per_walker: each row of W follows its own gradient, so each row's linear drift over the clock "
                  "is removed (a shared drift would leave most of it in)")


class TrajectoryWriter:
    """Writes arrays with sidecars under `root` and collects the index.json entries."""

    def __init__(self, root: Path, name: str, *, placement: str, norm_kind: str, causal: bool, n_inputs: int,
                 n_tokens: int, cls_token: bool):
        self.root, self.name, self.entries = Path(root), name, []
        self.placement, self.norm_kind, self.causal = placement, norm_kind, causal
        self.B, self.n = n_inputs, n_tokens
        self.walkers = (f"probe token: walker i*{n_tokens} + t is token t of probe input i ({n_inputs} inputs x "
                        f"{n_tokens} tokens)" + ("; token 0 of each input is the CLS token" if cls_token else ""))

    @property
    def centered(self) -> bool:
        return self.norm_kind == "layernorm"

    def _common(self) -> dict:
        return {"ln": self.placement, "norm_kind": self.norm_kind, "n_inputs": self.B, "n_tokens": self.n}

    def save(self, rel: str, array: np.ndarray, sidecar: dict, *, category: str, tensor: str, layer=None,
             capture=None) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, np.ascontiguousarray(array, dtype=np.float32))
        write_json(sidecar_path(path), sidecar)
        self.entries.append({"path": rel, "category": category, "kind": sidecar["kind"], "time": sidecar.get("time"),
                             "layer": layer, "tensor": tensor, "capture": capture})

    def _source(self, tensor: str, capture: int, **kw) -> dict:
        return {"run": self.name, "head": None, "layer": None, "tensor": tensor, "captures": [capture], **kw}

    def depth(self, cap, k: int, *, steps: str = "sublayer") -> str:
        """depth/ln_c<k>, lnaff_c<k>, resid_c<k> of one capture (ModelCapture), at `steps` resolution (module
        docstring; "block" where the capture has no sub-layer arrays). Returns the resolution used."""
        if steps not in DEPTH_STEPS:
            raise ValueError(f"depth steps must be one of {DEPTH_STEPS}, got {steps!r}")
        L, B, n, d = cap.ln_hat.shape
        sub = steps == "sublayer" and cap.sub_hat is not None
        if sub:
            ln_hat, ln_out, resid = cap.sub_hat, cap.sub_out, cap.sub_resid
            # pre-LN norms read the state before each sub-layer, post-LN norms the state after it
            first = 0.0 if self.placement == "pre" else 0.5
            ln_times = [first + 0.5 * i for i in range(2 * L)]
            resid_times = [0.5 * i for i in range(2 * L + 1)]
            extra = {"depth_steps": "sublayer", "depth_steps_note": SUBLAYER_NOTE}
        else:
            ln_hat, ln_out, resid = cap.ln_hat, cap.ln_out, cap.resid
            ln_times, resid_times = list(range(L)), list(range(L + 1))
            extra = {"depth_steps": "block"}
        T = len(ln_times)
        self.save(f"depth/ln_c{k}.npy", (ln_hat / math.sqrt(d)).reshape(T, B * n, d), {
            "kind": "sphere", "time": "layer", "times": ln_times, "walkers": self.walkers, "step": None,
            "source": self._source("norm output before its affine map / sqrt(d)", k), "sum_zero": self.centered,
            "radius": "not renormalised: the norm's eps makes |z| <= 1 where a token's variance is small",
            **extra, **self._common()}, category="depth", tensor="ln", capture=k)
        self.save(f"depth/lnaff_c{k}.npy", ln_out.reshape(T, B * n, d), {
            "kind": "euclidean", "time": "layer", "times": ln_times, "walkers": self.walkers, "step": None,
            "source": self._source("norm output after its affine map (raw)", k), **extra, **self._common()},
            category="depth", tensor="ln_affine", capture=k)
        self.save(f"depth/resid_c{k}.npy", resid.reshape(len(resid_times), B * n, d), {
            "kind": "euclidean", "time": "layer", "times": resid_times, "walkers": self.walkers, "step": None,
            "source": self._source("residual stream", k),
            "note": f"time l < {L}: input of block l; time {L}: output of the last block (before any final norm)"
                    + ("; time l + 0.5: the state between block l's attention and MLP sub-layers" if sub else ""),
            **extra, **self._common()}, category="depth", tensor="resid", capture=k)
        return extra["depth_steps"]

    def attention(self, cap, k: int, *, step: int | None, label: str) -> None:
        """attention/c<k>.npy (L, H, B, n, n) and its features (L, B, n, d): the block inputs, normalised as the
        model's norm would (centred or not) and divided by sqrt(d)."""
        L, B, n, d = cap.ln_hat.shape
        feats = sphere_normalize(torch.from_numpy(cap.resid[:L]), centered=self.centered).numpy() / math.sqrt(d)
        A = cap.attn.astype(np.float64)
        A = A / A.sum(-1, keepdims=True)  # float32 rounding: rows back to sum 1 for the row-stochastic check
        common = {"time": None, "times": [], "causal": bool(self.causal), "walkers": None, "step": step,
                  "model": label}
        self.save(f"attention/c{k}.npy", A, {"kind": "attention", "axes": ["layer", "head", "input", "query", "key"],
                                             "features": f"attention/c{k}_features.npy",
                                             "source": self._source("attention probabilities", k), **common},
                  category="attention", tensor="attn", capture=k)
        self.save(f"attention/c{k}_features.npy", feats, {
            "kind": "features", "axes": ["layer", "input", "token", "dim"],
            "source": self._source("block input, sphere-normalised", k), **common},
            category="attention", tensor="features", capture=k)

    def _register(self, rel: str, sidecar: dict, *, category: str, tensor: str, layer=None) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(sidecar_path(path), sidecar)
        self.entries.append({"path": rel, "category": category, "kind": sidecar["kind"], "time": sidecar.get("time"),
                             "layer": layer, "tensor": tensor, "capture": None})
        return path

    def open_training(self, L: int, d: int, steps: list[int], checkpoints: list[str]) -> dict[int, np.memmap]:
        """training/ln_l<l>.npy (C, N, d) memory-mapped: layer l's pre-affine norm output / sqrt(d) per checkpoint."""
        out = {}
        for l in range(L):
            path = self._register(f"training/ln_l{l}.npy", {
                "kind": "sphere", "time": "step", "times": list(steps), "walkers": self.walkers,
                "source": {"run": self.name, "layer": l, "head": None, "tensor": "norm output before affine / sqrt(d)",
                           "checkpoints": checkpoints, "steps": list(steps)},
                "sum_zero": self.centered, "clocks": {"step": list(steps)},
                "clock_reason": "the checkpoints' step numbers (a series saved without learning rates)",
                **self._common()}, category="training", tensor="ln", layer=l)
            shape = (len(steps), self.B * self.n, d)  # (checkpoints, walkers, d)
            out[l] = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape)
        return out

    def open_weights(self, shapes: dict, steps: list[int], checkpoints: list[str], projection: dict) -> dict:
        """weights/l<l>_<m>.npy (C, rows, cols) memory-mapped: rows of W_m per checkpoint (projected when large)."""
        out = {}
        for (l, m), (rows, cols) in sorted(shapes.items()):
            proj = projection[(l, m)]
            walkers = (f"row r of W_{m.upper()} ({rows} output units)"
                       + (f", projected to {cols} dims (gaussian_rows, seed {proj['seed']})" if proj["projected"]
                          else f" over {cols} inputs"))
            path = self._register(f"weights/l{l}_{m}.npy", {
                "kind": "euclidean", "time": "step", "times": list(steps), "walkers": walkers,
                "source": {"run": self.name, "layer": l, "head": None, "tensor": f"W_{m.upper()}",
                           "checkpoints": checkpoints, "steps": list(steps)},
                "projection": proj, "clocks": {"step": list(steps)}, "drift": "per_walker",
                "drift_reason": _DRIFT_WEIGHTS}, category="weights", tensor=m, layer=l)
            out[(l, m)] = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(len(steps), rows, cols))
        return out

    def index(self) -> None:
        write_json(self.root / "index.json", {"run": self.name, "files": self.entries})
