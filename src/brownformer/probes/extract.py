"""The extract stage: a run's capture store -> the trajectory files of docs/ARTIFACTS.md.

One pass over the captures, one capture in memory at a time; arrays that span captures are
written straight into memory-mapped .npy files. Everything is built in a staging folder beside
`out_dir` and swapped in at the end, so a failed extraction leaves the previous one intact.
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from brownformer.config import ExperimentConfig
from brownformer.io import sidecar_path, staged_folder, write_json
from brownformer.probes.capture_store import CaptureStore
from brownformer.probes.layout import MATRICES
from brownformer.probes.schedule import depth_subset

log = logging.getLogger(__name__)

__all__ = ["extract_trajectories", "N_PER_CAPTURE_FILES"]

N_PER_CAPTURE_FILES = 8  # depth and attention files for the first, last and ~6 evenly spaced captures
#: the clock of training-time trajectories (tokens and weights); the other clocks ride along in "clocks"
PRIMARY_CLOCK = "lr_sq_sum"
_CLOCK_REASON = ("sum of lr^2: SGD noise adds a variance proportional to lr^2 per step, so under the Brownian "
                 "null the weights (and the tokens they move) diffuse linearly in this clock; lr_sum (on which a "
                 "constant gradient's drift is linear) and step are kept as checks")
_WARMUP = ("handled by the clock: while the learning rate ramps up, lr^2 and hence the clock grow slowly, so "
           "warm-up steps count for little time")
_DRIFT_WEIGHTS = ("per_walker: each row of W follows its own gradient, so each row's drift is removed as a line in "
                  "the trajectory's clock (drift_clock, lr_sq_sum). A constant gradient drifts linearly in lr_sum, "
                  "not in lr_sq_sum, and a changing one in neither, so part of the drift can remain: the replica "
                  "files (results/replicas/<run>) remove any drift exactly, as the replica-mean path")
_GROUPS_WEIGHTS = ("one group: the rows of one matrix share their inputs and K-FAC's factors mix them, so they are not "
                   "independent walkers; one path gives point estimates only, intervals are over replicas")
_RADIUS_NOTE = ("not renormalised: LayerNorm's eps gives |z| = sqrt(var / (var + eps)) <= 1, below 1 where a "
                "token's variance is small (claim 1 is measured on these values); ln 'none' is exactly 1")


class _Writer:
    """Writes arrays with sidecars into the staging folder and collects index.json entries."""

    def __init__(self, root: Path, run: str):
        self.root, self.run, self.entries = root, run, []

    def _register(self, rel: str, sidecar: dict, category: str, layer, tensor: str, capture) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(sidecar_path(path), sidecar)
        self.entries.append({"path": rel, "category": category, "kind": sidecar["kind"],
                             "time": sidecar.get("time"), "layer": layer, "tensor": tensor, "capture": capture})

    def save(self, rel: str, array: np.ndarray, sidecar: dict, *, category: str, layer=None, tensor: str,
             capture=None) -> None:
        self._register(rel, sidecar, category, layer, tensor, capture)
        np.save(self.root / rel, array)

    def memmap(self, rel: str, shape: tuple[int, ...], sidecar: dict, *, category: str, layer=None,
               tensor: str) -> np.memmap:
        self._register(rel, sidecar, category, layer, tensor, None)
        return np.lib.format.open_memmap(self.root / rel, mode="w+", dtype=np.float32, shape=shape)


def _sidecar(kind: str, time: str | None, times: list, walkers: str, source: dict, **extra: Any) -> dict:
    return {"kind": kind, "time": time, "times": list(times), "walkers": walkers, "source": source, **extra}


def _rows_stochastic(p: np.ndarray) -> np.ndarray:
    # Stored probabilities are rounded (float16 by default); renormalise so rows sum to 1 again.
    p = p.astype(np.float32)
    return p / p.sum(axis=-1, keepdims=True)


def extract_trajectories(cfg: ExperimentConfig, run_dir: str | Path, out_dir: str | Path) -> dict:
    """Write every trajectory file of docs/ARTIFACTS.md for one run, plus index.json and summary.json.

    Args:
        cfg: the experiment config (used to check the store was written with it).
        run_dir: results/runs/<R>, holding probes/ (and manifest.json for the overhead figure).
        out_dir: the trajectories folder, replaced as a whole.
    Returns:
        The summary (also written to out_dir/summary.json).
    Raises:
        FileNotFoundError: no capture store in run_dir.
        ValueError: the store belongs to another config, or a capture fails its sha256 check.
    """
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    store = CaptureStore(run_dir / "probes")
    meta = store.read_meta()
    if meta is None or store.index.empty:
        raise FileNotFoundError(f"{run_dir / 'probes'}: no captures (was the run trained with probes enabled?)")
    if meta["config_hash"] != cfg.hash:
        log.warning("%s was captured under config hash %s, not the given config's %s",
                    run_dir / "probes", meta["config_hash"][:12], cfg.hash[:12])
    with staged_folder(out_dir) as tmp:
        writer = _Writer(tmp, meta["run"])
        depth_ks = _write_all(store, meta, writer, _momentum(cfg, meta["run"]))
        write_json(tmp / "index.json", {"run": meta["run"], "files": writer.entries})
        summary = _summary(store, meta, run_dir, writer.entries, depth_ks)
        write_json(tmp / "summary.json", summary)
    log.info("%s: %d trajectory files in %s (store %.1f MB)", meta["run"], len(writer.entries), out_dir,
             summary["store_mb"])
    return summary


def _momentum(cfg: ExperimentConfig, run: str) -> float | None:
    """The heavy-ball beta (AdamW's beta1) of the run's optimizer, for the training sidecars' "momentum" (claim 3's
    window and null carry it): 1 - 1/(its momentum time, ExperimentConfig.analysis_window); None for a run the
    config cannot resolve."""
    try:
        return 1.0 - 1.0 / cfg.analysis_window(run).momentum_steps
    except (KeyError, ValueError) as exc:
        log.warning("%s: no momentum for the training sidecars (%s)", run, exc)
        return None


def _write_all(store: CaptureStore, meta: dict, w: _Writer, momentum: float | None = None) -> list[int]:
    index = store.index
    L, d, B, n = meta["n_layers"], meta["d_model"], meta["n_inputs"], meta["n_tokens"]
    N, C, run = B * n, len(index), meta["run"]
    ks, steps = [int(k) for k in index["capture"]], [int(s) for s in index["step"]]
    clocks = {"step": steps, "lr_sum": [float(v) for v in index["lr_sum"]],
              "lr_sq_sum": [float(v) for v in index["lr_sq_sum"]]}
    noise_rows = [i for i, has in enumerate(index["has_noise"]) if has]
    per_capture = set(depth_subset(C, N_PER_CAPTURE_FILES))
    centered = meta["ln"] != "none"
    token_walkers = (f"probe token: walker i*{n} + t is token t of probe input i ({B} inputs x {n} tokens)"
                     + ("; token 0 of each input is the CLS token" if meta.get("cls_index") == 0 else ""))
    src = lambda **kw: {"run": run, "head": None, **kw}  # noqa: E731

    def ln_sidecar(layer: int) -> dict:
        return _sidecar("sphere", PRIMARY_CLOCK, clocks[PRIMARY_CLOCK], token_walkers,
                        src(layer=layer, tensor="ln_hat/sqrt(d)", captures=ks, steps=steps), ln=meta["ln"],
                        ln_none_flag=meta["ln_none_flag"], radius=_RADIUS_NOTE, n_inputs=B, n_tokens=n,
                        sum_zero=centered, clocks=clocks, clock_reason=_CLOCK_REASON, warmup=_WARMUP,
                        cls_index=meta.get("cls_index"), momentum=momentum)

    training = {l: w.memmap(f"training/ln_l{l}.npy", (C, N, d), ln_sidecar(l),
                            category="training", layer=l, tensor="ln") for l in range(L)}
    weights, noise = {}, {}
    for i, k in enumerate(tqdm(ks, desc=f"extract {run}", mininterval=5, disable=not log.isEnabledFor(logging.INFO))):
        cap = store.load(k)
        ln = cap["ln_hat"].astype(np.float32) / math.sqrt(d)  # (L, B, n, d), radius ~1
        for l in range(L):
            training[l][i] = ln[l].reshape(N, d)
        if not weights:
            weights = _open_weights(w, meta, cap["weights"].shape, ks, clocks, momentum)
        for (l, m), arr in weights.items():
            arr[i] = cap["weights"][l, MATRICES.index(m)]
        if "noise" in cap:
            if not noise:
                noise = _open_noise(w, meta, cap["noise"].shape, [ks[j] for j in noise_rows],
                                    [steps[j] for j in noise_rows])
            j = noise_rows.index(i)
            for (l, m), arr in noise.items():
                arr[j] = cap["noise"][l, MATRICES.index(m)]
        if i in per_capture:
            _write_capture_files(w, meta, cap, k, steps[i], token_walkers, centered)
    for arr in [*training.values(), *weights.values(), *noise.values()]:
        arr.flush()
    weights.clear(), noise.clear(), training.clear()
    return [ks[i] for i in sorted(per_capture)]


def _open_weights(w: _Writer, meta: dict, shape: tuple, ks: list, clocks: dict, momentum: float | None) -> dict:
    L, _, rows, cols = shape
    C, steps = len(ks), clocks["step"]
    proj = meta["projection"]
    walkers = (f"row r of W_<m> ({rows} output units), projected to {cols} dims ({proj.get('kind')}, seed "
               f"{proj.get('seed')})" if proj["projected"] else f"row r of W_<m> ({rows} output units) over {cols} inputs")
    # the rows of one matrix are one group: they share their inputs and K-FAC's factors mix them, so one path of one
    # matrix is one unit (its battery gives point estimates, no interval); intervals come from replicas
    return {(l, m): w.memmap(f"weights/l{l}_{m}.npy", (C, rows, cols), _sidecar(
        "euclidean", PRIMARY_CLOCK, clocks[PRIMARY_CLOCK], walkers.replace("<m>", m.upper()),
        {"run": meta["run"], "layer": l, "head": None, "tensor": f"W_{m.upper()}", "captures": ks, "steps": steps},
        projection=proj, clocks=clocks, clock_reason=_CLOCK_REASON, warmup=_WARMUP, drift="per_walker",
        drift_clock=PRIMARY_CLOCK, drift_reason=_DRIFT_WEIGHTS, groups=[0] * rows, groups_reason=_GROUPS_WEIGHTS,
        momentum=momentum),
        category="weights", layer=l, tensor=m)
        for l in range(L) for m in MATRICES}


def _open_noise(w: _Writer, meta: dict, shape: tuple, ks: list, steps: list) -> dict:
    L, _, M, p = shape
    pr = meta["probes"]
    walkers = (f"one of M={M} minibatch gradients (batch {meta['batch_size']}) minus the large-batch gradient "
               f"({pr['noise_large_batch']} examples) at that capture; flattened (out, in) weight gradient")
    return {(l, m): w.memmap(f"gradnoise/l{l}_{m}.npy", (len(ks), M, p), _sidecar(
        "euclidean", "step", steps, walkers,
        {"run": meta["run"], "layer": l, "head": None, "tensor": f"grad W_{m.upper()}", "captures": ks, "steps": steps},
        projection=meta["projection"], samples_independent_across_time=True),
        category="gradnoise", layer=l, tensor=m) for l in range(L) for m in MATRICES}


def unit_features(x: np.ndarray, *, centered: bool, eps: float = 1e-5) -> np.ndarray:
    """`capture.sphere_normalize(x) / sqrt(d)` in numpy (float64 inside), so that extraction needs no torch:
    LayerNorm without affine (centered: biased variance, the same eps) or x / |x| (not centered)."""
    x = np.asarray(x, dtype=np.float64)
    if centered:
        x = x - x.mean(axis=-1, keepdims=True)
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) / math.sqrt(x.shape[-1])
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _write_capture_files(w: _Writer, meta: dict, cap: dict, k: int, step: int, walkers: str, centered: bool) -> None:
    L, d = meta["n_layers"], meta["d_model"]
    B, n = meta["n_inputs"], meta["n_tokens"]
    source = {"run": meta["run"], "head": None, "captures": [k], "steps": [step]}
    # walkers i*n .. i*n+n-1 are the tokens of probe input i: the stats stage resamples inputs, not tokens
    common = {"ln": meta["ln"], "step": step, "n_inputs": B, "n_tokens": n}
    ln = cap["ln_hat"].astype(np.float32) / math.sqrt(d)  # (L, B, n, d)
    w.save(f"depth/ln_c{k}.npy", ln.reshape(L, B * n, d), _sidecar(
        "sphere", "layer", list(range(L)), walkers, {**source, "layer": None, "tensor": "ln_hat/sqrt(d)"},
        ln_none_flag=meta["ln_none_flag"], radius=_RADIUS_NOTE, sum_zero=centered, **common),
        category="depth", tensor="ln", capture=k)
    if "ln_out" in cap:
        ln_out = cap["ln_out"].astype(np.float32)  # (L, B, n, d), after gamma and beta, not rescaled
        w.save(f"depth/lnaff_c{k}.npy", ln_out.reshape(L, B * n, d), _sidecar(
            "euclidean", "layer", list(range(L)), walkers, {**source, "layer": None, "tensor": "ln_out"},
            note="LN1 output after the affine gamma, beta (raw, NOT divided by sqrt(d)); "
                 "for ln 'none' the raw stream entering the attention", **common),
            category="depth", tensor="ln_affine", capture=k)
    resid = cap["resid"].astype(np.float32)  # (L+1, B, n, d): entering blocks 0..L-1, then the output
    w.save(f"depth/resid_c{k}.npy", resid.reshape(L + 1, B * n, d), _sidecar(
        "euclidean", "layer", list(range(L + 1)), walkers, {**source, "layer": None, "tensor": "resid"},
        note=f"time l < {L}: stream entering block l; time {L}: output of the last block", **common),
        category="depth", tensor="resid", capture=k)
    feats = unit_features(resid[:L], centered=centered)  # (L, B, n, d)
    w.save(f"attention/c{k}.npy", _rows_stochastic(cap["attn"]), {
        "kind": "attention", "time": None, "times": [], "causal": bool(meta["causal"]),
        "axes": ["layer", "head", "input", "query", "key"], "walkers": None,
        "features": f"attention/c{k}_features.npy", "step": step,
        "source": {**source, "layer": "all", "head": "all", "tensor": "attn"},
        "note": "rows renormalised to sum 1 after storage rounding"}, category="attention", tensor="attn", capture=k)
    w.save(f"attention/c{k}_features.npy", feats.astype(np.float32), {
        "kind": "features", "time": None, "times": [], "causal": bool(meta["causal"]),
        "axes": ["layer", "input", "token", "dim"], "walkers": None, "step": step,
        "source": {**source, "layer": "all", "tensor": "attention input, sphere-normalised"},
        "note": "the stream entering block l normalised as the model's LN would "
                + ("(centred, unit norm)" if centered else "(ln none: unit norm, not centred)")
                + "; for pre-LN this equals depth ln; for post-LN the attention acts on the block input"},
        category="attention", tensor="features", capture=k)


def _summary(store: CaptureStore, meta: dict, run_dir: Path, entries: list, depth_ks: list) -> dict:
    counts: dict[str, int] = {}
    for e in entries:
        counts[e["category"]] = counts.get(e["category"], 0) + 1
    capture_s = float(store.index["seconds"].sum())
    wall = None
    manifest = run_dir / "manifest.json"
    if manifest.exists():
        wall = json.loads(manifest.read_text()).get("wall_time_s")
    overhead = capture_s / (wall - capture_s) if wall and wall > capture_s else None
    return {"run": meta["run"], "n_captures": int(len(store.index)), "steps": [int(s) for s in store.index["step"]],
            "noise_captures": [int(k) for k, h in zip(store.index["capture"], store.index["has_noise"]) if h],
            "per_capture_files": {"captures": depth_ks, "rule": f"first, last and evenly spaced, "
                                                              f"{N_PER_CAPTURE_FILES} at most"},
            "counts": counts, "n_files": len(entries), "store_mb": store.size_bytes() / 2**20,
            "capture_seconds": capture_s, "train_wall_seconds": wall,
            "capture_overhead": overhead, "overhead_definition": "capture seconds / (training wall time - capture seconds)"}
