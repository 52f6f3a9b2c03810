"""K-FAC's torch.optim-like API and its issue-11 guarantees: factors from step one, one Fisher scale,
hooks that can be removed, per-group settings, damping that recovers, few host syncs."""

from __future__ import annotations

import copy
import gc

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from brownformer.optim import _kfac_math
from brownformer.optim._kfac_math import factor_weight
from brownformer.optim.kfac import KFAC

RTOL, ATOL = 1e-10, 1e-14  # float64 round-off
MC_AGREEMENT = 0.1  # relative Frobenius gap of E[G_mc] and E[G_emp] estimated from 40 batches of 512 rows
MAX_SYNCS_PER_STEP = 2


def _step(model, opt, x, y, loss_fn):
    opt.zero_grad()
    loss_fn(model, x, y).backward()
    opt.step()


def _hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) for m in model.modules())


def test_factor_weight_is_the_plain_mean_then_a_decay_per_step():
    assert [factor_weight(n, decay=0.95, every=1) for n in (1, 2, 20)] == pytest.approx([1.0, 0.5, 0.05])
    assert factor_weight(21, decay=0.95, every=1) == pytest.approx(0.05)
    assert factor_weight(3, decay=0.95, every=10) == pytest.approx(1 - 0.95 ** 10)  # rho^k per update of k steps
    with pytest.raises(ValueError):
        factor_weight(0, decay=0.95, every=1)


@pytest.mark.parametrize("case", ["mlp", "transformer"])
def test_running_factors_equal_the_plain_mean_of_the_batch_factors(case_builder, reference_factors, case):
    """While n <= 1/(1 - rho) the running factors are the plain mean of every batch factor so far."""
    model, batch, loss_fn = case_builder(case)
    opt = KFAC(model, lr=0.05, factor_decay=0.95, loss_reduction="batch", fisher="empirical", factor_every=1)
    refs = []
    for step in range(5):
        x, y = batch(step)
        opt.capture.enabled = False  # the reference pass must not be collected by the optimizer
        refs.append(reference_factors(model, x, y, weight_sharing="expand"))
        opt.capture.enabled = True
        _step(model, opt, x, y, loss_fn)
    for layer in opt.layers:
        for i, key in enumerate(("factor_a", "factor_g")):
            expected = sum(r[layer.name][i] for r in refs) / len(refs)
            err = (opt.state[layer.module.weight][key] - expected).norm() / expected.norm().clamp_min(ATOL / RTOL)
            assert err < RTOL, f"{layer.name} {key}: relative error {err:.3g}"


class _TokenModel(nn.Module):
    """A per-token MLP over a (B, T, d) sequence: logits (B, T, classes)."""

    def __init__(self, d: int = 6, hidden: int = 12, n_classes: int = 5):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, n_classes)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def _mean_g(fisher: str, model: nn.Module, n_batches: int = 40) -> dict[str, torch.Tensor]:
    """Average G per layer over batches whose labels are sampled from the model (so that the
    empirical Fisher equals the true Fisher in expectation); loss: mean over B*T tokens."""
    gen = torch.Generator().manual_seed(7)
    twin = copy.deepcopy(model)
    opt = KFAC(twin, lr=1e-12, factor_decay=0.0, fisher=fisher, seed=5, momentum=0.0, factor_every=1)  # every batch
    total: dict[str, torch.Tensor] = {}
    for _ in range(n_batches):
        x = torch.randn(64, 8, 6, generator=gen, dtype=torch.float64)  # (B, T, d): T > 1
        with torch.no_grad():
            probs = twin(x).softmax(-1).reshape(-1, 5)
        y = torch.multinomial(probs, 1, generator=gen).reshape(64, 8)
        opt.zero_grad()
        logits = twin(x)
        F.cross_entropy(logits.reshape(-1, 5), y.reshape(-1)).backward()
        opt.step()
        for layer in opt.layers:
            g = opt.state[layer.module.weight]["factor_g"]
            total[layer.name] = total.get(layer.name, 0) + g / n_batches
    return total


def test_mc_and_empirical_g_agree_in_expectation_on_a_sequence_model():
    torch.manual_seed(0)
    model = _TokenModel().double()
    mc, emp = _mean_g("mc", model), _mean_g("empirical", model)
    for name in mc:
        gap = float((mc[name] - emp[name]).norm() / emp[name].norm())
        ratio = float(mc[name].trace() / emp[name].trace())
        assert gap < MC_AGREEMENT, f"{name}: relative gap {gap:.3g}, trace ratio {ratio:.3g}"


def test_remove_hooks_and_no_leak_from_a_second_optimizer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    assert _hooks(model) == 0
    first = KFAC(model, lr=0.1)
    assert _hooks(model) == 3  # two layers and the model output
    second = KFAC(model, lr=0.1)  # takes the hooks over: the first no longer captures
    assert _hooks(model) == 3
    model(torch.randn(2, 3, dtype=torch.float64)).sum().backward()
    assert all(not m.inputs for m in first.layers) and all(m.inputs for m in second.layers)
    second.remove_hooks()
    assert _hooks(model) == 0
    third = KFAC(model, lr=0.1)
    del third
    gc.collect()
    assert _hooks(model) == 0  # a deleted optimizer leaves no hook behind
    del first


def test_lr_zero_in_one_group_freezes_that_group_only(case_builder):
    model, batch, loss_fn = case_builder("mlp")
    frozen = list(model[2].parameters())
    others = [p for p in model.parameters() if all(p is not q for q in frozen)]
    opt = KFAC(model, lr=0.05, params=[{"params": frozen, "lr": 0.0}, {"params": others}], weight_decay=1e-2)
    before = {id(p): p.detach().clone() for p in model.parameters()}
    for step in range(3):
        _step(model, opt, *batch(step), loss_fn)
    assert all(torch.equal(p, before[id(p)]) for p in frozen)
    assert all(not torch.equal(p, before[id(p)]) for p in others)


def test_per_group_damping_is_honoured():
    """A huge damping in one group turns its update into SGD with lr / damping; the other group keeps K-FAC."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    huge = 1e8
    opt = KFAC(model, lr=0.1, momentum=0.0, params=[{"params": list(model[0].parameters()), "damping": huge},
                                                    {"params": list(model[2].parameters())}])
    x, y = torch.randn(8, 3, dtype=torch.float64), torch.randint(0, 2, (8,))
    F.cross_entropy(model(x), y).backward()
    before = [(p.detach().clone(), p.grad.clone()) for p in model.parameters()]
    opt.step()
    for p, (p0, g) in zip(model[0].parameters(), before[:2]):
        torch.testing.assert_close(p, p0 - 0.1 * g / huge, rtol=1e-6, atol=1e-16)
    p, (p0, g) = model[2].weight, before[2]
    assert (p - (p0 - 0.1 * g)).abs().max() > 1e-3  # preconditioned: not a plain SGD step


def test_rest_update_adamw_matches_torch_adamw():
    """Parameters outside K-FAC's scope get exactly torch.optim.AdamW's update."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2)).double()
    twin = copy.deepcopy(model)
    opt = KFAC(model, lr=0.1, rest_update="adamw", rest_lr=0.01, weight_decay=0.02, scope="all")
    reference = torch.optim.AdamW(twin[1].parameters(), lr=0.01, weight_decay=0.02)
    for step in range(3):
        x, y = torch.randn(8, 3, dtype=torch.float64), torch.randint(0, 2, (8,))
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        for p, q in zip(model[1].parameters(), twin[1].parameters()):
            q.grad = p.grad.clone()
        opt.step()
        reference.step()
    for p, q in zip(model[1].parameters(), twin[1].parameters()):
        torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-14)


def test_damping_recovers_after_an_injected_failure():
    """A failed solve skips the step and raises the damping x10; without a closure the damping decays
    back (x0.95 per step, applied every adapt_every steps) to its initial value, never below it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    opt = KFAC(model, lr=0.05, inverse="eigen", inverse_every=1, damping=1e-2, adapt_every=1, factor_every=1)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(torch.randn(8, 3, dtype=torch.float64)), torch.randint(0, 2, (8,))).backward()
        opt.step()
        return opt.last_stats["damping"]

    assert step() == pytest.approx(1e-2)
    opt.state[model[0].weight]["factor_a"][0, 0] = float("nan")  # the injected failure
    opt.capture.enabled = False
    before = [p.detach().clone() for p in model.parameters()]
    assert step() == pytest.approx(1e-1) and not opt.last_stats["preconditioned"]
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))  # the step was skipped
    assert opt.factor_updates == 0  # the next batch replaces the factors
    history = [step() for _ in range(60)]
    assert history[0] == pytest.approx(1e-1 * 0.95) and history == sorted(history, reverse=True)
    assert history[-1] == pytest.approx(1e-2) and opt.last_stats["preconditioned"]


def test_kl_clip_binding_fraction_is_counted(case_builder):
    model, batch, loss_fn = case_builder("mlp")
    twin = copy.deepcopy(model)
    tight = KFAC(model, lr=0.05, kl_clip=1e-12)
    off = KFAC(twin, lr=0.05, kl_clip=None)
    for step in range(4):
        _step(model, tight, *batch(step), loss_fn)
        _step(twin, off, *batch(step), loss_fn)
    assert tight.last_stats["kl_clip_binding_fraction"] == 1.0 and tight.last_stats["nu"] < 1
    assert off.last_stats["kl_clip_binding_fraction"] == 0.0 and off.last_stats["nu"] == 1.0


@pytest.mark.parametrize("inverse", ["eigen", "cg"])
def test_host_syncs_per_step(case_builder, inverse, monkeypatch):
    """At most 2 host reads per step after the warm-up, counted with torch.profiler over a whole
    inverse period (every aten::item runs one aten::_local_scalar_dense: the read itself is counted),
    on the path of a device whose host reads are not free (the CPU's shortcuts switched off)."""
    monkeypatch.setattr(_kfac_math, "HOST_READ_FREE", ())
    model, batch, loss_fn = case_builder("transformer", dtype=torch.float32)
    opt = KFAC(model, lr=0.05, inverse=inverse, per_head=True, inverse_every=10, damping=0.3)
    warm_up, n_steps = 20, 10  # the factors are a plain mean for 20 steps; then one eigh refresh per 10 steps
    for step in range(warm_up):
        _step(model, opt, *batch(step), loss_fn)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for step in range(warm_up, warm_up + n_steps):
            x, y = batch(step)
            opt.zero_grad()
            loss_fn(model, x, y).backward()
            with torch.profiler.record_function("kfac_step"):
                opt.step()
    events = prof.events()
    windows = [(e.time_range.start, e.time_range.end) for e in events if e.name == "kfac_step"]
    syncs = sum(1 for e in events if e.name == "aten::_local_scalar_dense"
                and any(lo <= e.time_range.start <= hi for lo, hi in windows))
    assert len(windows) == n_steps
    assert syncs / n_steps <= MAX_SYNCS_PER_STEP, f"{syncs} host syncs in {n_steps} steps"


@pytest.mark.parametrize("inverse", ["eigen", "cg"])
def test_free_host_reads_change_no_result(case_builder, inverse, monkeypatch):
    """The CPU's shortcuts (``_kfac_math.HOST_READ_FREE``: CG stopped once converged, no masking of a good
    step) give bit-identical parameters, damping and CG counts to the sync-free path, over factor updates
    between refreshes (drifted CG steps), damping adaptations and a failed step."""
    runs = []
    for free in (("cpu",), ()):
        monkeypatch.setattr(_kfac_math, "HOST_READ_FREE", free)
        model, batch, loss_fn = case_builder("transformer", dtype=torch.float32)
        opt = KFAC(model, lr=0.05, inverse=inverse, per_head=True, factor_every=2, inverse_every=4, damping=0.01,
                   adapt_every=3, cg_max_iter=20)
        for step in range(20):
            x, y = batch(step)
            if step == 16:
                x = x.clone()
                x[0, 0, 0] = float("nan")  # a failed step: skipped on the device, handled at the next check

            def closure():
                loss = loss_fn(model, x, y)
                if torch.is_grad_enabled():
                    opt.zero_grad()
                    loss.backward()
                return loss
            opt.step(closure)
        stats = opt.last_stats
        runs.append(([p.detach().clone() for p in model.parameters()], stats))
    (params_free, stats_free), (params_synced, stats_synced) = runs
    assert all(torch.equal(a, b) for a, b in zip(params_free, params_synced))
    assert stats_free["failures_total"] == stats_synced["failures_total"] >= 1
    assert inverse == "eigen" or stats_free["cg_iterations_total"] > 0  # some steps iterated
    for key in ("damping", "cg_iterations_total", "cg_capped_total", "kl_clip_binding_steps_total"):
        assert stats_free.get(key) == stats_synced.get(key), key


def test_kl_clip_is_read_per_group():
    """Two groups, one bounded and one not: the bounded group's step is scaled by its own nu, the other's is not."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    x, y = torch.randn(8, 3, dtype=torch.float64), torch.randint(0, 2, (8,))
    steps = {}
    for clips in ((None, None), (1e-12, None)):
        twin = copy.deepcopy(model)
        groups = [{"params": list(twin[0].parameters()), "kl_clip": clips[0]},
                  {"params": list(twin[2].parameters()), "kl_clip": clips[1]}]
        opt = KFAC(twin, lr=0.1, momentum=0.0, params=groups)
        F.cross_entropy(twin(x), y).backward()
        before = [p.detach().clone() for p in twin.parameters()]
        opt.step()
        steps[clips] = [(p - q).detach() for p, q in zip(twin.parameters(), before)]
    free, bounded = steps[(None, None)], steps[(1e-12, None)]
    for d_free, d_bound in zip(free[:2], bounded[:2]):  # the bounded group: a tiny multiple of the free step
        ratio = d_bound.norm() / d_free.norm()
        assert 0 < ratio < 1e-3
        torch.testing.assert_close(d_bound, ratio * d_free)
    for d_free, d_bound in zip(free[2:], bounded[2:]):  # the unbounded group: its step unchanged
        torch.testing.assert_close(d_bound, d_free)


@pytest.mark.parametrize("declared, loss", [
    ("batch", lambda out, y: F.cross_entropy(out.reshape(-1, 4), y.reshape(-1))),  # a mean over B T rows
    ("mean", lambda out, y: F.cross_entropy(out.reshape(-1, 4), y.reshape(-1), reduction="sum") / out.shape[0]),
])
def test_a_wrong_loss_reduction_raises(declared, loss):
    """The sampled Fisher reads the loss as a cross-entropy at the declared reduction; a loss that is one at
    another reduction raises (it used to fall silently to Gaussian sampling) and the right one trains."""
    torch.manual_seed(0)
    x, y = torch.randn(8, 3, 5, dtype=torch.float64), torch.randint(0, 4, (8, 3))
    for reduction in (declared, {"batch": "mean", "mean": "batch"}[declared]):
        model = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 4)).double()
        opt = KFAC(model, lr=0.05, loss_reduction=reduction)
        if reduction == declared:
            with pytest.raises(ValueError, match="loss_reduction"):
                loss(model(x), y).backward()
        else:
            loss(model(x), y).backward()
            opt.step()
            assert opt.last_stats["preconditioned"]
