"""Claims 1, 2 and 4 on inputs whose answer is known by construction; the shared rule against references."""
import numpy as np
import pytest
from statsmodels.stats.weightstats import DescrStatsW

from brownformer.config import StatsConfig
from brownformer.stats.attention_capture import _exact_vmf_alternative
from brownformer.stats.claims import markov_claim, sphere_claim
from brownformer.stats.claims.common import equivalence_pvalue, equivalence_verdict, unit_mean_interval
from brownformer.stats.markov_chain import analyze_attention, attention_null_models, weight_isotropy
from brownformer.stats.sphere_distance import tensor_sphere_summary

STATS = StatsConfig(n_resamples=199)
B_INPUTS, N_TOKENS, D = 8, 6, 12


# ---------- the shared rule ----------

def test_tost_pvalue_matches_statsmodels():
    x = np.random.default_rng(0).normal(0.3, 1.0, 40)
    p_ref = DescrStatsW(x).ttost_mean(-0.5, 1.0)[0]
    se = x.std(ddof=1) / np.sqrt(x.size)
    assert equivalence_pvalue(x.mean(), se, (-0.5, 1.0), df=x.size - 1) == pytest.approx(p_ref, rel=1e-10)


@pytest.mark.parametrize("ci,verdict", [((0.2, 0.4), "supported"), ((0.6, 0.9), "not supported"),
                                        ((0.4, 0.6), "inconclusive"), ((np.nan, 0.3), "inconclusive")])
def test_equivalence_verdict(ci, verdict):
    assert equivalence_verdict(ci, (0.0, 0.5)) == verdict


def test_unit_interval_covers_the_mean():
    """t-interval over independent units: covers the true mean in about confidence_level of samples."""
    rng = np.random.default_rng(1)
    stats = StatsConfig(n_resamples=199)
    hits = [unit_mean_interval(rng.normal(1.0, 1.0, 12), stats=stats, name="x")[0] for _ in range(200)]
    coverage = np.mean([e.confidence_interval[0] <= 1.0 <= e.confidence_interval[1] for e in hits])
    assert 0.88 <= coverage <= 0.99


# ---------- claim 1 ----------

def _ln_output(rng, L=2):
    x = rng.standard_normal((L, B_INPUTS * N_TOKENS, D)) * 3 + 1
    z = x - x.mean(-1, keepdims=True)
    return z / z.std(-1, keepdims=True)  # exact LayerNorm output (eps = 0): on S^(d-2) of radius sqrt(d)


def _sphere_files(run, z, step, capture, gamma=1.0, beta=0.0, ln="pre"):
    """The ln_raw and ln_affine files of one capture, the affine map y = gamma * z + beta."""
    out = []
    for tensor, arr in (("ln_raw", z), ("ln_affine", z * gamma + beta)):
        s = tensor_sphere_summary(arr, tensor=tensor, z_raw=z if tensor == "ln_affine" else None,
                                  n_inputs=B_INPUTS, n_tokens=N_TOKENS, n_resamples=199)
        s.update(ln=ln, step=step)
        out.append({"run": run, "path": f"depth/{tensor}_c{capture}.npy", "sphere": s, "capture": capture})
    return out


def _claim1(rng, **affine):
    files = [f for k, step in enumerate((0, 50, 100)) for f in _sphere_files("vit-pre__adamw__s0", _ln_output(rng),
                                                                           step, k, **(affine if step else {}))]
    return sphere_claim(files, STATS).per_run["vit-pre__adamw__s0"]


def test_sphere_claim_passes_the_identity_affine_map_and_labels_the_definition():
    rec = _claim1(np.random.default_rng(2))
    assert rec.verdict == "supported", rec.reason
    assert rec.details["criteria"]["radius_spread_ratio"]["estimate"] < 1e-6
    assert "definitional" in rec.details["definitional"]["label"]
    assert rec.details["definitional"]["min_fraction_on_sphere"] == 1.0


@pytest.mark.parametrize("what", ["anisotropic gain", "offset"])
def test_sphere_claim_fails_after_an_anisotropic_or_offset_affine_map(what):
    rng = np.random.default_rng(4)
    # log-uniform gains over two decades make an ellipsoid; beta = 1 per dimension puts the centre one radius out
    affine = ({"gamma": np.exp(rng.uniform(0, np.log(100), D))} if what == "anisotropic gain"
              else {"beta": np.ones(D)})
    rec = _claim1(rng, **affine)
    crit = "radius_spread_ratio" if what == "anisotropic gain" else "offset"
    assert rec.details["criteria"][crit]["verdict"] == "not supported"
    assert rec.verdict == "not supported"
    assert rec.details["definitional"]["min_fraction_on_sphere"] == 1.0  # before the affine map: still a sphere


def test_sphere_claim_pooling_and_applicability():
    rng = np.random.default_rng(2)
    on = [f for k, step in enumerate((0, 50, 100)) for f in _sphere_files("vit-pre__adamw__s0", _ln_output(rng),
                                                                         step, k)]
    gauss = rng.standard_normal((2, B_INPUTS * N_TOKENS, D))  # a Gaussian cloud is no sphere
    off = [{"run": "vit-post__adamw__s0", "capture": 1, "path": "depth/ln_affine_c1.npy",
            "sphere": {**tensor_sphere_summary(gauss, tensor="ln_affine", n_inputs=B_INPUTS, n_tokens=N_TOKENS,
                                               n_resamples=199), "ln": "post", "step": 100}}]
    none = _sphere_files("vit-none__adamw__s0", _ln_output(rng), 100, 1, ln="none")
    dnt = _sphere_files("vit-pre__sgd__s0", _ln_output(rng), 100, 1)
    rec = sphere_claim(on + none + dnt, STATS, excluded={"vit-pre__sgd__s0": "at chance"})
    assert rec.per_run["vit-pre__sgd__s0"].verdict == "did not train"
    assert "vit-none__adamw__s0" in rec.details["not_applicable"]
    assert rec.verdict == "supported"  # the run that did not train is not pooled
    rec = sphere_claim(on + off, STATS)
    assert rec.per_run["vit-post__adamw__s0"].verdict == "not supported"
    assert rec.verdict == "not supported" and rec.details["deciding_run"] == "vit-post__adamw__s0"


# ---------- claim 2 ----------

def _softmax(S):
    E = np.exp(S - S.max(-1, keepdims=True))
    return E / E.sum(-1, keepdims=True)


def _attention_result(M, step, rng, L=1, H=2, n=10, d=6, heads=None):
    """analyze_attention output with its nulls for logits u_i^T M u_j, shapes (L, H, B, n, n); `heads`:
    (W_Q, W_K) whose per-head kernels are attached as the capture's head_kernels."""
    U = rng.standard_normal((L, B_INPUTS, n, d))
    U /= np.linalg.norm(U, axis=-1, keepdims=True)
    A = _softmax(np.broadcast_to(np.einsum("lbid,de,lbje->lbij", U, M, U)[:, None], (L, H, B_INPUTS, n, n)))
    out = analyze_attention(A, features=U, rng=0, head_axis=1)
    out["step"] = step
    out["null_models"] = attention_null_models(A, features=U, rng=1)
    F = np.broadcast_to(U[:, None], (L, H, B_INPUTS, n, d)).reshape(-1, n, d)
    out["null_models"]["vmf_exact"] = _exact_vmf_alternative(F, np.array(out["per_matrix"]["vmf_kappa"]), STATS)
    if heads is not None:
        out["head_kernels"] = {"per_layer": [weight_isotropy(*heads, n_heads=H)] * L}
    return out


def _subspace_heads(d=6, H=2, c=2.0):
    """W_Q = W_K = c x (coordinate selection) per head: M_h = c^2 P_h / sqrt(d_h), isotropic in its subspace."""
    return c * np.eye(d), c * np.eye(d)


def test_markov_claim_rule_and_step0_baseline():
    rng = np.random.default_rng(3)
    iso, d = 6.0 * np.eye(6), 6
    R = rng.standard_normal((d, d))
    aniso = 4.0 * (R - R.T) + 2.0 * R  # non-isotropic and asymmetric: neither vMF nor reversible
    heads = _subspace_heads()
    good = [{"run": "vit-pre__adamw__s0", "attention": _attention_result(iso, s, rng, heads=heads)} for s in (50, 100)]
    base = [{"run": "vit-pre__adamw__s0", "attention": _attention_result(aniso, 0, rng, heads=(R, R.T))}]
    bad = [{"run": "vit-post__adamw__s0", "attention": _attention_result(aniso, 100, rng, heads=(R, R.T))}]
    rec = markov_claim(good + base, STATS)
    run = rec.per_run["vit-pre__adamw__s0"]
    assert run.verdict == "supported", run.reason
    assert run.estimate.value < 1e-6  # the exact vMF kernel moves tokens exactly as the attention does
    assert run.details["n_inputs"] == B_INPUTS
    assert run.margin[1] <= STATS.margins["vmf_output_error"][1]  # never above the configured ceiling
    assert run.details["criteria"]["head_isotropy"]["estimate"] == pytest.approx(1.0)
    assert run.details["criteria"]["head_isotropy"]["rank_bound"] == pytest.approx(0.5)
    assert run.details["head_averaged"]["vmf_output_error_mean"] < 1e-6
    assert run.calibration["size"] == 0.0  # no null passes the rule
    assert run.calibration["power"]["exact_vmf_kernel"] == 1.0
    rec = markov_claim(good + base + bad, STATS)
    bad_run = rec.per_run["vit-post__adamw__s0"]
    assert bad_run.verdict == "not supported"
    assert {bad_run.details[f"verdict_{k}"] for k in ("head_isotropy", "output_error", "reversibility")} == \
        {"not supported"}
    assert rec.verdict == "not supported"
    rec = markov_claim(good + bad, STATS, excluded={"vit-post__adamw__s0": "diverged"})
    assert rec.verdict == "supported" and rec.per_run["vit-post__adamw__s0"].verdict == "did not train"


def test_markov_claim_fails_on_an_isotropic_attention_from_anisotropic_heads():
    """A random rank-2 head fails head isotropy even where the attention itself is isotropic."""
    rng = np.random.default_rng(5)
    Wq, Wk = np.zeros((6, 6)), np.zeros((6, 6))
    Wq[:2], Wk[:2] = rng.standard_normal((2, 6)), rng.standard_normal((2, 6))  # head 0: rank 2, random
    Wq[3:5], Wk[3:5] = rng.standard_normal((2, 6)), rng.standard_normal((2, 6))
    files = [{"run": "r__adamw__s0", "attention": _attention_result(6.0 * np.eye(6), 100, rng, heads=(Wq, Wk))}]
    run = markov_claim(files, STATS).per_run["r__adamw__s0"]
    assert run.details["verdict_output_error"] == "supported"
    assert run.details["verdict_head_isotropy"] == "not supported" and run.verdict == "not supported"


def test_markov_claim_without_weights_is_inconclusive_not_supported():
    rng = np.random.default_rng(6)
    files = [{"run": "r__adamw__s0", "attention": _attention_result(6.0 * np.eye(6), 100, rng)}]
    run = markov_claim(files, STATS).per_run["r__adamw__s0"]
    assert run.details["verdict_head_isotropy"] == "inconclusive" and run.verdict == "inconclusive"


# claim 4: tests/stats/test_time_to_target_claim.py


def test_markov_margins_follow_the_nulls():
    """A null with a small vMF output error lowers the run's margin to OUTPUT_ERROR_NULL_FRACTION of its lower
    bound; a random Markov matrix's residual caps the reversibility margin at REVERSIBILITY_NULL_FRACTION of it."""
    import copy
    from brownformer.stats.claims.claim2_markov import OUTPUT_ERROR_NULL_FRACTION, REVERSIBILITY_NULL_FRACTION
    rng = np.random.default_rng(5)
    res = _attention_result(6.0 * np.eye(6), 100, rng)
    res = copy.deepcopy(res)
    res["null_models"]["row_shuffled"]["vmf_output_error"]["confidence_interval"] = [0.6, 0.93]
    res["null_models"]["row_shuffled"]["reversibility_residual"]["confidence_interval"] = [0.08, 0.2]
    run = markov_claim([{"run": "vit-pre__adamw__s0", "attention": res}], STATS).per_run["vit-pre__adamw__s0"]
    assert run.details["margins"]["vmf_output_error"][1] == pytest.approx(OUTPUT_ERROR_NULL_FRACTION * 0.6)
    assert run.details["margins"]["reversibility_residual"][1] == pytest.approx(REVERSIBILITY_NULL_FRACTION * 0.08)
