"""Claims 1 and 2 in the report: one row per run and criterion, read from claims.json's records."""
import dataclasses
from types import SimpleNamespace

import numpy as np

from brownformer.config import StatsConfig
from brownformer.report.section_claims12 import criteria_table, markov_text, sphere_text
from brownformer.stats.claims import sphere_claim
from brownformer.stats.sphere.sphere_distance import tensor_sphere_summary
from brownformer.verdicts import ClaimsFile


def _ctx(claims: dict):
    return SimpleNamespace(results=SimpleNamespace(claims=ClaimsFile(claims=claims)), figures_of=lambda key: [],
                           ref=lambda stem: stem)


def _claim1():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8 * 6, 12))
    z = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
    files = []
    for seed in range(3):  # claim 1 decides over seeds (stats/core/pooling.py MIN_SEEDS)
        for tensor, arr in (("ln_raw", z), ("ln_affine", z * np.exp(rng.uniform(0, np.log(100), 12)))):
            s = tensor_sphere_summary(arr, tensor=tensor, z_raw=z, n_inputs=8, n_tokens=6, n_resamples=99)
            s = dataclasses.replace(s, ln="post", step=100)
            files.append({"run": f"vit-post__adamw__s{seed}", "capture": 1, "path": f"depth/{tensor}_c1.npy",
                          "sphere": s})
    return sphere_claim(files, StatsConfig(n_resamples=99))


def test_criteria_rows_carry_the_records_verdicts_and_margins():
    rec = _claim1()
    t = criteria_table(_ctx({"1": rec}), "1")
    assert len(t) == 2 and set(t["run"]) == {"vit-post__adamw"}
    crit = rec.per_model["vit-post__adamw"].details.criteria
    assert list(t["verdict"]) == [crit["radius_spread_ratio"].verdict, crit["offset"].verdict]
    assert t["margin"].iloc[0] == "≤ 0.5"
    text = sphere_text(_ctx({"1": rec}))
    assert "by definition" in text and "not evidence" in text


def test_missing_claims_say_so():
    assert "not available" in markov_text(_ctx({}))
    assert criteria_table(_ctx({}), "2").empty
