"""The verdict table the deciding CLIs print (brownformer.terminal): aligned columns, the decided verdict and the
effect that decided it, a low-power "inconclusive" that says what the calibration can tell, --json and --quiet."""
from __future__ import annotations

import io
import json

import numpy as np

from brownformer.cli import main
from brownformer.stats.core.calibration import POWER_GOAL
from brownformer.terminal import (VerdictRow, VerdictTable, attention_table, emit, format_table, groups_for_power,
                                  trajectory_table)


def _effect(est, lo, hi, margin=(0.9, 1.1)):
    return {"estimate": est, "confidence_interval": [lo, hi], "tost_interval": [lo, hi], "margin": list(margin),
            "key": True}


def _result(verdict: str, effects: dict, calibration=None) -> dict:
    return {"kind": "euclidean", "n_times": 40, "n_walkers": 24, "n_groups": 24, "dim": 4, "verdict": verdict,
            "reason": "r", "effects": effects, "key_effects": list(effects), "calibration": calibration}


def test_columns_are_aligned_and_empty_columns_dropped():
    table = VerdictTable("t", [VerdictRow("a.npy", "BROWNIAN", "1 [0.9, 1.1]"), VerdictRow("long/b.npy", "NO")])
    lines = format_table(table).splitlines()
    assert lines[0] == "t" and "margin" not in lines[1]
    starts = {ln.index(v) for ln, v in zip(lines[3:], ("BROWNIAN", "NO"))}
    assert len(starts) == 1  # the verdict column starts at one offset


def test_not_brownian_names_the_effect_outside_its_margin_not_the_first_one():
    res = _result("not brownian", {"msd_exponent": _effect(1.0, 0.95, 1.05), "variance_ratio": _effect(1.4, 1.3, 1.5)})
    row = trajectory_table("x.npy", res).rows[0]
    assert row.verdict == "NOT BROWNIAN" and row.estimate.startswith("variance_ratio 1.4 [1.3, 1.5]")
    assert row.margin == "[0.9, 1.1]" and row.size_power == "not calibrated"


def test_inconclusive_from_low_power_says_what_the_calibration_can_tell():
    weak = POWER_GOAL - 0.29
    cal = {"size": 0.04, "power_lower": {"ou": weak, "exponent_0.8": 0.95}}
    res = _result("inconclusive", {"msd_exponent": _effect(1.0, 0.95, 1.05)}, cal)
    table = trajectory_table("x.npy", res)
    assert table.rows[0].size_power == f"0.04 / >= {weak:.3g}"
    note = " ".join(table.notes)
    need = groups_for_power(weak, 24, goal=POWER_GOAL, alpha=0.05)
    assert f"power lower bound {weak:.3g} < {POWER_GOAL:g} (against ou) with 24 groups" in note
    assert f"power reaches {POWER_GOAL:g} at about {need} groups ({need} walkers" in note
    powered = trajectory_table("x.npy", _result("inconclusive", res["effects"], {"size": 0.04,
                                                                                  "power_lower": {"ou": 0.95}}))
    assert not any("power lower bound" in n for n in powered.notes)  # enough power: no hint


def test_groups_for_power_inverts_the_normal_power_curve():
    # a test whose power at G groups is Phi(c sqrt(G) - z): simulate it at G = 16, ask for the G of power 0.9
    from scipy.stats import norm

    z, c = norm.ppf(0.95), 0.3
    power = lambda g: norm.cdf(c * np.sqrt(g) - z)  # noqa: E731
    need = groups_for_power(power(16), 16, goal=0.9, alpha=0.05)
    assert power(need) >= 0.9 > power(need - 1)
    assert groups_for_power(0.04, 16, goal=0.9, alpha=0.05) is None  # below alpha: nothing to extrapolate
    assert groups_for_power(0.95, 16, goal=0.9, alpha=0.05) is None


def test_attention_rows_one_per_criterion_with_its_bound():
    res = {"n_matrices": 6, "n": 9, "verdicts": {
        "head_isotropy": {"verdict": "inconclusive", "margin": [0.9, 1.0], "why_undefined": "needs --wq and --wk"},
        "vmf_output_error": {"verdict": "not supported", "estimate": 0.7, "confidence_interval": [0.6, 0.8],
                             "margin": [0.0, 0.3]}}}
    rows = attention_table("a.npy", res).rows
    assert [(r.item, r.verdict, r.margin) for r in rows] == [("a.npy: head_isotropy", "INCONCLUSIVE", ">= 0.9"),
                                                              ("a.npy: vmf_output_error", "NOT SUPPORTED", "<= 0.3")]
    assert rows[0].estimate.startswith("undefined") and rows[1].estimate == "0.7 [0.6, 0.8]"


def test_emit_json_and_quiet():
    table = VerdictTable("t", [VerdictRow("a", "B")])
    out = io.StringIO()
    emit(table, {"x": float("nan")}, as_json=True, stream=out)
    assert json.loads(out.getvalue()) == {"x": None}
    out = io.StringIO()
    emit(table, {}, quiet=True, stream=out)
    assert out.getvalue() == ""


def test_stats_trajectory_prints_the_table_on_stdout(tmp_path, capsys):
    path = tmp_path / "rw.npy"
    np.save(path, np.cumsum(np.random.default_rng(1).normal(size=(30, 16, 3)), axis=0))
    assert main(["stats", "trajectory", str(path), "--out", str(tmp_path / "o.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    verdict = json.loads((tmp_path / "o.json").read_text())["verdict"]
    row = next(ln for ln in out if ln.startswith(str(path)))
    assert verdict.upper() in row and out[1].split()[:2] == ["item", "verdict"]
