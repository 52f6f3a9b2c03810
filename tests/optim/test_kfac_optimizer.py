"""KFAC as a torch.optim.Optimizer: cg == eigen, resume, any nn.Linear model, validation, failures."""

from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from brownformer.optim._kfac_capture import layer_scope
from brownformer.optim.kfac import KFAC

CG_EIGEN_RTOL = 1e-6


def _train(model, opt, batch, loss_fn, steps, start=0):
    losses = []
    for step in range(start, start + steps):
        x, y = batch(step)
        opt.zero_grad()
        loss = loss_fn(model, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _max_relative_param_diff(a: nn.Module, b: nn.Module) -> float:
    worst = 0.0
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        err = float((p - q).detach().norm() / p.detach().norm())
        if err > worst:
            worst, worst_name = err, name
    if worst > CG_EIGEN_RTOL:
        print("worst parameter:", worst_name, worst)
    return worst


@pytest.mark.parametrize("case", ["mlp-tokens", "transformer"])
def test_cg_to_convergence_equals_eigen(case_builder, case):
    """CG on the current factors, preconditioned by the basis of step 0 only, equals the exact solve from
    an eigendecomposition of the current factors at every step."""
    model, batch, loss_fn = case_builder(case)
    twin = copy.deepcopy(model)
    common = dict(lr=0.1, damping=1e-2, factor_decay=0.5, momentum=0.9, weight_decay=1e-3)
    eigen = KFAC(model, inverse="eigen", inverse_every=1, **common)
    cg = KFAC(twin, inverse="cg", inverse_every=1000, cg_max_iter=1000, cg_tol=1e-13, adapt_every=1, **common)
    _train(model, eigen, batch, loss_fn, 5)
    _train(twin, cg, batch, loss_fn, 5)
    stats = cg.last_stats
    assert eigen.last_stats["preconditioned"] and stats["cg_fallbacks_total"] == 0
    assert stats["cg_iterations_max"] > 1  # the stale basis made CG iterate
    assert _max_relative_param_diff(model, twin) < CG_EIGEN_RTOL


@pytest.mark.parametrize("options", [
    dict(inverse="eigen", inverse_every=7),
    dict(inverse="cg", factor_every=3),
    dict(inverse="eigen", fisher="empirical", weight_sharing="reduce"),
], ids=["eigen", "cg", "eigen-empirical-reduce"])
def test_state_dict_round_trip_resumes_exactly(case_builder, options):
    model, batch, loss_fn = case_builder("mlp")
    twin = copy.deepcopy(model)
    straight = KFAC(model, lr=0.05, **options)
    _train(model, straight, batch, loss_fn, 100)

    first = KFAC(twin, lr=0.05, **options)
    _train(twin, first, batch, loss_fn, 50)
    buffer = io.BytesIO()
    torch.save({"model": twin.state_dict(), "opt": first.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    resumed_model, _, _ = case_builder("mlp", seed=99)  # different init: everything comes from the file
    resumed_model.load_state_dict(saved["model"])
    resumed = KFAC(resumed_model, lr=0.7, damping=0.9, momentum=0.1)  # defaults: the settings come from the file
    resumed.load_state_dict(saved["opt"])
    for key, value in options.items():
        assert getattr(resumed, key) == value
    _train(resumed_model, resumed, batch, loss_fn, 50, start=50)
    for (name, p), q in zip(model.named_parameters(), resumed_model.parameters()):
        assert torch.equal(p, q), f"{name}: max diff {(p - q).abs().max():.3g}"
    # same memory layouts as the uninterrupted run: BLAS may round two layouts differently on some CPUs
    for p, q in zip(model.parameters(), resumed_model.parameters()):
        for key, value in straight.state[p].items():
            if isinstance(value, torch.Tensor):
                assert value.stride() == resumed.state[q][key].stride(), key


@pytest.mark.parametrize("inverse", ["eigen", "cg"])
@pytest.mark.parametrize("case", ["mlp", "mlp-tokens", "transformer"])
def test_trains_any_linear_model(case_builder, case, inverse):
    model, batch, loss_fn = case_builder(case, dtype=torch.float32)
    x, y = batch(0)
    # one batch repeated: the loss reaches ~0, so G shrinks and a small damping lets the step grow
    opt = KFAC(model, lr=0.1, inverse=inverse, per_head=case == "transformer", kl_clip=1e-2, damping=0.3)
    losses = _train(model, opt, lambda step: (x, y), loss_fn, 30)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.7 * losses[0], losses
    assert set(opt.timings) == {"factors", "inverse", "apply"}


def test_trains_project_vit():
    from brownformer import models
    from brownformer.config import ModelConfig

    cfg = ModelConfig(name="vit-tiny", arch="vit", dataset="test", ln="pre", d_model=16, n_heads=2,
                      n_layers=2, patch_size=4)
    torch.manual_seed(0)
    model = models.build_model(cfg, n_classes=3, image_shape=(1, 8, 8))
    opt = KFAC(model, lr=0.05, inverse="cg", per_head=True)
    images, labels = torch.randn(16, 1, 8, 8), torch.randint(0, 3, (16,))
    losses = []
    for _ in range(15):
        opt.zero_grad()
        loss = models.loss_fn(model(images), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] and opt.last_stats["cg_fallbacks_total"] == 0


def test_out_of_scope_parameters_get_the_base_update(tiny_transformer):
    torch.manual_seed(0)
    model = tiny_transformer().double()
    opt = KFAC(model, lr=0.1, scope="attention", momentum=0.0, weight_decay=0.0, rest_update="sgd")
    assert {layer.name.rsplit(".", 1)[1] for layer in opt.layers} == {"q", "k", "v", "o"}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    F.cross_entropy(model(torch.randn(4, 6, 5, dtype=torch.float64)), torch.tensor([0, 1, 2, 0])).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    opt.step()
    for name, p in model.named_parameters():
        if "attn" not in name:  # LayerNorm, embedding, MLP, head: plain SGD
            torch.testing.assert_close(p, before[name] - 0.1 * grads[name])


def test_scope_rule():
    assert layer_scope("blocks.3.attn.q") == "attention"
    assert layer_scope("encoder.layers.0.self_attention.out_proj") == "attention"
    assert layer_scope("blocks.3.mlp.fc1") == "mlp"
    assert layer_scope("head") == "other" and layer_scope("0") == "other"


@pytest.mark.parametrize("kwargs, message", [
    (dict(lr=-1.0), "lr"), (dict(damping=0.0), "damping"), (dict(inverse="lu"), "inverse"),
    (dict(factor_decay=1.0), "factor_decay"), (dict(factor_every=0), "factor_every"),
    (dict(inverse_every=0), "inverse_every"), (dict(cg_max_iter=0), "cg_max_iter"),
    (dict(cg_tol=0.0), "cg_tol"), (dict(weight_sharing="mean"), "weight_sharing"),
    (dict(scope="conv"), "scope"), (dict(momentum=1.0), "momentum"),
    (dict(weight_decay=-1.0), "weight_decay"), (dict(kl_clip=0.0), "kl_clip"),
    (dict(fisher="true"), "fisher"), (dict(scope="attention"), "no trainable nn.Linear"),
    (dict(per_head=True, scope="all"), None),
])
def test_argument_validation(kwargs, message):
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    kwargs = {"lr": 0.1, **kwargs}
    if message is None:  # per_head on a model without attention is a no-op, not an error
        KFAC(model, **kwargs)
        return
    with pytest.raises(ValueError, match=message):
        KFAC(model, **kwargs)


def test_per_head_without_head_count_is_an_error():
    model = nn.Module()
    model.attn = nn.Module()
    model.attn.q = nn.Linear(4, 4)
    with pytest.raises(ValueError, match="n_heads"):
        KFAC(model, lr=0.1, per_head=True)
    assert KFAC(model, lr=0.1, per_head=True, n_heads=2).layers[0].head_size == 2


def _one_batch_step(model, opt):
    x = torch.randn(8, 3, dtype=torch.float64)
    opt.zero_grad()
    F.cross_entropy(model(x), torch.randint(0, 2, (8,))).backward()
    opt.step()


def _nan_batch_step(model, opt):
    x = torch.randn(8, 3, dtype=torch.float64)
    x[0, 0] = float("nan")
    opt.zero_grad()
    F.cross_entropy(model(x), torch.randint(0, 2, (8,))).backward()
    opt.step()


def test_nonfinite_gradient_restores_the_last_good_state(caplog):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    opt = KFAC(model, lr=0.1, adapt_every=2, damping=1e-2)
    for _ in range(3):  # snapshots before steps 0 and 2
        _one_batch_step(model, opt)
    good = opt.good.params
    assert opt.good.step == 2 and not all(torch.equal(p, q) for p, q in zip(model.parameters(), good))
    with caplog.at_level("WARNING"):
        _nan_batch_step(model, opt)  # step 3: skipped on the device, no host read
        assert not caplog.records
        stats = opt.last_stats  # a host read: the failure is handled here
    assert [r.getMessage() for r in caplog.records if "K-FAC" in r.getMessage()][0].count("restored the state of step 2")
    assert len(caplog.records) == 1  # one line per incident
    assert stats["failures_total"] == 1 and not stats["preconditioned"] and stats["damping"] == pytest.approx(0.1)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), good))
    assert all("momentum_buffer" not in opt.state[p] for p in opt._params())  # momentum restarts from zero
    _one_batch_step(model, opt)  # and training continues
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("adapt_every", [1, 5])
def test_consecutive_failures_stop_with_one_error(adapt_every):
    """Each check that finds failed steps is one incident; max_failures + 1 in a row raise, at the check."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    opt = KFAC(model, lr=0.1, max_failures=3, adapt_every=adapt_every)
    _one_batch_step(model, opt)  # step 0, a scheduled check
    for _ in range(3 * adapt_every):  # checks at steps adapt_every, 2 adapt_every, 3 adapt_every: 3 incidents
        _nan_batch_step(model, opt)
    assert opt.failures == 3
    for _ in range(adapt_every - 1):
        _nan_batch_step(model, opt)
    with pytest.raises(FloatingPointError, match="4 failed checks in a row"):
        _nan_batch_step(model, opt)


def test_nonfinite_factor_skips_the_step_raises_damping_and_refreshes_the_factors():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    opt = KFAC(model, lr=0.1, inverse="eigen", inverse_every=1, momentum=0.0, kl_clip=None, damping=3e-3, factor_every=1)
    _one_batch_step(model, opt)
    opt.state[model[0].weight]["factor_a"][0, 0] = float("nan")  # a corrupted running factor
    model.zero_grad()
    opt.capture.enabled = False  # no new batch factors: the corrupted one is used as is
    F.cross_entropy(model(torch.randn(8, 3, dtype=torch.float64)), torch.randint(0, 2, (8,))).backward()
    before = [p.detach().clone() for p in model.parameters()]
    opt.step()
    assert opt.last_stats["damping"] == pytest.approx(3e-2) and not opt.last_stats["preconditioned"]
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    _one_batch_step(model, opt)  # the next batch factor replaces the corrupted one
    assert opt.last_stats["preconditioned"] and all(torch.isfinite(p).all() for p in model.parameters())
    assert torch.isfinite(opt.state[model[0].weight]["factor_a"]).all()


def test_cg_divergence_falls_back_to_raw_gradient_and_is_counted():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    opt = KFAC(model, lr=0.1, inverse="cg", momentum=0.0, kl_clip=None, factor_every=1000)
    _one_batch_step(model, opt)
    opt.state[model[2].weight]["factor_g"].mul_(-10.0)  # indefinite operator: CG must refuse it
    opt.state_changed()
    model.zero_grad()
    F.cross_entropy(model(torch.randn(8, 3, dtype=torch.float64)), torch.randint(0, 2, (8,))).backward()
    before = [(p.detach().clone(), p.grad.clone()) for p in model[2].parameters()]
    opt.step()
    assert opt.last_stats["cg_fallbacks"] == 1
    for p, (p0, g) in zip(model[2].parameters(), before):
        torch.testing.assert_close(p, p0 - 0.1 * g)


class _WithUnusedTwin(nn.Module):
    """An MLP plus a layer of the same shape as its hidden layer that the forward never calls."""

    def __init__(self, mlp: nn.Module):
        super().__init__()
        self.mlp = mlp
        self.unused = nn.Linear(10, 10).double()

    def forward(self, x):
        return self.mlp(x)


def test_layer_without_gradient_leaves_its_shape_group_exact(case_builder):
    """A same-shaped layer that got no gradient neither blocks nor changes the others' updates."""
    model, batch, loss_fn = case_builder("mlp")
    wrapped = _WithUnusedTwin(copy.deepcopy(model))
    unused_before = copy.deepcopy(wrapped.unused.state_dict())
    for inverse in ("eigen", "cg"):
        plain, twin = copy.deepcopy(model), copy.deepcopy(wrapped)
        _train(plain, KFAC(plain, lr=0.05, inverse=inverse), batch, loss_fn, 5)
        _train(twin, KFAC(twin, lr=0.05, inverse=inverse), batch, loss_fn, 5)
        for p, q in zip(plain.parameters(), twin.mlp.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-14)
        for name, value in twin.unused.state_dict().items():
            assert torch.equal(value, unused_before[name])
