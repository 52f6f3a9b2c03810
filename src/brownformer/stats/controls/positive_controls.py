"""Can claim 3's rules say yes? Processes where a claim holds by construction, and where it fails by construction.

Each control is built here (numpy, seeded) and decided by the rule every trajectory file gets
(window_verdict.trajectory_result: the battery, the window fixed before the data, the momentum null):

- 3a (depth): residual blocks whose updates are independent Gaussian noise, x_{l+1} = x_l + eps_l, tokens of one
  input sharing part of the noise (positive); blocks that pull the state back, x_{l+1} = phi x_l + eps_l (OU), and
  persistent updates (fBm H = 0.75) (negative);
- 3b (tokens over training) and 3c (weights over training): SGD with heavy-ball momentum (torch.optim.SGD's rule,
  v <- beta v + g, W <- W - lr v) on a pure-noise loss L(W) = <G_t, W>, G_t fresh Gaussian noise each step, so
  the gradient has no signal; 3c reads the weight rows, 3b the token features W x of fixed probe inputs, both seen
  at the pipeline's capture steps with the sidecar's "momentum" (positive); the same optimizer on a quadratic
  loss with noise, a mean-reverting OU (negative), and on persistent noise, fBm H = 0.75 (negative).

`claim3_controls()` returns one ControlResult per control: its verdict ("supported" for a "brownian" file verdict,
"not supported" for "not brownian", else "inconclusive") against the expected one. The rule is applied uncalibrated
(no calibration table: the claims add size and power gates on top), so a control that says yes shows the rule can
certify, not the gated claim. tests/stats/test_positive_controls_claim3.py holds every control to its expected
verdict; the report appendix ("can the rules say yes?") can print the table.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from brownformer.config import DEFAULT_STATS

from brownformer.stats.diffusion.simulate import fgn_increments
from brownformer.stats.diffusion.trajectory_inputs import TrajectorySidecar
from brownformer.stats.diffusion.window_verdict import trajectory_result

__all__ = ["ControlResult", "claim3_controls", "CONTROLS"]

#: the pipeline's capture steps of a 400-step run (config/config.yaml probes: 48 log points, 16 linear points)
CAPTURE_STEPS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 21, 24, 25, 28, 31, 35, 40, 46, 50, 52, 59, 67,
                 75, 76, 87, 98, 100, 112, 125, 127, 144, 150, 164, 175, 186, 200, 211, 225, 240, 250, 273, 275, 300,
                 310, 325, 350, 352, 375, 400)  # probes.schedule.capture_schedule (stats cannot import probes; a test
#                                                 checks they agree)
MOMENTUM, LR = 0.9, 0.01
#: walkers: 16 probe inputs (groups) of 16 tokens; hidden size and depth of the 3a control
N_INPUTS, N_TOKENS, DIM, LAYERS = 16, 16, 8, 16
RHO = 0.2  # share of one input's noise its tokens have in common

VERDICT_OF = {"brownian": "supported", "not brownian": "not supported", "inconclusive": "inconclusive"}


@dataclass(frozen=True)
class ControlResult:
    """One control: the claim, what was built, whether the claim holds in it by construction, the expected and the
    obtained claim verdict, and the rule's reason and window exponent."""

    claim: str
    name: str
    role: str  # "positive" (the claim holds by construction) | "negative" (it fails by construction)
    description: str
    expected: str
    verdict: str
    file_verdict: str
    reason: str
    window_exponent: float | None

    @property
    def passed(self) -> bool:
        return self.verdict == self.expected

    def to_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def _grouped_noise(rng, shape_steps: int, *, hurst: float | None = None) -> np.ndarray:
    """(steps, N, DIM) noise, tokens of one input correlated RHO; Gaussian white, or fGn of Hurst `hurst`."""
    N = N_INPUTS * N_TOKENS
    groups = np.repeat(np.arange(N_INPUTS), N_TOKENS)
    if hurst is None:
        own, shared = rng.standard_normal((shape_steps, N, DIM)), rng.standard_normal((shape_steps, N_INPUTS, DIM))
    else:
        own = fgn_increments(shape_steps, hurst, N * DIM, rng).reshape(shape_steps, N, DIM)
        shared = fgn_increments(shape_steps, hurst, N_INPUTS * DIM, rng).reshape(shape_steps, N_INPUTS, DIM)
    return np.sqrt(1 - RHO) * own + np.sqrt(RHO) * shared[:, groups]


def _depth(process: str, rng) -> np.ndarray:
    """Residual stream (LAYERS + 1, N, DIM) of blocks whose update is the process's noise."""
    eps = _grouped_noise(rng, LAYERS, hurst=0.75 if process == "fbm_0.75" else None)
    x = [rng.standard_normal(eps.shape[1:])]
    for e in eps:
        x.append((0.5 if process == "ou" else 1.0) * x[-1] + e)
    return np.stack(x)


def _sgd_momentum(process: str, rng) -> np.ndarray:
    """Weights (steps + 1, N, DIM) of SGD with heavy-ball momentum (torch.optim.SGD: v <- beta v + g, W <- W - lr v)
    on a pure-noise loss <G_t, W> (gradient G_t), a noisy quadratic (gradient k W + G_t: OU), or persistent noise."""
    steps = CAPTURE_STEPS[-1]
    G = _grouped_noise(rng, steps, hurst=0.75 if process == "fbm_0.75" else None)
    W = [np.zeros(G.shape[1:])]
    v = np.zeros(G.shape[1:])
    for g in G:
        grad = g + (0.5 * W[-1] if process == "ou" else 0.0)  # quadratic 0.25 |W|^2: pulls W back (OU)
        v = MOMENTUM * v + grad
        W.append(W[-1] - LR * v)
    return np.stack(W)[list(CAPTURE_STEPS)]


def _training_meta() -> TrajectorySidecar:
    steps = list(CAPTURE_STEPS)
    return TrajectorySidecar(kind="euclidean", time="step", times=steps, clocks={"step": steps},
                             n_inputs=N_INPUTS, n_tokens=N_TOKENS, momentum=MOMENTUM)


def _tokens(W: np.ndarray, rng) -> np.ndarray:
    """3b: token features h_n = Q_n^T w_n of walker n's weights seen through its fixed probe input, here a random
    orthogonal map Q_n (a linear layer's output on fixed inputs moves as its weights do)."""
    Q = np.linalg.qr(rng.standard_normal((W.shape[1], DIM, DIM)))[0]  # (N, DIM, DIM) orthogonal
    return np.einsum("tnd,nde->tne", W, Q)


#: (claim, name, role, what was built, the claim's verdict by construction)
CONTROLS = (
    ("3a", "residual_gaussian", "positive", "residual blocks adding independent Gaussian noise", "supported"),
    ("3a", "residual_ou", "negative", "residual blocks pulling the state back (x <- 0.5 x + noise)", "not supported"),
    ("3a", "residual_fbm_0.75", "negative", "residual blocks adding persistent noise (fBm H = 0.75)", "not supported"),
    ("3b", "sgd_momentum_noise", "positive", "token features under SGD + momentum 0.9 on a pure-noise loss",
     "supported"),
    ("3b", "sgd_momentum_ou", "negative", "token features under SGD + momentum on a noisy quadratic (OU)",
     "not supported"),
    ("3c", "sgd_momentum_noise", "positive", "weights under SGD + momentum 0.9 on a pure-noise loss", "supported"),
    ("3c", "sgd_momentum_ou", "negative", "weights under SGD + momentum on a noisy quadratic (OU)", "not supported"),
    ("3c", "sgd_momentum_fbm_0.75", "negative", "weights under SGD + momentum on persistent noise (fBm H = 0.75)",
     "not supported"),
)


def _build(claim: str, name: str, rng) -> tuple[np.ndarray, TrajectorySidecar]:
    process = name.split("_", 2)[-1] if name.startswith("sgd") else name.split("_", 1)[1]
    process = {"noise": "noise", "gaussian": "noise"}.get(process, process)
    if claim == "3a":
        X = _depth(process, rng)
        return X, TrajectorySidecar(kind="euclidean", time="layer", times=list(range(X.shape[0])), n_inputs=N_INPUTS,
                                    n_tokens=N_TOKENS)
    W = _sgd_momentum(process, rng)
    return (_tokens(W, rng) if claim == "3b" else W), _training_meta()


def claim3_controls(*, stats=DEFAULT_STATS, seed: int = DEFAULT_STATS.seed,
                    names: list[str] | None = None) -> list[ControlResult]:
    """Build and decide every control of CONTROLS (or those whose "claim/name" is in `names`).

    Args:
        stats: StatsConfig whose rule decides (margins, alpha, window, resamples).
        seed: the controls' seed (each control draws from its own stream of it; default the schema's stats.seed).
    """
    out = []
    for i, (claim, name, role, what, expected) in enumerate(CONTROLS):
        if names is not None and f"{claim}/{name}" not in names:
            continue
        X, meta = _build(claim, name, np.random.default_rng([seed, i]))
        res = trajectory_result(X, meta, stats=stats)  # the statistics record (statsfile.BatteryStats)
        expo = res.local_slopes.effect.estimate if res.local_slopes else None
        out.append(ControlResult(claim, name, role, what, expected, VERDICT_OF[res.verdict], res.verdict,
                                 res.reason, None if expo is None else float(expo)))
    return out
