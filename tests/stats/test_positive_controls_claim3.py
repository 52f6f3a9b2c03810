"""Claim 3's rules can say yes (issue 30, item 6): every positive control is "supported", every negative one not.

Positive: residual blocks adding independent Gaussian noise (3a); SGD with heavy-ball momentum on a pure-noise loss,
its token features (3b) and its weights (3c), with the sidecar's momentum. Negative: OU (mean reversion) and fBm
H = 0.75 (persistence), built the same way.
"""
import numpy as np
import pytest
import torch

from brownformer.config import ProbeConfig
from brownformer.probes.schedule import capture_schedule
from brownformer.stats.controls import positive_controls as pc


@pytest.fixture(scope="module")
def controls():
    return {(r.claim, r.name): r for r in pc.claim3_controls()}


@pytest.mark.parametrize("claim,name,role,expected", [(c, n, r, e) for c, n, r, _, e in pc.CONTROLS],
                         ids=[f"{c}-{n}" for c, n, *_ in pc.CONTROLS])
def test_each_control_gets_the_verdict_its_construction_implies(controls, claim, name, role, expected):
    r = controls[(claim, name)]
    assert r.verdict == expected and r.passed, (r.file_verdict, r.reason)
    assert (role == "positive") == (expected == "supported")
    assert r.to_dict()["passed"] is True


def test_every_claim_has_a_positive_and_a_negative_control():
    for claim in ("3a", "3b", "3c"):
        roles = {r for c, _, r, *_ in pc.CONTROLS if c == claim}
        assert roles == {"positive", "negative"}


def test_controls_are_seen_at_the_pipelines_capture_steps():
    assert list(pc.CAPTURE_STEPS) == capture_schedule(ProbeConfig(log_points=48, linear_points=16), 400)


def test_sgd_momentum_control_is_torchs_sgd_on_a_pure_noise_loss():
    """The 3b/3c control's weights equal torch.optim.SGD(momentum=0.9) minimising <G_t, W> on the same noise."""
    G = pc._grouped_noise(np.random.default_rng(3), pc.CAPTURE_STEPS[-1])
    W = torch.zeros(G.shape[1:], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([W], lr=pc.LR, momentum=pc.MOMENTUM)
    path = [W.detach().clone()]
    for g in torch.from_numpy(G):
        opt.zero_grad()
        (W * g).sum().backward()
        opt.step()
        path.append(W.detach().clone())
    ref = torch.stack(path).numpy()[list(pc.CAPTURE_STEPS)]
    np.testing.assert_allclose(pc._sgd_momentum("noise", np.random.default_rng(3)), ref, rtol=1e-10, atol=1e-12)
