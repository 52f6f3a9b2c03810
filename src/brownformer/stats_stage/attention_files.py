"""Per-file attention statistics (claim 2): one attention capture plus its null models.

`attention_file_record` reads FILE.npy (attention, (..., n, n)), its sidecar and optional FILE_features.npy, runs
markov_chain.analyze_attention, and adds the row-shuffled, shuffled-key and step-0 null models, as the file's
statistics record (statsfile.AttentionStats; `analyze_attention_file` is its JSON); the step-0 attention of the same
run is analysed once (`init_attention`, an InitAttention) and serves as the baseline for paired differences. The statistics themselves are pure functions of brownformer.stats
(markov_chain.py, attention_capture.py); this module reads the files.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from brownformer.io import sha256_file
from brownformer.stats.diffusion.trajectory_inputs import TrajectorySidecar
from brownformer.stats.markov.attention_capture import exact_vmf_alternative, null_subsample, paired_difference
from brownformer.stats.markov.markov_chain import (analyze_attention, attention_null_models, head_subspace_vmf,
                                            validate_attention)
from brownformer.statsfile import AttentionStats, HeadKernels, InputFile, NullModelsInfo

from .trajectory_io import IndexEntry, read_sidecar

log = logging.getLogger(__name__)

__all__ = ["attention_file_record", "analyze_attention_file", "attention_file_stats", "init_attention", "InitAttention",
           "head_kernels"]



def _pre_ln_gains(path: Path, captures: list) -> np.ndarray | None:
    """(L, d) LN1 gains of a pre-LN capture, recovered from the run's depth/ln_c<k>, lnaff_c<k> pair (claim 2 folds
    them into W_Q^T W_K: stats/claims/claim1_sphere.py, the gauge); None for other placements or missing files."""
    from brownformer.stats.sphere.sphere_fit import affine_map_fit
    depth = path.parent.parent / "depth"
    raw, aff = (depth / f"{stem}_c{captures[0]}.npy" for stem in ("ln", "lnaff")) if len(captures) == 1 else (None,) * 2
    if raw is None or not (raw.exists() and aff.exists()) or read_sidecar(raw).ln != "pre":
        return None
    return np.asarray(affine_map_fit(np.load(raw), np.load(aff)).gamma, float)


def head_kernels(path: Path, meta: TrajectorySidecar | dict, n_heads: int) -> HeadKernels | None:
    """Per layer, `weight_isotropy` of W_Q, W_K at this attention file's capture, read from the run's
    weights/l<l>_<q|k>.npy trajectories (unprojected only), with a pre-LN block's gamma folded in; None when they
    are missing or projected."""
    from brownformer.stats.markov.markov_chain import weight_isotropy
    captures = TrajectorySidecar.from_dict(meta).captures
    gains = _pre_ln_gains(path, captures)
    wdir = path.parent.parent / "weights"
    if len(captures) != 1 or not wdir.is_dir():
        return None
    out = []
    for layer in range(1000):
        q, k = wdir / f"l{layer}_q.npy", wdir / f"l{layer}_k.npy"
        if not (q.exists() and k.exists()):
            break
        side = read_sidecar(q)
        if side.projected:
            return HeadKernels(why_undefined="weights stored as random projections (probes.max_weight_size): "
                                             "W_Q^T W_K is not recoverable")
        try:
            i = side.captures.index(captures[0])
        except ValueError:
            return None
        Wq, Wk = np.load(q, mmap_mode="r")[i], np.load(k, mmap_mode="r")[i]
        try:
            out.append(weight_isotropy(Wq, Wk, n_heads, gain=None if gains is None else gains[layer]))
        except ValueError as exc:  # weights that do not split into the attention's heads: say so, keep the rest
            return HeadKernels(why_undefined=str(exc))
    return HeadKernels(per_layer=out, source="weights/l<l>_<q|k>.npy at capture " + str(captures[0])) if out else None


def _load_attention(path: Path):
    A = np.load(path, allow_pickle=False)
    meta = read_sidecar(path)
    fpath = path.with_name(path.stem + "_features.npy")
    feats = np.load(fpath, allow_pickle=False) if fpath.exists() else None
    return A, meta, feats, fpath


@dataclass(frozen=True)
class InitAttention:
    """The run's step-0 attention, analysed once (`init_attention`): the file and its statistics record, the
    baseline of every other capture's paired differences and its "init" null model."""

    path: str
    result: AttentionStats


def attention_file_record(path: Path, stats, init: InitAttention | None) -> AttentionStats:
    """analyze_attention plus null models, as the file's statistics record: row-shuffled and shuffled-key statistics
    on a subsample, and the step-0 attention of the same run (`init`) with paired differences."""
    A, meta, feats, fpath = _load_attention(path)
    is_init = init is not None and Path(init.path) == path
    rec = init.result if is_init else _analysed(path, A, meta, feats, stats, subspace=True)
    rng = np.random.default_rng(stats.seed)
    sub_A, sub_F, idx = null_subsample(A, feats, rng)
    nulls = attention_null_models(sub_A, features=sub_F, confidence_level=stats.confidence_level, rng=rng)
    exact = init_text = comparison = None
    if sub_F is not None and not rec.causal:
        kappa = np.asarray(rec.per_matrix.vmf_kappa, float)[idx]
        nulls = replace(nulls, vmf_exact=exact_vmf_alternative(sub_F, kappa, stats))
        exact = ("alternative, not a null: the exact vMF kernel softmax(kappa <u_i, u_j>) at each matrix's fitted "
                 "kappa on the real features (isotropic and reversible by construction): the claim-2 rule must pass it")
    if init is not None and not is_init:
        nulls = replace(nulls, init=init.result.aggregate)
        init_text = f"attention at step 0 ({init.path})"
        comparison = paired_difference(rec, init.result, rec.shape, stats=stats)
    info = NullModelsInfo(
        n_matrices=int(idx.size), of=int(rec.n_matrices),
        row_shuffled="each row's weights permuted (random Markov matrix with the same row laws)",
        shuffled_keys="vMF fit with key features permuted across tokens", vmf_exact=exact, init=init_text)
    features = InputFile(path=str(fpath), sha256=sha256_file(fpath)) if feats is not None else None
    return replace(rec, features_input=features, step=meta.step, null_models=nulls, null_models_info=info,
                   init_comparison=comparison)


def analyze_attention_file(path: Path, stats, init: InitAttention | None) -> dict:
    """attention_file_record as plain JSON (what the file's statistics JSON holds), for callers that read it by
    key."""
    return attention_file_record(path, stats, init).to_dict()


def _analysed(path: Path, A, meta, feats, stats, *, subspace: bool) -> AttentionStats:
    """analyze_attention of one capture with its heads' weight kernels (and, with features and `subspace`, the vMF
    fit in each head's subspace: claim 2)."""
    rec = analyze_attention(A, features=feats, causal=meta.causal, confidence_level=stats.confidence_level,
                            rng=stats.seed, head_axis=meta.head_axis)
    if meta.head_axis is None:
        return rec
    kernels = head_kernels(path, meta, A.shape[meta.head_axis])
    if subspace and feats is not None and kernels is not None and kernels.per_layer:
        kernels = replace(kernels, subspace_vmf=head_subspace_vmf(A, feats, kernels, head_axis=meta.head_axis,
                                                                  causal=bool(rec.causal), rng=stats.seed))
    return replace(rec, head_kernels=kernels)


def init_attention(entries: list, traj_dir: Path, stats) -> InitAttention | None:
    """The run's attention at step 0 (sidecar "step" == 0), analysed once, or None. `entries`: index.json's
    (trajectory_io.IndexEntry, or their mappings)."""
    for entry in map(IndexEntry.from_dict, entries):
        path = entry.resolve(traj_dir)
        if entry.category != "attention" or path.name.endswith("_features.npy") or not path.exists():
            continue
        if read_sidecar(path).step == 0:
            try:
                A, meta, feats, _ = _load_attention(path)
                return InitAttention(path=str(path), result=_analysed(path, A, meta, feats, stats, subspace=False))
            except (ValueError, OSError) as exc:
                log.warning("%s: initialisation attention unusable as a null model (%s)", path, exc)
                return None
    return None


def attention_file_stats(path: str | Path, *, features: str | Path | None = None, wq: str | Path | None = None,
                         wk: str | Path | None = None, n_heads: int | None = None, stats=None) -> AttentionStats:
    """The statistics of `brownformer stats attention FILE.npy [--features F.npy] [--wq Q.npy --wk K.npy --heads H]`
    as the file's AttentionStats (stats_stage/stages.py adds the verdicts and writes OUT.json).

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
    kernels = None
    if W is not None:
        Wq, Wk = (w[None] if w.ndim == 2 else w for w in W)
        kernels = HeadKernels(per_layer=[weight_isotropy(q, k, int(n_heads)) for q, k in zip(Wq, Wk)])
    return replace(
        result, null_models=attention_null_models(sub_A, features=sub_F, confidence_level=stats.confidence_level,
                                                  rng=rng),
        null_models_info=NullModelsInfo(n_matrices=int(idx.size), of=int(result.n_matrices)), head_kernels=kernels,
        input=InputFile(path=str(path), sha256=sha256_file(path)),
        features_input=None if features is None else InputFile(path=str(features), sha256=sha256_file(features)))
