"""Issue 30's "Done when" bullets checked on simulated data, one line per check with its numbers.

    PYTHONPATH=src python benchmarks/issue30_done_when.py [--skip-controls]

Uncalibrated rule verdicts (window_verdict.trajectory_result, the pipeline's per-file rule); the gated verdicts with
alternatives and fitted null are in tests/stats/test_momentum_null.py (test_gated_verdicts_at_the_momentum_shape).
About 2 CPU-minutes.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from brownformer.config import DEFAULT_MARGINS, DEFAULT_STATS, ProbeConfig
from brownformer.probes.schedule import capture_schedule
from brownformer.stats.core.bootstrap import ClusterBootstrap
from brownformer.stats.diffusion import edges
from brownformer.stats.diffusion.battery import kurtosis
from brownformer.stats.diffusion.simulate import fgn_increments, simulate_batch
from brownformer.stats.diffusion.window_verdict import trajectory_result
from brownformer.statsfile import BatteryStats
from brownformer.stats.sphere.replica_null import simulate_null

STEPS = capture_schedule(ProbeConfig(log_points=48, linear_points=16), 400)
G, PER, D, RHO, BETA = 8, 16, 8, 0.2, 0.9


def _line(check: str, out: BatteryStats, expected: str) -> None:
    e = out.local_slopes.effect if out.local_slopes else None
    ci = (e.confidence_interval if e else None) or [None, None]
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    mark = "-- " if expected == "any" else ("OK " if out.verdict == expected else "NO ")
    print(f"{mark} {check:58s} {out.verdict:13s} window exponent {fmt(e.estimate if e else None)} "
          f"[{fmt(ci[0])}, {fmt(ci[1])}]")


def _heavy_ball(name: str, rng) -> np.ndarray:
    n, N = STEPS[-1], G * PER
    groups = np.repeat(np.arange(G), PER)
    if name == "fbm_0.75":
        own = fgn_increments(n, 0.75, N * D, rng).reshape(n, N, D)
        sh = fgn_increments(n, 0.75, G * D, rng).reshape(n, G, D)
    else:
        own, sh = rng.standard_normal((n, N, D)), rng.standard_normal((n, G, D))
    e = np.sqrt(1 - RHO) * own + np.sqrt(RHO) * sh[:, groups]
    if name == "ou":  # AR(1) levels (phi 0.97), their increments through the momentum
        x, lv = np.zeros((N, D)), [np.zeros((N, D))]
        for step in e:
            x = 0.97 * x + step
            lv.append(x)
        e = np.diff(np.array(lv), axis=0)
    v, x, out = np.zeros((N, D)), np.zeros((N, D)), [np.zeros((N, D))]
    for step in e:
        v = BETA * v + step
        x = x + v
        out.append(x)
    return np.array(out)[STEPS].astype(np.float32)


def momentum_checks() -> None:
    meta = {"kind": "euclidean", "time": "step", "times": STEPS, "clocks": {"step": STEPS},
            "groups": np.repeat(np.arange(G), PER).tolist(), "momentum": BETA}
    for name, expected in (("heavy_ball", "brownian"), ("fbm_0.75", "not brownian"), ("ou", "not brownian")):
        _line(f"momentum 0.9, {name}, 8x16 walkers, capture steps <= 400",
              trajectory_result(_heavy_ball(name, np.random.default_rng(0)), meta, stats=DEFAULT_STATS), expected)


def sphere_checks() -> None:
    for decay in (0.3, 0.8, 1.5):
        X = simulate_batch("brownian", times=np.arange(60.0), labels=np.arange(256), d=16, kind="sphere",
                           replicates=1, rng=1, decay=decay)[0]
        _line(f"--kind sphere, spherical BM, total decay {decay}", trajectory_result(
            X, {"kind": "sphere", "times": list(range(60))}, stats=DEFAULT_STATS), "brownian")
    steps = [s for s in STEPS if s >= 21][::2]
    labels = np.repeat(np.arange(5), 48)
    for decay in (0.3, 0.8, 1.5):
        X = simulate_null("brownian", times=np.array(steps, float), labels=labels, d=17, kind="euclidean",
                          replicates=1, rng=2, rho=0.2, hyperplane=True, decay=decay, replicas=6,
                          replica_start=steps[0] / steps[-1])[0]
        meta = {"kind": "euclidean", "time": "step", "times": steps, "clocks": {"step": steps},
                "groups": labels.tolist(), "drift": "none", "n_replicas": 6, "sum_zero": True}
        spread = float(np.mean(np.sum(X[-1].astype(float) ** 2, -1)))
        _line(f"replica contrasts, sphere null, decay {decay} (spread {spread:.2f})",
              trajectory_result(X, {**meta, "contrast_of": "sphere"}, stats=DEFAULT_STATS), "brownian")
        _line(f"  same file, euclidean null (before issue 30)", trajectory_result(X, meta, stats=DEFAULT_STATS),
              "any")


def plain_bm_and_kurtosis() -> None:
    inc = fgn_increments(199, 0.5, 200, np.random.default_rng(100)).reshape(199, 200, 1)
    X = np.concatenate([np.zeros((1, 200, 1)), np.cumsum(inc, 0)])
    _line("plain BM (fBm H = 0.5), 200 walkers x 200 times", trajectory_result(
        X, {"kind": "euclidean", "times": list(range(200))}, stats=DEFAULT_STATS), "brownian")
    for side in (0, 1):
        target = DEFAULT_MARGINS["excess_kurtosis"][side]
        inc = edges.edge_increments("kurtosis_low" if side == 0 else "kurtosis_high", times=np.arange(200.0),
                                    labels=np.arange(200), d=1, replicates=40, rng=np.random.default_rng(1), rho=0.0,
                                    drift="none", margins=DEFAULT_MARGINS).astype(np.float64)
        inc -= inc.mean(axis=2, keepdims=True)
        est = kurtosis(inc, ClusterBootstrap(np.arange(200), n_resamples=5, rng=0), centred=True).estimate
        print(f"{'OK ' if abs(np.mean(est) - target) < 0.05 else 'NO '} kurtosis edge {target:+.1f} at 200x200: "
              f"mean estimate {np.mean(est):+.3f} (sd of the mean {np.std(est) / np.sqrt(est.size):.3f}, 40 files)")


def controls() -> None:
    from brownformer.stats.controls.positive_controls import claim3_controls
    from brownformer.stats.controls.positive_controls_claims12 import positive_controls_claims12
    for c in claim3_controls():
        print(f"{'OK ' if c.passed else 'NO '} control {c.claim} {c.name} ({c.role}): {c.verdict} "
              f"(expected {c.expected}; window exponent {c.window_exponent})")
    for c in positive_controls_claims12():
        ok = c.ok() if callable(c.ok) else c.ok
        print(f"{'OK ' if ok else 'NO '} control {c.claim} {c.name} ({c.kind}): {c.verdict} (expected {c.expected}"
              f"{'' if c.value is None else f'; value {c.value:.2f}'})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-controls", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    momentum_checks()
    sphere_checks()
    plain_bm_and_kurtosis()
    if not args.skip_controls:
        controls()
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
