"""benchmarks/replication.py: the offset configs and the side-by-side table on known claims files."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from brownformer.config import from_dict
from brownformer.verdicts import ClaimRecord, ClaimsFile
from brownformer.statsfile import EffectResult

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def replication(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import replication

    return replication


def _claims(**records) -> ClaimsFile:
    """claim -> (verdict, value, low, high) or (verdict, None) for a claim without an estimate."""
    out = {}
    for claim, (verdict, *est) in records.items():
        estimate = EffectResult.headline("slope", est[0], (est[1], est[2])) if est and est[0] is not None else None
        out[claim] = ClaimRecord(claim=claim, title=claim, verdict=verdict, estimate=estimate)
    return ClaimsFile(claims=out)


def test_each_offset_config_shifts_its_seeds_and_writes_apart(replication, ci_raw, tmp_path):
    a, b = (from_dict(replication.offset_config(ci_raw, k, tmp_path)) for k in (0, 1000))
    assert {r.seed + 1000 for r in a.runs()} == {r.seed for r in b.runs()}
    assert a.paths["results"] != b.paths["results"] and str(tmp_path) in b.paths["results"]


def test_the_table_says_where_verdicts_agree_and_intervals_overlap(replication):
    first = _claims(**{"1": ("supported", 0.1, 0.0, 0.2), "2": ("supported", 0.5, 0.4, 0.6),
                       "3a": ("inconclusive", None), "4": ("not supported", 1.0, 0.9, math.inf)})
    second = _claims(**{"1": ("supported", 0.15, 0.05, 0.25), "2": ("not supported", 0.8, 0.7, 0.9),
                        "3a": ("inconclusive", 0.4, 0.3, 0.5), "4": ("not supported", 2.0, 1.5, math.inf)})
    table = replication.compare(first, second, (0, 1000)).set_index("claim")
    assert table.loc["1", "verdicts agree"] and table.loc["1", "intervals overlap"] is True
    assert not table.loc["2", "verdicts agree"] and table.loc["2", "intervals overlap"] is False
    assert table.loc["3a", "verdicts agree"] and table.loc["3a", "intervals overlap"] == "-"
    assert table.loc["4", "intervals overlap"] is True  # open upper ends overlap
    text = replication.report(table.reset_index(), "config/ci.yaml", (0, 1000))
    assert "Every verdict agrees: NO" in text and "Every pair of intervals overlaps: NO" in text
    assert "slope 0.15 [0.05, 0.25]" in text


def test_a_dry_run_plans_both_offsets_with_shifted_run_ids(replication, tmp_path, capfd):
    assert replication.main(["--config", str(ROOT / "config" / "ci.yaml"), "--root", str(tmp_path), "--cores", "1",
                             "--dry-run"]) == 0
    planned = capfd.readouterr().out
    assert "vit-pre__adamw__s0" in planned and "vit-pre__adamw__s1000" in planned
    assert (tmp_path / "offset_1000" / "config.yaml").is_file()


def test_two_tables_with_the_seeds_and_a_row_per_model_of_a_pooled_claim(replication):
    from brownformer.verdicts import SeedUnit

    def pooled(value, lm_value):
        seeds = SeedUnit({"vit-pre": 5, "lm-pre": 5}, 5, "inputs within seeds", "over seeds")
        models = {"vit-pre": ClaimRecord(claim="1", title="1", verdict="supported",
                                         estimate=EffectResult.headline("offset", value, (value - 0.1, value + 0.1))),
                  "lm-pre": ClaimRecord(claim="1", title="1", verdict="supported",
                                        estimate=EffectResult.headline("offset", lm_value, (lm_value - 0.1, lm_value + 0.1)))}
        return ClaimsFile(claims={"1": ClaimRecord(claim="1", title="1", verdict="supported", seeds=seeds,
                                                   estimate=EffectResult.headline("offset", value, (value - 0.1, value + 0.1)),
                                                   per_model=models)})

    table = replication.compare(pooled(0.2, 0.3), pooled(0.25, 0.9), (0, 1000)).set_index("claim")
    assert list(table.index) == ["1", "1 / lm-pre", "1 / vit-pre"]
    assert not table.loc["1 / lm-pre", "intervals overlap"] and table.loc["1", "intervals overlap"]
    assert table.loc["1", "seeds (offset 0)"] == "lm-pre: 5, vit-pre: 5" and table.loc["1 / lm-pre", "seeds (offset 0)"] == "5"
    text = replication.report(table.reset_index(), "config/config.yaml", (0, 1000), {0: 600.0, 1000: 660.0})
    assert "## Verdicts" in text and "## Intervals" in text and "offset 1000 11.0 min" in text
    # the headline agrees and overlaps; one model variant's intervals do not, and the table shows it
    assert "Every verdict agrees: yes" in text and "Every pair of intervals overlaps: yes" in text
    assert "| 1 / lm-pre" in text
