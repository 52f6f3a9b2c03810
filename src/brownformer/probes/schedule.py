"""When to capture: log-spaced plus linear training steps, and which captures get extras.

Log spacing covers short time lags (the first few updates, where a diffusion is checked at its
smallest lags), linear spacing covers long ones evenly; their union is the capture schedule.
"""
from __future__ import annotations

import numpy as np

from brownformer.config import ProbeConfig

__all__ = ["capture_schedule", "noise_captures", "depth_subset"]


def capture_schedule(probes: ProbeConfig, steps: int) -> list[int]:
    """Sorted, unique capture steps in [0, steps].

    {0} U round(geomspace(1, steps, log_points)) U {0, linear_every, 2 linear_every, ...} U {steps}; with
    `linear_points` set, the linear part is round(linspace(0, steps, linear_points + 1)) instead.
    A capture at step s sees the model after s updates (train.py calls probes before update s).

    Raises:
        ValueError: steps < 0.
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    points = {0, steps}
    if probes.log_points > 0 and steps >= 1:
        points.update(int(s) for s in np.round(np.geomspace(1, steps, probes.log_points)))
    if probes.linear_points:
        # a fixed count: a 2500-step model gets as many linear captures as a 400-step one (statistics and their
        # calibration cost grow with the captures, while the evidence is in the time span they cover)
        points.update(int(s) for s in np.round(np.linspace(0, steps, probes.linear_points + 1)))
    else:
        points.update(range(0, steps + 1, probes.linear_every))
    return sorted(points)


def noise_captures(n_captures: int, noise_every: int) -> list[int]:
    """Capture indices k that also record gradient noise: every noise_every-th, from k = 0."""
    return list(range(0, n_captures, noise_every))


def depth_subset(n_captures: int, n_points: int = 8) -> list[int]:
    """Capture positions for per-capture files (depth, attention): first, last, evenly between.

    Bounds the file count: with the default 8, the first, the last and ~6 evenly spaced captures.
    """
    if n_captures <= 0:
        return []
    return sorted({int(i) for i in np.round(np.linspace(0, n_captures - 1, min(n_points, n_captures)))})
