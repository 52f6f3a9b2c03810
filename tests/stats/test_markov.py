"""Markov-chain statistics against chains with known answers."""
import numpy as np
import pytest

from brownformer.stats import analyze_attention, attention_null_models, weight_isotropy
from brownformer.stats.markov.markov_chain import chain_statistics, dobrushin, fit_vmf_kernel
from brownformer.statsfile import AttentionStats, HeadKernels

EXACT = 1e-10
KAPPA_TOL = 1e-3


def _softmax(S):
    S = S - S.max(-1, keepdims=True)
    E = np.exp(S)
    return E / E.sum(-1, keepdims=True)


def test_two_state_chain_gap_and_stationary():
    p, q = 0.2, 0.3
    A = np.array([[1 - p, p], [q, 1 - q]])
    out = analyze_attention(A)
    pm = out.per_matrix
    assert abs(pm.spectral_gap[0] - (p + q)) < EXACT  # lambda_2 = 1 - p - q
    pi = np.array([q, p]) / (p + q)
    assert abs(pm.stationary_entropy[0] + np.sum(pi * np.log(pi))) < EXACT
    assert pm.reversibility_residual[0] < EXACT  # every 2-state chain is reversible
    assert abs(pm.dobrushin[0] - abs(1 - p - q)) < EXACT


@pytest.fixture(scope="module")
def features():
    U = np.random.default_rng(0).standard_normal((3, 12, 6))
    return U / np.linalg.norm(U, axis=-1, keepdims=True)


def test_symmetric_logits_exactly_reversible(features):
    M = np.random.default_rng(1).standard_normal((6, 6))
    M = M + M.T
    A = _softmax(np.einsum("bid,de,bje->bij", features, M, features))
    out = analyze_attention(A)
    assert max(out.per_matrix.reversibility_residual) < 1e-8
    assert max(out.per_matrix.entropy_production) < 1e-10


def test_asymmetric_logits_not_reversible(features):
    M = np.random.default_rng(2).standard_normal((6, 6)) * 2
    A = _softmax(np.einsum("bid,de,bje->bij", features, M - M.T, features))
    out = analyze_attention(A)
    assert min(out.per_matrix.reversibility_residual) > 0.05
    assert min(out.per_matrix.entropy_production) > 1e-4


@pytest.mark.parametrize("kappa", [0.5, 4.0, 12.0])
def test_vmf_kappa_recovered(features, kappa):
    A = _softmax(kappa * features[0] @ features[0].T)
    fit = fit_vmf_kernel(A, features[0])
    assert abs(fit.kappa - kappa) < KAPPA_TOL * max(1, kappa)
    assert fit.kl < 1e-8 and fit.explained_vs_uniform > 0.999


def test_attention_shapes_and_features_broadcast(features):
    L, H, B, n, d = 2, 3, 3, 12, 6
    U = np.broadcast_to(features, (L, B, n, d))
    A = _softmax(np.broadcast_to(5.0 * np.einsum("lbid,lbjd->lbij", U, U)[:, None], (L, H, B, n, n)))
    out = analyze_attention(A, features=U)
    assert out.n_matrices == L * H * B and len(out.per_matrix.vmf_kappa) == L * H * B
    assert abs(out.aggregate.vmf_kappa.mean - 5.0) < 1e-2
    for key in ("spectral_gap", "stationary_entropy", "entropy_rate", "reversibility_residual", "dobrushin",
                "doubly_stochastic_deviation"):
        assert out.aggregate.get(key) is not None


def test_causal_marks_undefined(features):
    A = _softmax(np.where(np.tril(np.ones((12, 12))) > 0, 3.0 * features[0] @ features[0].T, -np.inf))
    out = analyze_attention(A, features=features[0])
    assert out.causal is True
    assert out.per_matrix.reversibility_residual == [None]
    assert out.undefined.reversibility_residual
    assert abs(out.aggregate.vmf_kappa.mean - 3.0) < 1e-2


@pytest.mark.parametrize("bad,match", [
    (np.array([[0.5, 0.6], [0.5, 0.5]]), "row-stochastic"),
    (np.array([[1.5, -0.5], [0.5, 0.5]]), "negative"),
    (np.array([[np.nan, 1.0], [0.5, 0.5]]), "non-finite"),
    (np.ones((2, 3)) / 3, "square"),
], ids=["rowsum", "negative", "nan", "nonsquare"])
def test_bad_attention_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        analyze_attention(bad)


def test_weight_isotropy_identity_and_asymmetry():
    d = 8
    out = weight_isotropy(np.eye(d), 2.0 * np.eye(d), n_heads=1)
    assert abs(out.identity_fraction[0] - 1) < EXACT and out.asymmetry[0] < EXACT
    R = np.random.default_rng(3).standard_normal((d, d))
    out = weight_isotropy(np.eye(d), R - R.T, n_heads=2)
    assert len(out.identity_fraction) == 2
    with pytest.raises(ValueError):
        weight_isotropy(np.eye(d), np.eye(d), n_heads=3)


def test_identity_fraction_is_one_only_for_multiples_of_the_identity():
    """iota = 1 iff M ~ I: any symmetric perturbation with a non-constant diagonal or an off-diagonal entry lowers it."""
    d, rng = 6, np.random.default_rng(9)
    for c in (0.3, -2.0, 5.0):
        assert weight_isotropy(np.eye(d), c * np.eye(d), n_heads=1).identity_fraction[0] == pytest.approx(1.0)
    for _ in range(20):
        E = rng.standard_normal((d, d)) * 1e-2
        io = weight_isotropy(np.eye(d), np.eye(d) + E, n_heads=1).identity_fraction[0]
        assert io < 1.0 - 1e-8


@pytest.mark.parametrize("n_heads", [1, 2, 4])
def test_identity_fraction_rank_bound_and_attaining_kernel(n_heads):
    """iota <= d_h/d for every head (rank(M) <= d_h), with equality for M = c P, P a rank-d_h projection."""
    d, rng = 8, np.random.default_rng(n_heads)
    out = weight_isotropy(rng.standard_normal((d, d)), rng.standard_normal((d, d)), n_heads=n_heads)
    assert out.rank_bound == pytest.approx(1 / n_heads)
    assert max(out.identity_fraction) <= out.rank_bound + EXACT
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0].T  # rows: an orthonormal basis, d_h rows per head
    best = weight_isotropy(3.0 * Q, 3.0 * Q, n_heads=n_heads)
    np.testing.assert_allclose(best.identity_fraction_relative, 1.0, atol=1e-10)
    np.testing.assert_allclose(best.asymmetry, 0.0, atol=1e-12)


def test_symmetric_kernel_makes_the_attention_exactly_reversible(features):
    """Logits u_i^T M u_j with symmetric M (and any per-key bias): detailed balance with pi_i ~ Z_i."""
    rng = np.random.default_rng(10)
    R = rng.standard_normal((6, 6))
    bias = rng.standard_normal(6)
    S = np.einsum("bid,de,bje->bij", features, 2.0 * (R + R.T), features) + (features @ bias)[:, None, :]
    out = analyze_attention(_softmax(S))
    assert max(out.per_matrix.reversibility_residual) < 1e-10
    S = np.einsum("bid,de,bje->bij", features, 2.0 * (R - R.T), features)
    assert min(analyze_attention(_softmax(S)).per_matrix.reversibility_residual) > 0.05


def test_null_models_destroy_kernel(features):
    A = _softmax(6.0 * np.einsum("bid,bjd->bij", features, features))
    nulls = attention_null_models(A, features=features, init_attention=np.full((3, 12, 12), 1 / 12))
    assert nulls.shuffled_keys.vmf_output_error.mean > 0.7
    assert nulls.init.spectral_gap.mean == pytest.approx(1.0)
    assert nulls.row_shuffled is not None
    assert nulls.row_shuffled.vmf_output_error.mean > 0.7  # a random Markov matrix with the same rows
    assert nulls.row_shuffled.reversibility_residual.mean > 0.05


def test_exact_vmf_kernel_has_zero_output_error(features):
    A = _softmax(5.0 * np.einsum("bid,bjd->bij", features, features))
    out = analyze_attention(A, features=features)
    assert max(out.per_matrix.vmf_output_error) < 1e-6
    np.testing.assert_allclose(out.per_matrix.vmf_kappa, 5.0, atol=1e-4)


def test_anisotropic_bilinear_kernel_has_a_large_output_error(features):
    """Logits u^T M v with a random non-isotropic M (plus a key bias): no vMF kernel moves tokens as it does."""
    rng = np.random.default_rng(4)
    M = 3.0 * rng.standard_normal((6, 6))
    bias = 2.0 * rng.standard_normal(6)
    A = _softmax(np.einsum("bid,de,bje->bij", features, M, features) + (features @ bias)[:, None, :])
    out = analyze_attention(A, features=features)
    assert min(out.per_matrix.vmf_output_error) > 0.7


def test_output_error_equals_its_definition_on_one_matrix(features):
    """||(B - P_vMF) U|| / ||(B - P_unif) U|| computed by hand (diagonal removed, rows renormalised)."""
    from brownformer.stats.markov.kernel_fit import fit_vmf_kernel
    rng = np.random.default_rng(8)
    U = features[0]
    A = _softmax(np.einsum("id,de,je->ij", U, 2.0 * rng.standard_normal((6, 6)), U))
    n = A.shape[0]
    B = A * (1 - np.eye(n))
    B /= B.sum(1, keepdims=True)
    kappa = fit_vmf_kernel(A, U).kappa
    P = np.exp(kappa * U @ U.T) * (1 - np.eye(n))
    P /= P.sum(1, keepdims=True)
    Q = (1 - np.eye(n)) / (n - 1)
    ref = np.linalg.norm((B - P) @ U) / np.linalg.norm((B - Q) @ U)
    assert analyze_attention(A, features=U).per_matrix.vmf_output_error[0] == pytest.approx(ref, rel=1e-9)


def test_self_attention_is_not_evidence_for_a_kernel(features):
    """Mass on the diagonal and uniform elsewhere: with the diagonal excluded nothing is left to explain."""
    n = features.shape[1]
    A = np.full((n, n), 0.1 / (n - 1)) + np.eye(n) * (0.9 - 0.1 / (n - 1))
    out = analyze_attention(A[None], features=features[:1])
    assert abs(out.per_matrix.vmf_kappa[0]) < 1e-2
    assert out.per_matrix.vmf_output_error == [None]  # nothing moved off the mean field: undefined, not 0


def test_max_row_sum_error_is_measured():
    A = np.array([[0.6, 0.4 + 5e-4], [0.5, 0.5]])
    assert analyze_attention(A).max_row_sum_error == pytest.approx(5e-4)


@pytest.mark.parametrize("n", [2, 7, 16])
def test_dobrushin_equals_brute_force(n):
    A = _softmax(np.random.default_rng(n).standard_normal((3, n, n)) * 2)
    brute = [0.5 * max(np.abs(a[i] - a[j]).sum() for i in range(n) for j in range(n)) for a in A]
    np.testing.assert_allclose(dobrushin(A), brute, atol=EXACT)
    np.testing.assert_allclose(dobrushin(A, max_elements=n * n), brute, atol=EXACT)  # one row per chunk
    np.testing.assert_allclose(chain_statistics(A).dobrushin, brute, atol=EXACT)


def test_batched_kappa_equals_scalar_minimisation():
    """The vectorised Newton fit against scipy's bounded scalar minimiser on attention that is not vMF."""
    from scipy import optimize

    from brownformer.stats.markov.kernel_fit import _kernel_kl, _offdiagonal_rows, fit_vmf_kernels
    rng = np.random.default_rng(6)
    U = rng.standard_normal((4, 9, 5))
    U /= np.linalg.norm(U, axis=-1, keepdims=True)
    A = _softmax(3.0 * np.einsum("kid,kjd->kij", U, U) + rng.standard_normal((4, 9, 9)))
    fit = fit_vmf_kernels(A, U)
    for k in range(4):
        G = U[k] @ U[k].T
        B, mask, keep = _offdiagonal_rows(A[k][None], False)
        ref = optimize.minimize_scalar(lambda c: _kernel_kl(c * G[None], B, mask, keep)[0], bounds=(-50, 50),
                                       method="bounded", options={"xatol": 1e-9})
        assert fit.kappa[k] == pytest.approx(ref.x, abs=1e-5)
        assert fit.kl[k] == pytest.approx(ref.fun, abs=1e-10)


# ---------- claim 2 per head: the subspace fit, the gauge, the reversibility margin's consequence ----------

def _head_attention(Wq, Wk, U, H, scale=4.0):
    """(1, H, B, n, n) attention of heads reading unit tokens U (1, B, n, d) with (W_Q, W_K) row blocks."""
    dh = Wq.shape[0] // H
    S = np.stack([np.einsum("lbid,ed,ef,lbjf->lbij", U, Wq[h * dh:(h + 1) * dh], Wk[h * dh:(h + 1) * dh], U)
                  for h in range(H)], 1) * scale
    A = np.exp(S - S.max(-1, keepdims=True))
    return A / A.sum(-1, keepdims=True)


def test_heads_isotropic_in_their_subspace_fit_exactly_there_and_not_on_the_whole_sphere():
    """W_Q = W_K = c x (the head's block of the identity), rotated: each head attends exactly as
    softmax(kappa <P u_i, P u_j>), so the fit in its subspace has zero output error; one kappa on the whole sphere
    cannot reproduce it (d_h < d)."""
    from brownformer.stats.markov.markov_chain import head_subspace_vmf
    rng = np.random.default_rng(0)
    d, H = 8, 2
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))  # heads in a rotated frame: the subspaces are not coordinates
    W = 2.0 * Q.T
    U = rng.standard_normal((1, 8, 10, d))
    U /= np.linalg.norm(U, axis=-1, keepdims=True)
    A = _head_attention(W, W, U, H)
    hk = HeadKernels(per_layer=[weight_isotropy(W, W, H)])
    sub = head_subspace_vmf(A, U, hk, head_axis=1)
    whole = analyze_attention(A, features=U, head_axis=1)
    assert sub.aggregate.vmf_output_error.mean < 1e-6
    assert whole.aggregate.vmf_output_error.mean > 0.3
    assert np.allclose(hk.per_layer[0].identity_fraction_relative, 1.0)
    assert head_subspace_vmf(A, U, HeadKernels(per_layer=[])).why_undefined


def test_folded_gain_makes_head_isotropy_gauge_invariant():
    """M on z = diag(gamma) W_Q^T W_K diag(gamma): unchanged by gamma -> s gamma, W -> W diag(1/s); the unfolded
    form moves."""
    rng = np.random.default_rng(1)
    d, H = 8, 2
    Wq, Wk, gamma = rng.standard_normal((d, d)), rng.standard_normal((d, d)), np.exp(rng.normal(0, 1, d))
    s = np.exp(rng.normal(0, 1, d)) * rng.choice([-1, 1], d)
    a = weight_isotropy(Wq, Wk, H, gain=gamma)
    b = weight_isotropy(Wq / s, Wk / s, H, gain=gamma * s)
    assert np.allclose(a.identity_fraction_relative, b.identity_fraction_relative, rtol=1e-10)
    assert not np.allclose(weight_isotropy(Wq, Wk, H).identity_fraction_relative,
                           weight_isotropy(Wq / s, Wk / s, H).identity_fraction_relative)
    with pytest.raises(ValueError, match="gain has"):
        weight_isotropy(Wq, Wk, H, gain=np.ones(d + 1))


def test_reversibility_margin_bounds_the_flow_change_to_the_nearest_reversible_chain():
    """The additive reversibilisation A_rev = (A + Pi^-1 A^T Pi)/2 is reversible with the same pi, and
    ||Pi (A - A_rev)||_F / ||Pi A||_F = r / 2 for the detailed-balance residual r (claim2_markov's margin)."""
    rng = np.random.default_rng(2)
    S = rng.standard_normal((6, 6)) * 2
    A = np.exp(S) / np.exp(S).sum(-1, keepdims=True)
    r = chain_statistics(A[None]).reversibility_residual[0]
    w, V = np.linalg.eig(A.T)
    pi = np.abs(V[:, np.argmin(np.abs(w - 1))].real)
    pi /= pi.sum()
    A_rev = (A + (A.T * pi[None, :]) / pi[:, None]) / 2
    assert np.allclose(A_rev.sum(-1), 1) and np.allclose(pi @ A_rev, pi)
    flow = pi[:, None] * A_rev
    assert np.allclose(flow, flow.T)  # detailed balance
    change = np.linalg.norm(pi[:, None] * (A - A_rev)) / np.linalg.norm(pi[:, None] * A)
    assert change == pytest.approx(r / 2, rel=1e-10)
    assert chain_statistics(A_rev[None]).reversibility_residual[0] < 1e-10
