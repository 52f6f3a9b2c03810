"""Per-file attention statistics (claim 2): one attention capture plus its null models.

`analyze_attention_file` reads FILE.npy (attention, (..., n, n)), its sidecar FILE.json and optional
FILE_features.npy, runs markov_chain.analyze_attention, and adds the row-shuffled, shuffled-key and step-0
null models; the step-0 attention of the same run is analysed once (`init_attention`) and serves as the
baseline for paired differences. The statistics themselves are pure functions of brownformer.stats
(markov_chain.py, attention_capture.py); this module reads the files.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from brownformer.io import find_sidecar, sha256_file
from brownformer.stats.markov.attention_capture import _exact_vmf_alternative, null_subsample, paired_difference
from brownformer.stats.markov.markov_chain import (analyze_attention, attention_null_models, head_subspace_vmf,
                                            validate_attention)
from brownformer.statsfile import NullModelsInfo

log = logging.getLogger(__name__)

__all__ = ["analyze_attention_file", "attention_file_stats", "init_attention", "head_kernels"]


def _read_sidecar(path: Path) -> dict:
    side = find_sidecar(path)
    if side is None:
        return {}
    try:
        return json.loads(side.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{side}: invalid JSON ({exc})") from None


def _head_axis(meta: dict) -> int | None:
    axes = meta.get("axes") or []
    return axes.index("head") if "head" in axes else None


def _pre_ln_gains(path: Path, captures: list) -> np.ndarray | None:
    """(L, d) LN1 gains of a pre-LN capture, recovered from the run's depth/ln_c<k>, lnaff_c<k> pair (claim 2 folds
    them into W_Q^T W_K: stats/claims/claim1_sphere.py, the gauge); None for other placements or missing files."""
    from brownformer.stats.sphere.sphere_fit import affine_map_fit
    depth = path.parent.parent / "depth"
    raw, aff = (depth / f"{stem}_c{captures[0]}.npy" for stem in ("ln", "lnaff")) if len(captures) == 1 else (None,) * 2
    if raw is None or not (raw.exists() and aff.exists()) or _read_sidecar(raw).get("ln") != "pre":
        return None
    return np.asarray(affine_map_fit(np.load(raw), np.load(aff))["gamma"], float)


def head_kernels(path: Path, meta: dict, n_heads: int) -> dict | None:
    """Per layer, `weight_isotropy` of W_Q, W_K at this attention file's capture, read from the run's
    weights/l<l>_<q|k>.npy trajectories (unprojected only), with a pre-LN block's gamma folded in; None when they
    are missing or projected."""
    from brownformer.stats.markov.markov_chain import weight_isotropy
    captures = (meta.get("source") or {}).get("captures") or []
    gains = _pre_ln_gains(path, captures)
    wdir = path.parent.parent / "weights"
    if len(captures) != 1 or not wdir.is_dir():
        return None
    out = []
    for layer in range(1000):
        q, k = wdir / f"l{layer}_q.npy", wdir / f"l{layer}_k.npy"
        if not (q.exists() and k.exists()):
            break
        side = _read_sidecar(q)
        if (side.get("projection") or {}).get("projected"):
            return {"why_undefined": "weights stored as random projections (probes.max_weight_size): W_Q^T W_K "
                                     "is not recoverable"}
        try:
            i = list((side.get("source") or {}).get("captures") or []).index(captures[0])
        except ValueError:
            return None
        Wq, Wk = np.load(q, mmap_mode="r")[i], np.load(k, mmap_mode="r")[i]
        try:
            out.append(weight_isotropy(Wq, Wk, n_heads, gain=None if gains is None else gains[layer]))
        except ValueError as exc:  # weights that do not split into the attention's heads: say so, keep the rest
            return {"why_undefined": str(exc)}
    return {"per_layer": out, "source": "weights/l<l>_<q|k>.npy at capture " + str(captures[0])} if out else None


def _load_attention(path: Path):
    A = np.load(path, allow_pickle=False)
    meta = _read_sidecar(path)
    fpath = path.with_name(path.stem + "_features.npy")
    feats = np.load(fpath, allow_pickle=False) if fpath.exists() else None
    return A, meta, feats, fpath


def analyze_attention_file(path: Path, stats, init: dict | None) -> dict:
    """analyze_attention plus null models: row-shuffled and shuffled-key statistics on a subsample, and
    the step-0 attention of the same run (`init`: {"path", "result"}) with paired differences."""
    A, meta, feats, fpath = _load_attention(path)
    is_init = init is not None and Path(init["path"]) == path
    out = (dict(init["result"]) if is_init else
           analyze_attention(A, features=feats, causal=meta.get("causal"), confidence_level=stats.confidence_level,
                             rng=stats.seed, head_axis=_head_axis(meta)))
    if not is_init and _head_axis(meta) is not None:
        out["head_kernels"] = head_kernels(path, meta, A.shape[_head_axis(meta)])
        if feats is not None and (out["head_kernels"] or {}).get("per_layer"):  # claim 2: fit in each head's subspace
            out["head_kernels"]["subspace_vmf"] = head_subspace_vmf(
                A, feats, out["head_kernels"], head_axis=_head_axis(meta), causal=bool(out["causal"]), rng=stats.seed)
    if feats is not None:
        out["features_input"] = {"path": str(fpath), "sha256": sha256_file(fpath)}
    out["step"] = meta.get("step")
    rng = np.random.default_rng(stats.seed)
    sub_A, sub_F, idx = null_subsample(A, feats, rng)
    nulls = attention_null_models(sub_A, features=sub_F, confidence_level=stats.confidence_level, rng=rng)
    exact = init_text = None
    if sub_F is not None and not out["causal"]:
        kappa = np.asarray(out["per_matrix"]["vmf_kappa"], float)[idx]
        nulls["vmf_exact"] = _exact_vmf_alternative(sub_F, kappa, stats)
        exact = ("alternative, not a null: the exact vMF kernel softmax(kappa <u_i, u_j>) at each matrix's fitted "
                 "kappa on the real features (isotropic and reversible by construction): the claim-2 rule must pass it")
    if init is not None and not is_init:
        nulls["init"] = init["result"]["aggregate"]
        init_text = f"attention at step 0 ({init['path']})"
        out["init_comparison"] = paired_difference(out, init["result"], out["shape"], stats=stats)
    out["null_models"] = nulls
    out["null_models_info"] = NullModelsInfo(
        n_matrices=int(idx.size), of=int(out["n_matrices"]),
        row_shuffled="each row's weights permuted (random Markov matrix with the same row laws)",
        shuffled_keys="vMF fit with key features permuted across tokens", vmf_exact=exact, init=init_text)
    return out


def init_attention(entries: list, traj_dir: Path, stats) -> dict | None:
    """The run's attention at step 0 (sidecar "step" == 0), analysed once: {"path", "result"} or None."""
    for entry in entries:
        rel = Path(entry["path"])
        path = rel if rel.is_absolute() else traj_dir / rel
        if entry.get("category") != "attention" or path.name.endswith("_features.npy") or not path.exists():
            continue
        if _read_sidecar(path).get("step") == 0:
            try:
                A, meta, feats, _ = _load_attention(path)
                result = analyze_attention(A, features=feats, causal=meta.get("causal"),
                                           confidence_level=stats.confidence_level, rng=stats.seed,
                                           head_axis=_head_axis(meta))
                if _head_axis(meta) is not None:
                    result["head_kernels"] = head_kernels(path, meta, A.shape[_head_axis(meta)])
                return {"path": str(path), "result": result}
            except (ValueError, OSError) as exc:
                log.warning("%s: initialisation attention unusable as a null model (%s)", path, exc)
                return None
    return None



def attention_file_stats(path: str | Path, *, features: str | Path | None = None, wq: str | Path | None = None,
                         wk: str | Path | None = None, n_heads: int | None = None, stats=None) -> dict:
    """The statistics of `brownformer stats attention FILE.npy [--features F.npy] [--wq Q.npy --wk K.npy --heads H]`
    (stats_stage/stages.py adds the verdicts and writes OUT.json).

    Per matrix and aggregated: spectral_gap, stationary_entropy, entropy_rate, reversibility_residual,
    dobrushin, doubly_stochastic_deviation, max_row_sum_error, and the vMF kernel fit with its output error
    when features are given (docs/ARTIFACTS.md); the row-shuffled null on a subsample; per head the
    identity fraction and asymmetry of W_Q^T W_K when the weights are given ((d, d) or (L, d, d) in
    torch.nn.Linear layout); inputs recorded with their sha256.

    Raises:
        ValueError: unreadable input, matrices that are not row-stochastic, or weights without both halves.
    """
    from brownformer.config import StatsConfig

    from brownformer.stats.markov.markov_chain import weight_isotropy
    stats = stats or StatsConfig()
    path = Path(path)
    if (wq is None) != (wk is None) or (wq is not None and not n_heads):
        raise ValueError("head isotropy needs --wq, --wk and --heads together")
    try:
        A = np.load(path, allow_pickle=False)
        F = np.load(features, allow_pickle=False) if features is not None else None
        W = [np.load(w, allow_pickle=False) for w in (wq, wk)] if wq is not None else None
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read input: {exc}") from None
    result = analyze_attention(A, features=F, confidence_level=stats.confidence_level, rng=stats.seed)
    rng = np.random.default_rng(stats.seed)
    sub_A, sub_F, idx = null_subsample(validate_attention(A), F, rng)
    result["null_models"] = attention_null_models(sub_A, features=sub_F, confidence_level=stats.confidence_level,
                                                  rng=rng)
    result["null_models_info"] = NullModelsInfo(n_matrices=int(idx.size), of=int(result["n_matrices"]))
    if W is not None:
        Wq, Wk = (w[None] if w.ndim == 2 else w for w in W)
        result["head_kernels"] = {"per_layer": [weight_isotropy(q, k, int(n_heads)) for q, k in zip(Wq, Wk)]}
    result["input"] = {"path": str(path), "sha256": sha256_file(path)}
    if features is not None:
        result["features_input"] = {"path": str(features), "sha256": sha256_file(features)}
    return result
