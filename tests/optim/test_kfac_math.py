"""K-FAC maths against exact references: GGN blocks (torch.func), exact solves, CG diagnostics."""

from __future__ import annotations

import pytest
import torch
from torch.func import jacrev

from brownformer.optim._kfac_blocks import pad, plan_blocks, unpad
from brownformer.optim._kfac_pcg import block_conjugate_gradient, conjugate_gradient
from brownformer.optim._kfac_math import (all_finite, finite_rows, padded_eigh, block_diagonal, eigen_solve,
                                          input_factor, stacked_input_factor, stacked_output_factor,
                                          kl_clip_scale, kronecker_operator, output_factor, symmetric_eigh)

EXACT_RTOL = 1e-6  # K-FAC is exact in these cases; only float64 round-off remains
DIMS = (4, 5, 3, 2)  # deep linear net widths: input, two hidden, output
N, R = 6, 3  # sequences, tokens per sequence


def _relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    err = (actual - expected).norm() / expected.norm()
    if err > EXACT_RTOL:
        diff = (actual - expected).abs().flatten()
        worst = diff.topk(min(5, diff.numel())).indices
        print("worst entries (actual, expected):",
              list(zip(actual.flatten()[worst].tolist(), expected.flatten()[worst].tolist())))
    return float(err)


def _deep_linear(params: list[torch.Tensor], x: torch.Tensor) -> list[torch.Tensor]:
    """Token-wise deep linear net; params are augmented matrices [W, b]; returns every output s_l."""
    outputs, h = [], x
    for wb in params:
        h = h @ wb[:, :-1].T + wb[:, -1]
        outputs.append(h)
    return outputs


@pytest.fixture
def deep_linear():
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(d_out, d_in + 1, generator=gen, dtype=torch.float64) / d_in ** 0.5
              for d_in, d_out in zip(DIMS[:-1], DIMS[1:])]
    x = torch.randn(N, R, DIMS[0], generator=gen, dtype=torch.float64)
    return params, x


@pytest.mark.parametrize("weight_sharing", ["expand", "reduce"])
@pytest.mark.parametrize("layer", [0, 1, 2])
def test_kfac_block_equals_exact_ggn_on_deep_linear_net(deep_linear, weight_sharing, layer):
    """expand: per-token MSE summed over tokens; reduce: MSE on token-mean outputs (Eschenhagen et al. 2023)."""
    params, x = deep_linear

    def network_output(p_l: torch.Tensor) -> torch.Tensor:
        out = _deep_linear(params[:layer] + [p_l] + params[layer + 1:], x)[-1]  # (N, R, d_out)
        return out if weight_sharing == "expand" else out.mean(dim=1)  # (N, R, d) or (N, d)

    # GGN of L = (1/N) sum_n 1/2 ||f_n - y_n||^2: (1/N) J^T J (loss Hessian is the identity)
    jac = jacrev(network_output)(params[layer]).reshape(-1, params[layer].numel())
    ggn = jac.T @ jac / N

    inputs = [x] + [s.detach() for s in _deep_linear(params, x)[:-1]]
    outputs = _deep_linear_with_leaves(params, x, layer)
    s_l, final = outputs
    pooled = final if weight_sharing == "expand" else final.mean(dim=1)
    factor_g = torch.zeros(DIMS[layer + 1], DIMS[layer + 1], dtype=torch.float64)
    for k in range(DIMS[-1]):  # backpropagate each column of the loss Hessian's square root
        (g,) = torch.autograd.grad(pooled[..., k].sum() / N, s_l, retain_graph=True)
        factor_g += output_factor(g, weight_sharing=weight_sharing)
    factor_a = input_factor(inputs[layer], bias=True, weight_sharing=weight_sharing)
    assert _relative_error(torch.kron(factor_g, factor_a), ggn) < EXACT_RTOL


def _deep_linear_with_leaves(params, x, layer):
    """Forward where the output of ``layer`` is a leaf we can differentiate with respect to."""
    h = x
    s_l = None
    for i, wb in enumerate(params):
        h = h @ wb[:, :-1].T + wb[:, -1]
        if i == layer:
            s_l = h = h.detach().requires_grad_()
    return s_l, h


def _spd_factors(k, n_out, n_in, seed=0):
    gen = torch.Generator().manual_seed(seed)
    m_g = torch.randn(k, n_out, 2 * n_out, generator=gen, dtype=torch.float64)
    m_a = torch.randn(k, n_in, 2 * n_in, generator=gen, dtype=torch.float64)
    v = torch.randn(k, n_out, n_in, generator=gen, dtype=torch.float64)
    return m_g @ m_g.transpose(1, 2) / n_out, m_a @ m_a.transpose(1, 2) / n_in, v


def test_eigen_solve_matches_dense_kronecker_solve():
    g, a, v = _spd_factors(3, 4, 5)
    damping = 1e-2
    x = eigen_solve(symmetric_eigh(g), symmetric_eigh(a), v, damping)
    for j in range(3):
        dense = torch.kron(g[j], a[j]) + damping * torch.eye(20, dtype=torch.float64)  # row-major vec
        expected = torch.linalg.solve(dense, v[j].flatten()).reshape(4, 5)
        assert _relative_error(x[j], expected) < EXACT_RTOL


def test_cg_to_convergence_matches_eigen_solve():
    g, a, v = _spd_factors(4, 6, 3)
    exact = eigen_solve(symmetric_eigh(g), symmetric_eigh(a), v, 1e-3)
    result = conjugate_gradient(g, a, v, 1e-3, max_iter=500, tol=1e-12)
    assert bool(result.ok.all())
    assert _relative_error(result.solution, exact) < EXACT_RTOL
    assert (result.iterations <= 2 * 6 * 3).all()  # exact in dim = 18 steps in exact arithmetic


def test_cg_stops_at_tolerance_and_warm_start_saves_iterations():
    g, a, v = _spd_factors(2, 8, 8, seed=1)
    cold = conjugate_gradient(g, a, v, 1e-2, max_iter=100, tol=1e-2)
    assert (cold.relative_residual <= 1e-2).all()
    residual = v - kronecker_operator(g, a, cold.solution, 1e-2)
    assert torch.allclose(residual.flatten(1).norm(dim=1) / v.flatten(1).norm(dim=1), cold.relative_residual)
    warm = conjugate_gradient(g, a, v, 1e-2, x0=cold.solution, max_iter=100, tol=1e-2)
    assert (warm.iterations == 0).all()
    capped = conjugate_gradient(g, a, v, 1e-6, max_iter=2, tol=1e-12)
    assert (capped.iterations == 2).all() and bool(capped.ok.all())


def test_cg_stopping_early_changes_no_result():
    """On the CPU the loop stops once every system converged: a cap far above the iterations needed gives
    bit-identical results to a cap at exactly the most iterations a system needed."""
    g, a, v = _spd_factors(4, 6, 5, seed=3)
    v[2] = 0.0  # a converged-at-start system stays frozen
    loose = conjugate_gradient(g, a, v, 1e-2, max_iter=200, tol=1e-3)
    needed = int(loose.iterations.max())
    assert 0 < needed < 200 and loose.iterations[2] == 0
    tight = conjugate_gradient(g, a, v, 1e-2, max_iter=needed, tol=1e-3)
    assert torch.equal(loose.solution, tight.solution) and torch.equal(loose.iterations, tight.iterations)
    assert torch.equal(loose.relative_residual, tight.relative_residual) and torch.equal(loose.ok, tight.ok)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_finite_checks_equal_isfinite(bad):
    x = torch.randn(5, 7, 3)
    for j, index in ((1, (0, 0)), (3, (6, 2)), (4, (3, 1))):
        x[j][index] = bad
    assert torch.equal(finite_rows(x), torch.isfinite(x).flatten(1).all(dim=1))
    assert finite_rows(x).tolist() == [True, False, True, False, False]
    tensors = [torch.randn(3), torch.randn(2, 2, dtype=torch.float64), torch.empty(0)]
    assert bool(all_finite(tensors))
    tensors[1][1, 0] = bad
    assert not bool(all_finite(tensors))


def test_cg_flags_indefinite_and_nonfinite_systems():
    g, a, v = _spd_factors(3, 4, 4, seed=2)
    g[1] = -g[1]  # negative curvature: not SPD
    a[2, 0, 0] = float("nan")
    result = conjugate_gradient(g, a, v, 1e-3, max_iter=20, tol=1e-8)
    assert result.ok.tolist() == [True, False, False]


def test_factor_shapes_bias_and_block_diagonal():
    a = torch.randn(2, 3, 4, dtype=torch.float64)
    factor = input_factor(a, bias=True, weight_sharing="expand")
    assert factor.shape == (5, 5) and torch.isclose(factor[-1, -1], torch.tensor(1.0, dtype=torch.float64))
    g = torch.randn(4, 6, dtype=torch.float64)
    bd = block_diagonal(output_factor(g, weight_sharing="expand"), 3)
    assert bd[:3, 3:].abs().max() == 0 and torch.allclose(bd[:3, :3], output_factor(g, weight_sharing="expand")[:3, :3])


def test_kl_clip_scale():
    vg = torch.tensor(4.0)
    assert float(kl_clip_scale(vg, lr=0.5, kl_clip=0.25)) == pytest.approx(0.5)  # sqrt(0.25 / (0.25 * 4))
    assert float(kl_clip_scale(vg, lr=0.5, kl_clip=100.0)) == 1.0
    assert float(kl_clip_scale(vg, lr=0.5, kl_clip=None)) == 1.0
    assert float(kl_clip_scale(torch.tensor(float("nan")), lr=0.5, kl_clip=1e-3)) == 1.0


def test_block_cg_equals_cg_per_block():
    """Running differently shaped blocks in one loop follows each block's own CG exactly."""
    blocks = [_spd_factors(3, 4, 5, seed=3), _spd_factors(2, 6, 3, seed=4), _spd_factors(1, 2, 7, seed=5)]
    x0 = [None, 0.1 * blocks[1][2], None]
    joint = block_conjugate_gradient([b[0] for b in blocks], [b[1] for b in blocks], [b[2] for b in blocks], 1e-2,
                                     x0=x0, max_iter=4, tol=1e-3)
    for j, (g, a, v) in enumerate(blocks):
        alone = conjugate_gradient(g, a, v, 1e-2, x0=x0[j], max_iter=4, tol=1e-3)
        lo = sum(b[2].shape[0] for b in blocks[:j])
        assert torch.allclose(joint.solution[j], alone.solution, rtol=1e-12, atol=1e-14)
        assert torch.equal(joint.iterations[lo: lo + len(v)], alone.iterations)
        assert torch.equal(joint.ok[lo: lo + len(v)], alone.ok)


def test_block_cg_with_a_cap_per_block_equals_cg_per_block_at_its_cap():
    """Per-block caps in one loop: each block stops at its own cap, exactly as alone (caps below convergence)."""
    blocks = [_spd_factors(3, 4, 5, seed=3), _spd_factors(2, 6, 3, seed=4)]
    caps = [1, 3]
    joint = block_conjugate_gradient([b[0] for b in blocks], [b[1] for b in blocks], [b[2] for b in blocks], 1e-2,
                                     max_iter=caps, tol=1e-12)
    for j, ((g, a, v), cap) in enumerate(zip(blocks, caps)):
        alone = conjugate_gradient(g, a, v, 1e-2, max_iter=cap, tol=1e-12)
        lo = sum(b[2].shape[0] for b in blocks[:j])
        assert torch.allclose(joint.solution[j], alone.solution, rtol=1e-12, atol=1e-14)
        assert torch.equal(joint.iterations[lo: lo + len(v)], torch.full((len(v),), cap))


def test_stacked_factors_equal_per_layer_factors():
    gen = torch.Generator().manual_seed(6)
    inputs = [torch.randn(4, 3, 5, generator=gen, dtype=torch.float64) for _ in range(3)]
    for sharing in ("expand", "reduce"):
        stacked_a = stacked_input_factor(inputs, bias=True, weight_sharing=sharing, dtype=torch.float64)
        stacked_g = stacked_output_factor(inputs, weight_sharing=sharing, dtype=torch.float64)
        for j, t in enumerate(inputs):
            assert torch.allclose(stacked_a[j], input_factor(t, bias=True, weight_sharing=sharing), rtol=1e-12)
            assert torch.allclose(stacked_g[j], output_factor(t, weight_sharing=sharing), rtol=1e-12)


def test_padded_eigh_equals_eigh_of_each_factor():
    gen = torch.Generator().manual_seed(3)
    mats = []
    for k, n in ((2, 3), (3, 9), (1, 8), (2, 1)):
        x = torch.randn(k, n, n + 2, generator=gen, dtype=torch.float64)
        mats.append(x @ x.transpose(1, 2) / n)
    mats[1][0] = 0.0  # a zero factor: all eigenvalues 0, as before the first batch
    for m, (d, q) in zip(mats, padded_eigh(mats)):
        torch.testing.assert_close(q @ torch.diag_embed(d) @ q.transpose(1, 2), m, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(q.transpose(1, 2) @ q, torch.eye(m.shape[-1], dtype=m.dtype).expand_as(m),
                                   rtol=0, atol=1e-12)
        assert q.is_contiguous() and (d >= 0).all()


def test_padded_blocks_round_trip_and_keep_the_big_shapes_apart():
    shapes = [(1, 32, 5), (16, 32, 33), (4, 64, 33), (4, 32, 65), (1, 10, 33)]
    blocks = plan_blocks(shapes)
    assert sorted(len(m) for _, _, m in blocks) == [2, 3] and {(o, n) for o, n, _ in blocks} == {(64, 65), (32, 33)}
    wide = plan_blocks([(1, 64, 5), (16, 64, 65), (4, 256, 65), (4, 64, 257), (1, 10, 65)])
    assert all(o * n <= 2.1 * 64 * 257 for o, n, _ in wide) and len(wide) == 3
    xs = [torch.randn(*s, dtype=torch.float64) for s in shapes]
    for x, back in zip(xs, unpad(pad(xs, blocks, shapes, "x"), blocks, shapes)):
        assert torch.equal(x, back)
