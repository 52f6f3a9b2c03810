"""The per-run statistics contract (brownformer.statsfile): real files of a tiny run round-trip through it, and a
file that breaks it is an error naming the problem."""
from __future__ import annotations

import copy
import dataclasses
import json
import math

import pytest

from brownformer.statsfile import (SCHEMA_VERSION, AttentionStats, BatteryStats, NoiseStats, RunStatsSummary,
                                   SphereStats, parse_stats_file)
from brownformer.statsfile import EffectResult as Result

RUN = "vit-pre__adamw__s0"
TINY_STEPS = 30  # enough captures for a battery over training; the ci config's 60 would only cost time


@pytest.fixture(scope="module")
def run_stats(ci_raw, digits_dir, tmp_path_factory):
    """A tiny real run of config/ci.yaml: trained with probes, extracted, and its statistics written."""
    from brownformer.config import from_dict
    from brownformer.probes import extract_trajectories
    from brownformer.stats_stage.run_stats import stats_for_run
    from brownformer.train import train_run

    raw = copy.deepcopy(ci_raw)
    raw["train"] = {**raw["train"], "steps": TINY_STEPS, "eval_every": 10, "checkpoint_every": 100}
    cfg = from_dict(raw)
    run_dir = tmp_path_factory.mktemp("runs") / RUN
    train_run(cfg, RUN, digits_dir, run_dir, probes=True, progress=False)
    extract_trajectories(cfg, run_dir, run_dir / "trajectories")
    stats_for_run(run_dir / "trajectories", run_dir / "stats", stats=cfg.stats, run_id=RUN)
    return run_dir / "stats"


def _files(stats_dir):
    return {p.relative_to(stats_dir).as_posix(): json.loads(p.read_text())
            for p in sorted(stats_dir.rglob("*.json")) if p.name != "summary.json"}


def test_every_file_of_a_real_run_round_trips(run_stats):
    files = _files(run_stats)
    kinds = set()
    for rel, data in files.items():
        parsed = parse_stats_file(data, rel)
        kinds.add(type(parsed))
        assert json.loads(json.dumps(parsed.to_dict())) == data, rel  # JSON -> typed -> the same JSON
        assert parsed.schema_version == SCHEMA_VERSION and parsed.run_id == RUN
    # the tiny run exercises every kind of file the contract knows
    assert kinds == {BatteryStats, SphereStats, AttentionStats, NoiseStats}
    summary = json.loads((run_stats / "summary.json").read_text())
    typed = RunStatsSummary.from_dict(summary)
    assert typed.to_dict() == summary and {r.output for r in typed.files} == set(files)


def test_battery_files_use_scipys_names_and_one_spelling(run_stats):
    battery = [parse_stats_file(d, rel) for rel, d in _files(run_stats).items() if "tests" in d]
    assert battery
    for b in battery:
        for t in b.tests:
            assert isinstance(t, Result) and t.rejected == t.reject(b.settings.alpha)
        lo, hi = b.msd_exponent.interval()
        assert b.msd_exponent.estimate is None or not (lo <= hi) or lo <= b.msd_exponent.estimate <= hi
    text = json.dumps(_files(run_stats))
    for old in ('"p_value"', '"ci"', '"tost_ci"', '"reject"'):  # schema 1's spellings are gone
        assert old not in text


def test_a_file_of_another_schema_version_is_refused():
    with pytest.raises(ValueError, match="schema_version None"):
        parse_stats_file({"kind": "euclidean", "tests": []}, "old.json")


def test_unknown_and_missing_keys_are_named():
    t = Result("variance_ratio", 1.2, 0.3, estimate=1.1, confidence_interval=(0.9, 1.3))
    d = t.to_dict()
    with pytest.raises(ValueError, match=r"unknown keys \['p_value'\]"):
        Result.from_dict({**d, "p_value": 0.3}, "tests[0]")
    with pytest.raises(ValueError, match=r"tests\[0\]: missing keys \['pvalue'\]"):
        Result.from_dict({k: v for k, v in d.items() if k != "pvalue"}, "tests[0]")


def test_nan_is_written_as_null_and_read_back_as_nan():
    from brownformer.io import to_jsonable
    t = Result("hurst", math.nan, math.nan, why_undefined="too few time points")
    back = Result.from_dict(json.loads(json.dumps(to_jsonable(t.to_dict()))))
    assert math.isnan(back.pvalue) and math.isnan(back.confidence_interval[0]) and not back.reject(0.05)
    assert dataclasses.replace(back, pvalue=0.0, statistic=0.0, confidence_interval=(0.0, 0.0),
                               tost_interval=(0.0, 0.0), estimate=0.0, null_value=0.0) == dataclasses.replace(
        t, pvalue=0.0, statistic=0.0, confidence_interval=(0.0, 0.0), tost_interval=(0.0, 0.0), estimate=0.0,
        null_value=0.0)
