"""Claims 1, 2 and 4 on inputs whose answer is known by construction; the shared rule against references."""
import dataclasses
import numpy as np
import pytest
from statsmodels.stats.weightstats import DescrStatsW

from brownformer.config import StatsConfig
from brownformer.stats.markov.attention_capture import exact_vmf_alternative
from brownformer.stats.claims import markov_claim, sphere_claim
from brownformer.stats.claims.common import equivalence_pvalue, equivalence_verdict, unit_mean_interval
from brownformer.stats.markov.markov_chain import analyze_attention, attention_null_models, weight_isotropy
from brownformer.stats.core.pooling import MIN_SEEDS
from brownformer.stats.sphere.sphere_distance import tensor_sphere_summary
from brownformer.statsfile import HeadKernels

STATS = StatsConfig(n_resamples=199)
B_INPUTS, N_TOKENS, D = 8, 6, 12


# ---------- the shared rule ----------

def test_tost_pvalue_matches_statsmodels():
    x = np.random.default_rng(0).normal(0.3, 1.0, 40)
    p_ref = DescrStatsW(x).ttost_mean(-0.5, 1.0)[0]
    se = x.std(ddof=1) / np.sqrt(x.size)
    assert equivalence_pvalue(x.mean(), se, (-0.5, 1.0), df=x.size - 1) == pytest.approx(p_ref, rel=1e-10)


def test_headline_holm_matches_statsmodels_and_keeps_the_claims_order():
    """Holm over the headline claims with a finite p-value (statsmodels' multipletests as the reference); a claim
    without one keeps pvalue_holm None and its place."""
    from statsmodels.stats.multitest import multipletests

    from brownformer.stats.claims import headline_holm
    from brownformer.stats.claims.details import Claim2Details
    from brownformer.verdicts import ClaimRecord

    pvalues = {"1": 0.01, "2": None, "3a": 0.04, "3b": float("nan"), "4": 0.03}
    claims = [ClaimRecord(k, k, "inconclusive", details=Claim2Details(pvalue=p, deciding_configuration=None,
                                                                      rule_history=[], rule=""))
              for k, p in pvalues.items()]
    out = headline_holm(claims)
    ref = multipletests([0.01, 0.04, 0.03], method="holm")[1]
    assert [c.claim for c in out] == list(pvalues)
    assert [c.pvalue_holm for c in out] == pytest.approx([ref[0], None, ref[1], None, ref[2]])


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

SEEDS = range(MIN_SEEDS)


def _ln_output(rng, L=2):
    x = rng.standard_normal((L, B_INPUTS * N_TOKENS, D)) * 3 + 1
    z = x - x.mean(-1, keepdims=True)
    return z / z.std(-1, keepdims=True)  # exact LayerNorm output (eps = 0): on S^(d-2) of radius sqrt(d)


def _sphere_files(run, z, step, capture, gamma=1.0, beta=0.0, ln="pre", y=None, n_tokens=N_TOKENS):
    """The ln_raw and ln_affine files of one capture, the affine map y = gamma * z + beta (or y as given)."""
    out = []
    for tensor, arr in (("ln_raw", z), ("ln_affine", z * gamma + beta if y is None else y)):
        s = tensor_sphere_summary(arr, tensor=tensor, z_raw=z if tensor == "ln_affine" else None,
                                  n_inputs=B_INPUTS, n_tokens=n_tokens, n_resamples=199)
        s = dataclasses.replace(s, ln=ln, step=step)
        out.append({"run": run, "path": f"depth/{tensor}_c{capture}.npy", "sphere": s, "capture": capture})
    return out


def _claim1(rng, seeds=SEEDS, ln="post", **affine):
    files = [f for s in seeds for k, step in enumerate((0, 50, 100))
             for f in _sphere_files(f"vit-{ln}__adamw__s{s}", _ln_output(rng), step, k, ln=ln,
                                    **(affine if step else {}))]
    return sphere_claim(files, STATS)


def test_sphere_claim_passes_the_identity_affine_map_and_labels_the_definition():
    rec = _claim1(np.random.default_rng(2))
    conf = rec.per_model["vit-post__adamw"]
    assert rec.verdict == conf.verdict == "supported", rec.reason
    assert conf.details.criteria["radius_spread_ratio"].estimate < 1e-6
    assert rec.seeds.n_seeds == {"vit-post__adamw": MIN_SEEDS} and rec.seeds.decided == ["vit-post__adamw"]
    run = rec.per_run["vit-post__adamw__s0"]
    assert "definitional" in run.details.definitional.label
    assert run.details.definitional.min_fraction_on_sphere == 1.0
    assert run.verdict == "inconclusive" and "one seed does not decide" in run.reason


@pytest.mark.parametrize("what", ["anisotropic gain", "offset"])
def test_post_ln_sphere_claim_fails_after_an_anisotropic_or_offset_affine_map(what):
    rng = np.random.default_rng(4)
    # log-uniform gains over two decades make an ellipsoid; beta = 1 per dimension puts the centre one radius out
    affine = ({"gamma": np.exp(rng.uniform(0, np.log(100), D))} if what == "anisotropic gain"
              else {"beta": np.ones(D)})
    rec = _claim1(rng, **affine)
    crit = "radius_spread_ratio" if what == "anisotropic gain" else "offset"
    assert rec.per_model["vit-post__adamw"].details.criteria[crit].verdict == "not supported"
    assert rec.verdict == "not supported"
    assert rec.per_run["vit-post__adamw__s0"].details.definitional.min_fraction_on_sphere == 1.0


def test_pre_ln_is_decided_on_z_and_reports_the_affine_image_as_gauge_dependent():
    """In a pre-LN block gamma and beta fold into the next linear maps: an anisotropic, offset affine map changes
    nothing the model computes, so the verdict stands; the after-affine geometry is only description."""
    rng = np.random.default_rng(4)
    rec = _claim1(rng, ln="pre", gamma=np.exp(rng.uniform(0, np.log(100), D)), beta=np.ones(D))
    assert rec.verdict == "supported", rec.reason
    assert rec.per_model["vit-pre__adamw"].details.decided_on == "ln_raw"
    gauge = rec.per_run["vit-pre__adamw__s0"].details.gauge_dependent
    assert gauge.radius_spread_ratio.estimate > 0.5 and "gauge" in gauge.label


def test_one_seed_does_not_decide():
    """With fewer than MIN_SEEDS seeds the claim is inconclusive, naming the reason, even on a perfect sphere."""
    rec = _claim1(np.random.default_rng(2), seeds=range(MIN_SEEDS - 1))
    assert rec.verdict == "inconclusive"
    assert f"n seeds {MIN_SEEDS - 1} < minimum {MIN_SEEDS}" in rec.reason


def test_sphere_claim_pooling_and_applicability():
    rng = np.random.default_rng(2)
    on = [f for s in SEEDS for k, step in enumerate((0, 50, 100))
          for f in _sphere_files(f"vit-pre__adamw__s{s}", _ln_output(rng), step, k)]
    gauss = [f for s in SEEDS for f in _sphere_files(f"vit-post__adamw__s{s}", _ln_output(rng), 100, 1, ln="post",
                                                     y=rng.standard_normal((2, B_INPUTS * N_TOKENS, D)))]
    none = _sphere_files("vit-none__adamw__s0", _ln_output(rng), 100, 1, ln="none")
    dnt = _sphere_files("vit-pre__sgd__s0", _ln_output(rng), 100, 1)
    rec = sphere_claim(on + none + dnt, STATS, excluded={"vit-pre__sgd__s0": "at chance"})
    assert rec.per_run["vit-pre__sgd__s0"].verdict == "did not train"
    assert "vit-none__adamw__s0" in rec.details.not_applicable
    assert rec.verdict == "supported"  # the run that did not train is not pooled
    rec = sphere_claim(on + gauss, STATS)  # a Gaussian cloud read by a post-LN model is no sphere
    assert rec.per_model["vit-post__adamw"].verdict == "not supported"
    assert rec.per_model["vit-pre__adamw"].verdict == "supported"  # heterogeneity stays visible
    assert rec.verdict == "not supported" and rec.details.deciding_configuration == "vit-post__adamw"


def test_sphere_claim_states_each_configurations_simulated_size_and_the_largest():
    """Decided on seeds, every configuration carries its rule's simulated size (tests/stats/test_claim1_calibration.py
    checks the simulation against the exact t-test) and the claim the largest: never "not calibrated"."""
    rng = np.random.default_rng(2)
    on = [f for s in SEEDS for f in _sphere_files(f"vit-pre__adamw__s{s}", _ln_output(rng), 100, 1)]
    gauss = [f for s in SEEDS for f in _sphere_files(f"vit-post__adamw__s{s}", _ln_output(rng), 100, 1, ln="post",
                                                     y=rng.standard_normal((2, B_INPUTS * N_TOKENS, D)))]
    rec = sphere_claim(on + gauss, dataclasses.replace(STATS, calibration_replicates=100))
    sizes = {c: r.calibration.size for c, r in rec.per_model.items()}
    assert sizes["vit-post__adamw"] is not None and rec.per_model["vit-post__adamw"].calibration.n_replicates == 100
    assert rec.calibration.size == max(v for v in sizes.values() if v is not None)
    assert set(rec.calibration.power) == set(rec.per_model)


def _tiny_model(ln: str, seed: int):
    import torch

    from brownformer.config import ModelConfig
    from brownformer.models import build_model
    torch.manual_seed(seed)
    cfg = ModelConfig(name=f"vit-{ln}", arch="vit", dataset="digits", ln=ln, d_model=D, n_layers=2, n_heads=2,
                      patch_size=2)
    model = build_model(cfg, n_classes=3, image_shape=(1, 6, 8)).double().eval()
    with torch.no_grad():  # a trained-like affine map: anisotropic gains, an offset centre
        for block in model.blocks:
            for norm in (block.ln1, block.ln2):
                norm.weight.copy_(torch.exp(torch.randn(D, dtype=torch.float64)))
                norm.bias.copy_(0.5 * torch.randn(D, dtype=torch.float64))
    return model


def _gauge(model, ln: str, rng):
    """The LayerNorm gauge. Pre-LN: gamma -> s gamma (s random, signs included), beta -> s beta + delta, and every
    consumer W -> W diag(1/s), b -> b - W' delta. Post-LN (LN1's output is the residual stream the MLP adds to):
    only a common scale s of LN1, with fc1 / s and fc2 * s, which LN2 undoes (up to its eps)."""
    import torch
    with torch.no_grad():
        for block in model.blocks:
            if ln == "post":
                s = 3.7
                block.ln1.weight.mul_(s)
                block.ln1.bias.mul_(s)
                block.mlp.fc1.weight.div_(s)
                block.mlp.fc2.weight.mul_(s)
                block.mlp.fc2.bias.mul_(s)
                continue
            attn = block.attn
            for norm, consumers in ((block.ln1, (attn.q, attn.k, attn.v)), (block.ln2, (block.mlp.fc1,))):
                s = torch.as_tensor(np.exp(rng.normal(0, 1, D)) * rng.choice([-1, 1], D))
                delta = torch.as_tensor(rng.normal(0, 1, D))
                norm.weight.mul_(s)
                norm.bias.mul_(s).add_(delta)
                for lin in consumers:
                    lin.weight.div_(s)
                    lin.bias.sub_(lin.weight @ delta)
    return model


def _claim1_of_models(models, ln, images):
    from brownformer.probes.capture import capture_activations
    files = []
    for seed, model in enumerate(models):
        cap = capture_activations(model, images)
        L = cap["ln_hat"].shape[0]
        z, y = (cap[k].double().numpy().reshape(L, -1, D) for k in ("ln_hat", "ln_out"))
        files += _sphere_files(f"vit-{ln}__adamw__s{seed}", z, 100, 0, ln=ln, y=y, n_tokens=cap["ln_hat"].shape[2])
    return sphere_claim(files, STATS)


@pytest.mark.parametrize("ln", ["pre", "post"])
def test_claim1_verdict_is_unchanged_by_the_layernorm_gauge(ln):
    """A random rescaling of gamma with the next weights rescaled to compensate computes the same function; claim
    1's verdict and estimates must not move (the after-affine geometry of a pre-LN block does)."""
    import torch
    rng = np.random.default_rng(7)
    images = torch.as_tensor(rng.standard_normal((B_INPUTS, 1, 6, 8)))  # 12 patches and the CLS token
    before = [_tiny_model(ln, s) for s in SEEDS]
    logits = [m(images) for m in before]
    rec0 = _claim1_of_models(before, ln, images)
    after = [_gauge(m, ln, rng) for m in before]
    tol = 1e-6 if ln == "pre" else 1e-4  # post-LN: LN2's eps is not scale-free (relative effect ~eps / var)
    for m, out in zip(after, logits):
        torch.testing.assert_close(m(images), out, rtol=tol, atol=tol)  # the same function
    rec1 = _claim1_of_models(after, ln, images)
    c0, c1 = rec0.per_model[f"vit-{ln}__adamw"], rec1.per_model[f"vit-{ln}__adamw"]
    assert rec0.verdict == rec1.verdict
    for q in ("radius_spread_ratio", "offset"):
        e0, e1 = c0.details.criteria[q].estimate, c1.details.criteria[q].estimate
        assert e1 == pytest.approx(e0, rel=1e-5, abs=1e-9), q
    if ln == "pre":  # the positive check that the gauge was not a no-op: the affine image moved
        g0 = rec0.per_run["vit-pre__adamw__s0"].details.gauge_dependent.offset.estimate
        g1 = rec1.per_run["vit-pre__adamw__s0"].details.gauge_dependent.offset.estimate
        assert abs(g1 - g0) > 0.05


# ---------- claim 2 ----------

def _softmax(S):
    E = np.exp(S - S.max(-1, keepdims=True))
    return E / E.sum(-1, keepdims=True)


def _attention_result(M, step, rng, L=1, H=2, n=10, d=6, heads=None, scale=3.0):
    """analyze_attention output with its nulls, shapes (L, H, B, n, n): every head's logits u_i^T M u_j, or with
    `heads` = (W_Q, W_K) each head's own, scale (W_Q,h u_i).(W_K,h u_j), as the model computes them; the heads'
    kernels and the fit in each head's subspace are then attached as head_kernels (as the stage does)."""
    from brownformer.stats.markov.markov_chain import head_subspace_vmf
    U = rng.standard_normal((L, B_INPUTS, n, d))
    U /= np.linalg.norm(U, axis=-1, keepdims=True)
    if heads is None:
        S = np.broadcast_to(np.einsum("lbid,de,lbje->lbij", U, M, U)[:, None], (L, H, B_INPUTS, n, n))
    else:
        dh = d // H
        S = scale * np.stack([np.einsum("lbid,ed,ef,lbjf->lbij", U, heads[0][h * dh:(h + 1) * dh],
                                        heads[1][h * dh:(h + 1) * dh], U) for h in range(H)], 1)
    A = _softmax(S)
    out = analyze_attention(A, features=U, rng=0, head_axis=1)
    F = np.broadcast_to(U[:, None], (L, H, B_INPUTS, n, d)).reshape(-1, n, d)
    nulls = dataclasses.replace(attention_null_models(A, features=U, rng=1),
                                vmf_exact=exact_vmf_alternative(F, np.array(out.per_matrix.vmf_kappa), STATS))
    out = dataclasses.replace(out, step=step, null_models=nulls)
    if heads is not None:
        kernels = HeadKernels(per_layer=[weight_isotropy(*heads, n_heads=H)] * L)
        kernels = dataclasses.replace(kernels, subspace_vmf=head_subspace_vmf(A, U, kernels))
        out = dataclasses.replace(out, head_kernels=kernels)
    return out


def _subspace_heads(d=6, H=2, c=2.0):
    """W_Q = W_K = c x (coordinate selection) per head: M_h = c^2 P_h / sqrt(d_h), isotropic in its subspace."""
    return c * np.eye(d), c * np.eye(d)


def _runs(config, make, seeds=SEEDS, steps=(50, 100)):
    return [{"run": f"{config}__s{s}", "attention": make(step)} for s in seeds for step in steps]


def _assert_claim2_round_trip(rec):
    """claims.json of a claim-2 record reads back as the records the rule built (details, power), JSON unchanged."""
    import json

    from brownformer.io import to_jsonable
    from brownformer.stats.claims.details import HeadCheck, SeedPower, WorstHead, parse_details
    from brownformer.verdicts import ClaimRecord

    written = to_jsonable(rec.to_dict())
    back = ClaimRecord.from_dict(json.loads(json.dumps(written)), parse_details=parse_details)
    assert to_jsonable(back.to_dict()) == written
    seed = back.per_run["vit-pre__adamw__s0"].details
    assert isinstance(seed.head_isotropy, HeadCheck) and isinstance(seed.worst_head, WorstHead)
    assert seed.worst_head.why_undefined is None and "why_undefined" not in written["per_run"][
        "vit-pre__adamw__s0"]["details"]["worst_head"]  # a key that does not apply is left out
    power = rec.per_model["vit-pre__adamw"].calibration.power["vmf_output_error"]
    assert isinstance(power, SeedPower) and set(power.power_at_n_seeds) >= {str(MIN_SEEDS)}


def test_markov_claim_rule_over_seeds_and_step0_baseline():
    rng = np.random.default_rng(3)
    iso, d = 6.0 * np.eye(6), 6
    R = rng.standard_normal((d, d))
    aniso = 4.0 * (R - R.T) + 2.0 * R  # non-isotropic and asymmetric: neither vMF nor reversible
    heads = _subspace_heads()
    good = _runs("vit-pre__adamw", lambda s: _attention_result(iso, s, rng, heads=heads))
    base = _runs("vit-pre__adamw", lambda s: _attention_result(aniso, s, rng, heads=(R, R.T)), steps=(0,))
    bad = _runs("vit-post__adamw", lambda s: _attention_result(aniso, s, rng, heads=(R, R.T)))
    rec = markov_claim(good + base, STATS)
    conf = rec.per_model["vit-pre__adamw"]
    assert conf.verdict == rec.verdict == "supported", conf.reason
    assert conf.estimate.estimate < 1e-6  # the exact vMF kernel moves tokens exactly as the attention does
    assert rec.seeds.n_seeds == {"vit-pre__adamw": MIN_SEEDS}
    assert conf.margin[1] <= STATS.margins["vmf_output_error"][1]  # never above the configured ceiling
    assert conf.details.criteria["head_isotropy"].estimate == pytest.approx(1.0)
    run = rec.per_run["vit-pre__adamw__s0"]
    assert run.verdict == "inconclusive" and run.details.n_inputs == B_INPUTS
    assert run.details.head_isotropy.rank_bound == pytest.approx(0.5)
    assert run.details.whole_sphere_fit["value"] > 0.1  # one kappa on the whole sphere cannot fit such heads
    assert run.calibration.size == 0.0  # no null passes the rule
    assert run.calibration.power["exact_vmf_kernel"] == 1.0
    assert set(conf.calibration.power) == {"head_isotropy", "vmf_output_error", "reversibility"}
    _assert_claim2_round_trip(rec)
    rec = markov_claim(good + base + bad, STATS)
    bad_conf = rec.per_model["vit-post__adamw"]
    assert bad_conf.verdict == "not supported"
    # each criterion is refuted, or outside at 95% but not at the family-wise level over the claim's 6 components
    # (3 seeds: the Bonferroni interval is wide); at least one refutes the configuration
    crit = bad_conf.details.criteria
    assert "not supported" in {c.verdict for c in crit.values()}
    assert all(c.verdict == "not supported" or "family-wise" in (c.why or "") for c in crit.values()), crit
    assert rec.verdict == "not supported"
    rec = markov_claim(good + bad[:2], STATS, excluded={"vit-post__adamw__s0": "diverged"})
    assert rec.verdict == "supported" and rec.per_run["vit-post__adamw__s0"].verdict == "did not train"


def test_markov_claim_fails_on_an_isotropic_attention_from_anisotropic_heads():
    """Random rank-2 heads fail head isotropy (and their kernels are no isotropic fit in their subspaces)."""
    rng = np.random.default_rng(5)
    Wq, Wk = np.zeros((6, 6)), np.zeros((6, 6))
    Wq[:2], Wk[:2] = rng.standard_normal((2, 6)), rng.standard_normal((2, 6))  # head 0: rank 2, random
    Wq[3:5], Wk[3:5] = rng.standard_normal((2, 6)), rng.standard_normal((2, 6))
    files = _runs("r__adamw", lambda s: _attention_result(None, s, rng, heads=(Wq, Wk)))
    conf = markov_claim(files, STATS).per_model["r__adamw"]
    assert conf.details.verdict_head_isotropy == "not supported" and conf.verdict == "not supported"


def test_markov_claim_without_weights_is_inconclusive_not_supported():
    rng = np.random.default_rng(6)
    files = _runs("r__adamw", lambda s: _attention_result(6.0 * np.eye(6), s, rng))
    conf = markov_claim(files, STATS).per_model["r__adamw"]
    assert conf.details.verdict_head_isotropy == "inconclusive" and conf.verdict == "inconclusive"
    assert conf.details.verdict_vmf_output_error == "inconclusive"  # no fit in each head's subspace: undefined
    assert "head's subspace" in conf.details.criteria["vmf_output_error"].why


# claim 4: tests/stats/test_time_to_target_claim.py


def test_markov_margins_are_fixed_before_the_data():
    """Whatever the nulls read, claim 2's margins are the configured ones (the null's bounds are only reported);
    `stats attention` on a user's array still lowers its whole-sphere output-error margin below the null."""
    from brownformer.stats.claims.claim2_markov import OUTPUT_ERROR_NULL_FRACTION, file_verdicts
    rng = np.random.default_rng(5)
    res = _attention_result(6.0 * np.eye(6), 100, rng, heads=_subspace_heads())
    shuffled = res.null_models.row_shuffled
    shuffled = dataclasses.replace(
        shuffled, vmf_output_error=dataclasses.replace(shuffled.vmf_output_error, confidence_interval=[0.6, 0.93]),
        reversibility_residual=dataclasses.replace(shuffled.reversibility_residual, confidence_interval=[0.08, 0.2]))
    res = dataclasses.replace(res, null_models=dataclasses.replace(res.null_models, row_shuffled=shuffled))
    run = markov_claim([{"run": "vit-pre__adamw__s0", "attention": res}], STATS).per_run["vit-pre__adamw__s0"]
    m = run.details.margins
    assert m.vmf_output_error == tuple(STATS.margins["vmf_output_error"])
    assert m.reversibility_residual == tuple(STATS.margins["reversibility_residual"])
    assert m.null_bounds["reversibility_residual_row_shuffled_lower"] == 0.08
    cli = file_verdicts(res, STATS)
    assert cli.vmf_output_error.margin[1] == pytest.approx(OUTPUT_ERROR_NULL_FRACTION * 0.6)
    assert cli.reversibility_residual.margin == list(STATS.margins["reversibility_residual"])


def test_the_whole_sphere_fit_never_decides_when_heads_are_narrower_than_the_model():
    """Heads isotropic in their subspaces (d_h < d) fail a whole-sphere fit: without the per-head fit the criterion
    is undefined, not "not supported"; with it, supported."""
    from brownformer.stats.markov.markov_chain import head_subspace_vmf
    rng = np.random.default_rng(8)
    d, H, n = 6, 2, 10

    def capture(step, with_fit):
        U = rng.standard_normal((1, B_INPUTS, n, d))
        U /= np.linalg.norm(U, axis=-1, keepdims=True)
        S = np.stack([4 * np.einsum("lbid,lbjd->lbij", U[..., h * 3:(h + 1) * 3], U[..., h * 3:(h + 1) * 3])
                      for h in range(H)], 1)  # head h: c <P_h u_i, P_h u_j>, P_h its 3 coordinates
        out = analyze_attention(_softmax(S), features=U, rng=0, head_axis=1)
        kernels = HeadKernels(per_layer=[weight_isotropy(*_subspace_heads(), n_heads=H)])
        if with_fit:
            kernels = dataclasses.replace(kernels, subspace_vmf=head_subspace_vmf(_softmax(S), U, kernels))
        return dataclasses.replace(out, step=step, null_models=attention_null_models(_softmax(S), features=U, rng=1),
                                   head_kernels=kernels)

    for with_fit, want in ((False, "inconclusive"), (True, "supported")):
        conf = markov_claim(_runs("vit-pre__adamw", lambda s: capture(s, with_fit)), STATS).per_model["vit-pre__adamw"]
        assert conf.details.verdict_vmf_output_error == want, conf.reason
