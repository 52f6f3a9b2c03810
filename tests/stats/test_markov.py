"""Markov-chain statistics against chains with known answers."""
import numpy as np
import pytest

from brownformer.stats import analyze_attention, attention_null_models, weight_isotropy
from brownformer.stats.markov import fit_vmf_kernel

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
    pm = out["per_matrix"]
    assert abs(pm["spectral_gap"][0] - (p + q)) < EXACT  # lambda_2 = 1 - p - q
    pi = np.array([q, p]) / (p + q)
    assert abs(pm["stationary_entropy"][0] + np.sum(pi * np.log(pi))) < EXACT
    assert pm["reversibility_residual"][0] < EXACT  # every 2-state chain is reversible
    assert abs(pm["dobrushin"][0] - abs(1 - p - q)) < EXACT


@pytest.fixture(scope="module")
def features():
    U = np.random.default_rng(0).standard_normal((3, 12, 6))
    return U / np.linalg.norm(U, axis=-1, keepdims=True)


def test_symmetric_logits_exactly_reversible(features):
    M = np.random.default_rng(1).standard_normal((6, 6))
    M = M + M.T
    A = _softmax(np.einsum("bid,de,bje->bij", features, M, features))
    out = analyze_attention(A)
    assert max(out["per_matrix"]["reversibility_residual"]) < 1e-8
    assert max(out["per_matrix"]["entropy_production"]) < 1e-10


def test_asymmetric_logits_not_reversible(features):
    M = np.random.default_rng(2).standard_normal((6, 6)) * 2
    A = _softmax(np.einsum("bid,de,bje->bij", features, M - M.T, features))
    out = analyze_attention(A)
    assert min(out["per_matrix"]["reversibility_residual"]) > 0.05
    assert min(out["per_matrix"]["entropy_production"]) > 1e-4


@pytest.mark.parametrize("kappa", [0.5, 4.0, 12.0])
def test_vmf_kappa_recovered(features, kappa):
    A = _softmax(kappa * features[0] @ features[0].T)
    fit = fit_vmf_kernel(A, features[0])
    assert abs(fit["kappa"] - kappa) < KAPPA_TOL * max(1, kappa)
    assert fit["kl"] < 1e-8 and fit["explained"] > 0.999


def test_attention_shapes_and_features_broadcast(features):
    L, H, B, n, d = 2, 3, 3, 12, 6
    U = np.broadcast_to(features, (L, B, n, d))
    A = _softmax(np.broadcast_to(5.0 * np.einsum("lbid,lbjd->lbij", U, U)[:, None], (L, H, B, n, n)))
    out = analyze_attention(A, features=U)
    assert out["n_matrices"] == L * H * B and len(out["per_matrix"]["vmf_kappa"]) == L * H * B
    assert abs(out["aggregate"]["vmf_kappa"]["mean"] - 5.0) < 1e-2
    for key in ("spectral_gap", "stationary_entropy", "entropy_rate", "reversibility_residual", "dobrushin",
                "doubly_stochastic_deviation"):
        assert key in out["aggregate"]


def test_causal_marks_undefined(features):
    A = _softmax(np.where(np.tril(np.ones((12, 12))) > 0, 3.0 * features[0] @ features[0].T, -np.inf))
    out = analyze_attention(A, features=features[0])
    assert out["causal"] is True
    assert out["per_matrix"]["reversibility_residual"] == [None]
    assert "reversibility_residual" in out["undefined"]
    assert abs(out["aggregate"]["vmf_kappa"]["mean"] - 3.0) < 1e-2


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
    assert abs(out["identity_fraction"][0] - 1) < EXACT and out["asymmetry"][0] < EXACT
    R = np.random.default_rng(3).standard_normal((d, d))
    out = weight_isotropy(np.eye(d), R - R.T, n_heads=2)
    assert len(out["identity_fraction"]) == 2
    with pytest.raises(ValueError):
        weight_isotropy(np.eye(d), np.eye(d), n_heads=3)


def test_null_models_destroy_kernel(features):
    A = _softmax(6.0 * np.einsum("bid,bjd->bij", features, features))
    nulls = attention_null_models(A, features=features, init_attention=np.full((3, 12, 12), 1 / 12))
    assert nulls["shuffled_keys"]["vmf_explained"]["mean"] < 0.3
    assert nulls["init"]["spectral_gap"]["mean"] == pytest.approx(1.0)
    assert "row_shuffled" in nulls
