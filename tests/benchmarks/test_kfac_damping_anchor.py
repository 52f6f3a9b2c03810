"""benchmarks/kfac_damping.py's variants and steps to target; benchmarks/kfac_anchor.py's split of the parameters
between kfac-pytorch's SGD and AdamW and its grid-edge flag (known answers; kfac-pytorch itself is not needed)."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import kfac_anchor
    import kfac_damping

    return kfac_damping, kfac_anchor


@pytest.mark.parametrize("variant, expected", [
    ("absolute", ({}, ())),
    ("absolute+lm-preconditioned", ({}, ("optimizers.kfac-iterative.lm_scope=preconditioned",))),
    ("relative:0.3", ({"damping": 0.3}, ("optimizers.kfac-iterative.relative_damping=true",))),
    ("relative:0.5/0.00001", ({"damping": 0.5}, ("optimizers.kfac-iterative.relative_damping=true",
                                                  "optimizers.kfac-iterative.relative_damping_floor=0.00001"))),
    ("relative:1+lm-preconditioned", ({"damping": 1.0}, ("optimizers.kfac-iterative.relative_damping=true",
                                                          "optimizers.kfac-iterative.lm_scope=preconditioned"))),
    ("relative:0.5+lm-preconditioned+trust:0.1", ({"damping": 0.5}, (
        "optimizers.kfac-iterative.relative_damping=true", "optimizers.kfac-iterative.lm_scope=preconditioned",
        "optimizers.kfac-iterative.layer_step_bound=0.1"))),
    ("absolute+trust:0.05", ({}, ("optimizers.kfac-iterative.layer_step_bound=0.05",))),
])
def test_variants_become_settings_and_overrides(bench, variant, expected):
    assert bench[0].variant_settings(variant) == expected


@pytest.mark.parametrize("variant", ["relative", "relative:0", "relative:x", "relativ:1", "relative:1/-1",
                                     "relative:1/x", "absolute+lm", "eigen", "absolute+trust", "absolute+trust:0",
                                     "absolute+trust:x"])
def test_a_bad_variant_is_a_clear_error(bench, variant):
    with pytest.raises(ValueError, match="variant"):
        bench[0].variant_settings(variant)


def test_steps_to_target_reads_the_running_median_of_the_evaluations(bench):
    nan = math.nan
    # evaluations at 5, 10, 15, 20, 25 (train-only rows between them): the lone 0.95 at step 10 is not a crossing
    metrics = pd.DataFrame({"step": [1, 5, 7, 10, 15, 20, 25],
                            "val_accuracy": [nan, 0.5, nan, 0.95, 0.6, 0.92, 0.93]})
    # running medians of the evaluations: 0.5, 0.725, 0.6, 0.92, 0.92
    assert bench[0].steps_to_target(metrics, 0.9) == 20
    assert bench[0].steps_to_target(metrics, 0.99) == math.inf


def test_the_per_variant_summary_counts_seeds_and_takes_the_median(bench):
    def run(variant, seed, start, low, high, steps):
        return {"model": "m", "variant": variant, "seed": seed, "damping_start": start, "damping_min": low,
                "damping_max": high, "within_10x": high <= 10 * start and low >= start / 10, "hit_floor": False,
                "hit_ceiling": False, "qk_ratio_mean_at_50": 2.0, "qk_ratio_min_at_50": 0.5, "steps_to_target": steps}
    table = pd.DataFrame([run("a", 0, 1.0, 1.0, 20.0, 50.0), run("a", 1, 1.0, 0.5, 2.0, 70.0),
                          run("a", 2, 1.0, 1.0, 1.0, math.inf), run("b", 0, 2.0, 2.0, 2.0, math.inf)])
    out = bench[0].per_variant(table).set_index("variant")
    assert out.loc["a", "seeds"] == 3 and out.loc["a", "reached"] == 2
    assert out.loc["a", "median_steps_to_target"] == 70.0  # median of 50, 70, inf
    assert out.loc["a", "damping_range_max"] == 20.0 and out.loc["a", "within_10x"] == 2
    assert out.loc["b", "median_steps_to_target"] == math.inf and out.loc["b", "reached"] == 0


def test_kfac_pytorchs_layers_get_sgd_and_the_rest_adamw(bench):
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    model.register_parameter("pos", nn.Parameter(model[0].weight.new_zeros(5)))
    model[2].bias.requires_grad_(False)
    registered, rest = bench[1].split_registered(model, (nn.Linear,))
    assert [id(p) for p in registered] == [id(model[0].weight), id(model[0].bias), id(model[2].weight)]
    assert [id(p) for p in rest] == [id(model.pos), id(model[1].weight), id(model[1].bias)]


def test_grid_edge_names_the_knobs_not_bracketed(bench):
    grid = [{"lr": lr, "damping": d, "kl_clip": 1e-3} for lr in (0.03, 0.1) for d in (1e-4, 1e-3, 1e-2)]
    assert bench[1].at_edge({"lr": 0.1, "damping": 1e-3, "kl_clip": 1e-3}, grid) == ["lr"]
    assert bench[1].at_edge({"lr": 0.03, "damping": 1e-2, "kl_clip": 1e-3}, grid) == ["lr", "damping"]
