"""Claim 3b on the sphere (issue 30, item 2): replica contrasts of tokens on the unit sphere against the null of
R spherical Brownian motions from a common start.

The data here are built independently of the null's code: R replicas of each token start at one point of the unit
sphere inside LayerNorm's hyperplane (S^15 in R^17) and take small tangent Gaussian steps renormalised to the sphere
(spherical Brownian motion, 20 substeps per training step); their Helmert contrasts are written as the pipeline's
replica files are (probes/replicas.py). Saturating spherical Brownian motion (the contrasts' mean squared norm
approaching 1) must be "brownian" on the sphere's null at total decays 0.3, 0.8 and 1.5, while the Euclidean
reading of the same file calls the saturation sub-diffusion; a spherical walk pulled back to its start (OU on the
sphere) and a persistent one (tangent steps of fractional Gaussian noise, H = 0.75) must not be "brownian".
"""
import json

import numpy as np
import pytest
from scipy.linalg import helmert

from brownformer.config import DEFAULT_STATS
from brownformer.io import sidecar_path
from brownformer.stats.sphere.replica_null import contrast_decay, simulate_null, sphere_contrasts_of
from brownformer.stats.diffusion.simulate import fgn_increments
from brownformer.stats.diffusion.window_verdict import trajectory_result

R, M, D = 6, 24, 17  # replicas, tokens, ambient dimension (the walks live on S^15 inside sum(z) = 0)
STEPS = [21, 31, 46, 56, 67, 77, 87, 98, 112, 125, 144, 164, 186, 211, 240, 273, 300, 325, 350, 375, 400]
SUBSTEPS = 20
OU_PULL, HURST = 0.02, 0.75  # per step: pull towards the common start; Hurst exponent of the persistent steps


def _plane(x):
    return x - x.mean(-1, keepdims=True)


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _contrast_file(process: str, decay: float, rng) -> np.ndarray:
    """Helmert contrasts (T, (R - 1) M, D) of R walks per token from a common start at step 0 (clock = steps)."""
    rate = decay / ((D - 2) * STEPS[-1])  # (k - 1) D_rate t_end = decay, k = D - 1
    u = np.repeat(_unit(_plane(rng.standard_normal((M, D))))[None], R, 0)  # (R, M, D)
    anchor, out, step = u.copy(), [], 0
    fgn = (fgn_increments(STEPS[-1], HURST, u.size, rng).reshape(STEPS[-1], *u.shape) if process == "persistent"
           else None)
    for capture in STEPS:
        for s in range(step, capture):
            if fgn is not None:  # one tangent step per training step, persistent, the same total decay
                u = _unit(u + _plane(fgn[s]) * np.sqrt(2 * rate) * STEPS[-1] ** (0.5 - HURST))
                continue
            for _ in range(SUBSTEPS):
                xi = _plane(rng.standard_normal(u.shape)) * np.sqrt(2 * rate / SUBSTEPS)
                if process == "ou":
                    xi = xi + OU_PULL / SUBSTEPS * (anchor - u)
                u = _unit(u + xi)
        step = capture
        out.append(u.copy())
    C = np.einsum("cr,rtmd->tcmd", helmert(R), np.stack(out, 1))
    return C.reshape(len(STEPS), (R - 1) * M, D).astype(np.float32)


def _meta(sphere: bool = True) -> dict:
    meta = {"kind": "euclidean", "time": "step", "times": STEPS, "clocks": {"step": STEPS},
            "groups": np.repeat(np.arange(R - 1), M).tolist(), "drift": "none", "unit": "replica", "n_replicas": R,
            "sum_zero": True}
    return {**meta, "contrast_of": "sphere"} if sphere else meta


@pytest.mark.parametrize("decay", [0.3, 0.8, 1.5])
def test_saturating_spherical_brownian_replicas_are_brownian_on_the_sphere(decay):
    X = _contrast_file("brownian", decay, np.random.default_rng(1))
    spread = float(np.mean(np.sum(X[-1].astype(float) ** 2, -1)))
    assert spread == pytest.approx(1 - np.exp(-2 * decay), abs=0.06)  # saturating: 0.45, 0.80, 0.95
    out = trajectory_result(X, _meta(), stats=DEFAULT_STATS)
    assert out.verdict == "brownian", out.reason
    assert out.local_slopes.effect.estimate == pytest.approx(1.0, abs=0.06)
    spec = out.local_slopes.spec
    assert spec.replicas == R and spec.replica_hyperplane and spec.replica_start == pytest.approx(21 / 400)
    shape = out.calibration_shape  # the shape records the sphere the contrasted walks live on
    assert shape.geometry == "sphere" and shape.hyperplane
    assert shape.decay == pytest.approx(decay, rel=0.15)


def test_the_euclidean_null_reads_the_same_saturation_as_subdiffusion():
    """Positive control of the comparison: without the sphere's null the saturating file is "not brownian"."""
    out = trajectory_result(_contrast_file("brownian", 1.5, np.random.default_rng(1)), _meta(sphere=False),
                             stats=DEFAULT_STATS)
    assert out.verdict == "not brownian"
    assert out.local_slopes.effect.estimate < 0.85  # 0.71 when measured


@pytest.mark.parametrize("process", ["ou", "persistent"])
def test_mean_reverting_and_persistent_walks_on_the_sphere_are_not_brownian(process):
    out = trajectory_result(_contrast_file(process, 0.8, np.random.default_rng(2)), _meta(), stats=DEFAULT_STATS)
    assert out.verdict == "not brownian", out.reason


def test_the_null_contrasts_saturate_as_spherical_brownian_motion_does():
    """E|C|^2 = 1 - exp(-2 decay s) at the clock share s from the common start, in the hyperplane; the decay read
    back from the last capture (replica_null.contrast_decay) is the one simulated."""
    labels = np.repeat(np.arange(R - 1), 40)
    t = np.linspace(0.25, 1.0, 8)
    X = simulate_null("brownian", times=t, labels=labels, d=D, kind="euclidean", replicates=6, rng=0, rho=0.2,
                       hyperplane=True, decay=1.5, replicas=R, replica_start=0.25)
    ms = np.mean(np.sum(X.astype(float) ** 2, -1), axis=(0, 2))
    np.testing.assert_allclose(ms, 1 - np.exp(-2 * 1.5 * t), atol=0.03)
    assert np.max(np.abs(X.sum(-1))) < 1e-4
    assert contrast_decay(X[0]) == pytest.approx(1.5, rel=0.15)


def test_sidecar_marks_sphere_contrasts_and_bad_ones_are_refused():
    X = _contrast_file("brownian", 0.3, np.random.default_rng(3))
    assert sphere_contrasts_of(_meta(), X) == (R, True)
    assert sphere_contrasts_of(_meta(sphere=False), X) == (0, False)
    with pytest.raises(ValueError, match="n_replicas"):
        sphere_contrasts_of({**_meta(), "n_replicas": None}, X)


def test_cli_path_kind_sphere_on_saturating_spherical_brownian_motion(tmp_path):
    """`brownformer stats trajectory FILE --kind sphere` on one saturating spherical Brownian motion (total decay 1.5,
    built by the test's own stepper, 8 groups of 16 walkers on S^15) says "brownian"."""
    from brownformer.cli import main
    rng = np.random.default_rng(4)
    T, N, d = 25, 128, 16
    rate = 1.5 / ((d - 1) * (T - 1))
    g = np.repeat(np.arange(8), 16)
    u, out = _unit(rng.standard_normal((N, d))), []
    for _ in range(T):
        out.append(u.copy())
        for _ in range(SUBSTEPS):
            xi = np.sqrt(0.8) * rng.standard_normal((N, d)) + np.sqrt(0.2) * rng.standard_normal((8, d))[g]
            u = _unit(u + xi * np.sqrt(2 * rate / SUBSTEPS))
    path = tmp_path / "sbm.npy"
    np.save(path, np.stack(out).astype(np.float32))
    sidecar_path(path).write_text(json.dumps({"kind": "sphere", "times": list(range(T)), "groups": g.tolist()}))
    main(["stats", "trajectory", str(path), "--kind", "sphere", "--out", str(tmp_path / "out.json")])
    res = json.loads((tmp_path / "out.json").read_text())
    assert res["verdict"] == "brownian", res["reason"]
    assert res["calibration_shape"]["kind"] == "sphere" and res["calibration_shape"]["decay"] == pytest.approx(1.5, rel=0.2)
