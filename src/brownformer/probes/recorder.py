"""ProbeRecorder: a training callback that fills the capture store at the scheduled steps.

It must not change training. It never runs anything through the training model (K-FAC hooks sit
on its nn.Linear layers): it copies the weights into a cached, hook-free probe model in eval mode
and works there. Its randomness comes from seeded numpy Generators and stateless batches; the
probe model is built under `torch.random.fork_rng` so the global RNG is left where it was.
"""
from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn as nn

from brownformer.config import RunPlan
from brownformer.data import PreparedData, probe_inputs, sample_batch
from brownformer.probes.capture import (MATRICES, attention_weights, capture_activations, gradient_noise,
                                        projection_matrix)
from brownformer.probes.capture_store import CaptureStore
from brownformer.probes.schedule import capture_schedule, noise_captures

log = logging.getLogger(__name__)

__all__ = ["ProbeRecorder", "NOISE_SEED_OFFSET"]

NOISE_SEED_OFFSET = 10_000  # noise batches use seed probes.seed + offset + k: never a training seed's batches


def _state_dict(model: nn.Module) -> dict:
    # torch.compile wraps the model; its state_dict keys carry an "_orig_mod." prefix.
    return {k.removeprefix("_orig_mod."): v for k, v in model.state_dict().items()}


class ProbeRecorder:
    """Callback `rec(step, model, lr_sum, lr_sq_sum)` capturing probes at `capture_schedule` steps.

    Args:
        plan: the run's plan (ExperimentConfig.plan: probes, train.steps, train.batch_size, the model).
        data: the run's prepared dataset (probe inputs from "val", noise batches from "train").
        store_dir: the capture store folder (results/runs/<R>/probes).
        device: where the probe model runs.
        model_factory: builds a fresh model of the run's configuration (weights are overwritten).
    """

    def __init__(self, plan: RunPlan, data: PreparedData, store_dir: str | Path, device: torch.device,
                 model_factory: Callable[[], nn.Module]):
        self.plan, self.spec, self.data = plan, plan.spec, data
        self.probes = plan.probes
        self.device = torch.device(device)
        self.model_factory = model_factory
        self.mcfg = plan.model
        self.seq_len = self.mcfg.seq_len if data.kind == "text" else None
        self.schedule = capture_schedule(self.probes, plan.train.steps)
        self._capture_of_step = {s: k for k, s in enumerate(self.schedule)}
        self.inputs = probe_inputs(data, n=self.probes.n_inputs, seed=self.probes.seed, seq_len=self.seq_len)
        self.store = CaptureStore(store_dir)
        self._probe_model: nn.Module | None = None
        self._projections: dict | None = None
        self._meta = self._init_meta()

    # -- metadata ---------------------------------------------------------------------------
    def _projection_info(self, d: int) -> tuple[bool, dict]:
        projected = d * d > self.probes.max_weight_size
        info = {"projected": projected, "matrix_shape": [d, d]}
        if projected:
            info.update(kind="gaussian_rows", dim=self.probes.projection_dim, seed=self.probes.seed,
                        formula="W @ R, R = N(0, 1/dim) of shape (in, dim) from numpy "
                                "default_rng([seed, 7919, layer, index of q|k|v|o])")
        return projected, info

    def _n_tokens(self) -> int:
        if self.data.kind == "text":
            return int(self.inputs.shape[1])
        C, H, W = self.data.meta["image_shape"]
        return (H // self.mcfg.patch_size) * (W // self.mcfg.patch_size) + 1  # patches + CLS

    def _describe(self) -> dict:
        m, dtype = self.mcfg, self.probes.dtype
        return {
            "run": self.spec.run_id, "config_hash": self.plan.config_hash, "arch": m.arch, "ln": m.ln,
            "causal": m.arch == "lm", "n_layers": m.n_layers, "d_model": m.d_model, "n_heads": m.n_heads,
            "n_inputs": int(self.inputs.shape[0]), "n_tokens": self._n_tokens(),
            "cls_index": 0 if m.arch == "vit" else None, "dataset_kind": self.data.kind,
            "steps": self.plan.train.steps, "batch_size": self.plan.train.batch_size,
            "schedule": self.schedule, "noise_captures": noise_captures(len(self.schedule), self.probes.noise_every),
            "probes": asdict(self.probes), "projection": self._projection_info(m.d_model)[1],
            "probe_inputs": "probe_inputs(data, n=probes.n_inputs, seed=probes.seed): validation split",
            "noise_batches": f"sample_batch(train, seed=probes.seed + {NOISE_SEED_OFFSET} + k, step=j), batch "
                             "train.batch_size, for j < noise_samples; step=noise_samples with batch "
                             "noise_large_batch for the reference gradient",
            "ln_site": "LN1 of each block (its input: the block input for pre-LN, x + Attn(x) for post-LN); "
                       + ("ln 'none': the raw stream scaled to norm sqrt(d)" if m.ln == "none" else
                          "ln_hat = LayerNorm without the affine, with the module's eps"),
            "ln_none_flag": m.ln == "none",
            "eval_mode": True,
            "arrays": {"resid": f"(L+1, B, n, d) {dtype}", "ln_hat": f"(L, B, n, d) {dtype}",
                       "ln_out": f"(L, B, n, d) {dtype}", "attn": f"(L, H, B, n, n) {dtype}",
                       "weights": "(L, 4, out, in|dim) float32, q k v o",
                       "noise": "(L, 4, M, p) float32, only where has_noise"},
            "capture_seconds_total": None,  # written after the last capture; the index has per-capture seconds
        }

    def _init_meta(self) -> dict:
        meta, old = self._describe(), self.store.read_meta()
        if old is not None and (old.get("config_hash"), old.get("run")) != (meta["config_hash"], meta["run"]):
            raise RuntimeError(f"{self.store.root} holds captures of another run or config "
                               f"({old.get('run')}, hash {str(old.get('config_hash'))[:12]}); "
                               "delete the run folder to start over")
        self.store.write_meta(meta)
        return meta

    # -- capture ----------------------------------------------------------------------------
    def _copy_of(self, model: nn.Module) -> nn.Module:
        if self._probe_model is None:
            devices = [self.device] if self.device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices):  # building a model draws its init from the global RNG
                self._probe_model = self.model_factory().to(self.device)
            self._probe_model.eval()  # eval: no dropout, so no RNG draws and fixed features
        self._probe_model.load_state_dict(_state_dict(model))
        return self._probe_model

    def _projection_tensors(self) -> dict:
        if self._projections is None:
            d = self.mcfg.d_model
            projected, _ = self._projection_info(d)
            self._projections = {
                (l, m): (torch.from_numpy(projection_matrix(self.probes.seed, l, m, d, self.probes.projection_dim))
                         .to(self.device) if projected else None)
                for l in range(self.mcfg.n_layers) for m in MATRICES}
        return self._projections

    def _noise_batches(self, k: int):
        seed = self.probes.seed + NOISE_SEED_OFFSET + k
        bs, M = self.plan.train.batch_size, self.probes.noise_samples
        batches = [sample_batch(self.data, "train", step=j, seed=seed, batch_size=bs, seq_len=self.seq_len)
                   for j in range(M)]
        large = sample_batch(self.data, "train", step=M, seed=seed, batch_size=self.probes.noise_large_batch,
                             seq_len=self.seq_len)
        to = lambda b: tuple(t.to(self.device) for t in b)  # noqa: E731
        return [to(b) for b in batches], to(large)

    def __call__(self, step: int, model: nn.Module, lr_sum: float, lr_sq_sum: float) -> None:
        k = self._capture_of_step.get(step)
        if k is None or k in self.store.captured:
            return
        t0 = time.perf_counter()
        probe = self._copy_of(model)
        projections = self._projection_tensors()
        dtype = np.dtype(self.probes.dtype)
        acts = capture_activations(probe, self.inputs.to(self.device))
        arrays = {name: t.cpu().numpy().astype(dtype) for name, t in acts.items()}
        arrays["weights"] = attention_weights(probe, projections).float().cpu().numpy()
        has_noise = k % self.probes.noise_every == 0
        if has_noise:
            arrays["noise"] = gradient_noise(probe, *self._noise_batches(k), projections).float().cpu().numpy()
        arrays.update(step=np.int64(step), lr_sum=np.float64(lr_sum), lr_sq_sum=np.float64(lr_sq_sum))
        row = {"step": step, "lr_sum": float(lr_sum), "lr_sq_sum": float(lr_sq_sum), "has_noise": has_noise}
        self.store.write_npz(k, arrays)
        self.store.add_row(k, {**row, "seconds": time.perf_counter() - t0})
        last = k == len(self.schedule) - 1
        if last:  # index.parquet holds every capture's seconds; meta gets the total once, at the end
            self._meta["capture_seconds_total"] = float(self.store.index["seconds"].sum())
            self.store.write_meta(self._meta)
        if last or k % 10 == 0:
            log.info("%s: capture %d/%d at step %d; store %.1f MB, capture time %.1fs so far",
                     self.spec.run_id, k + 1, len(self.schedule), step, self.store.size_bytes() / 2**20,
                     float(self.store.index["seconds"].sum()))
