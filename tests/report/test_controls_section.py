"""The appendix "Can the rules say yes?": every control with its verdict and expected verdict, loud when one fails,
claim 3's controls when their module exists, computed once and cached in the results folder."""
from __future__ import annotations

import dataclasses
import functools
import sys
import types

import pytest

from brownformer.config import from_dict
from brownformer.report import section_controls
from brownformer.report.context import ReportContext
from brownformer.results import Results
from brownformer.stats.controls import positive_controls_claims12 as controls12
from brownformer.stats.controls.positive_controls_claims12 import ControlResult


def _ctx(tmp_path, raw_config, **stats_changes) -> ReportContext:
    cfg = from_dict(raw_config)
    (tmp_path / "results").mkdir(exist_ok=True)
    if stats_changes:
        cfg = dataclasses.replace(cfg, stats=dataclasses.replace(cfg.stats, **stats_changes))
    return ReportContext(cfg, tmp_path / "config.yaml", Results(cfg, tmp_path / "results"), tmp_path / "figures")


def _rows(text: str) -> list[list[str]]:
    """The appendix table's body rows, cells stripped."""
    lines = [line for line in text.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


CLAIM3_ROWS = section_controls._claim3_rows


@pytest.fixture(autouse=True)
def claims12_only(monkeypatch):
    """The claim-1/2 tests read only those controls; claim 3's (stats/controls/positive_controls.py) are tested below."""
    monkeypatch.setattr(section_controls, "_claim3_rows", lambda: ([], None))


def _refuse(*args, **kwargs):
    raise AssertionError("the controls were recomputed although the cache is current")


def test_the_appendix_runs_the_real_controls_and_reads_them_from_the_cache_after(tmp_path, raw_config, monkeypatch):
    # the real claim-1/2 controls through their rules, with 2 power studies instead of 8 to keep the test short
    monkeypatch.setattr(controls12, "positive_controls_claims12",
                        functools.partial(controls12.positive_controls_claims12, n_studies=2))
    ctx = _ctx(tmp_path, raw_config)
    text = section_controls.controls_appendix(ctx)
    assert text.startswith("## Appendix: Can the rules say yes?")
    assert "Every one of the 6 controls came out as expected (3 positive controls" in text and "**NO**" not in text
    rows = _rows(text)
    assert [r[0] for r in rows] == ["1", "1", "1", "2", "2", "2"] and all(r[-1] == "yes" for r in rows)
    assert sum(r[2:5] == ["positive", "supported", "supported"] for r in rows) == 3
    assert sum(r[2:5] == ["negative", "not supported", "not supported"] for r in rows) == 2
    assert (tmp_path / "results" / section_controls.CACHE_FILE).is_file()
    monkeypatch.setattr(controls12, "positive_controls_claims12", _refuse)
    again = section_controls.controls_appendix(ctx)
    assert "read from the cache" in again and again.split("\n- ")[0] == text.split("\n- ")[0]


def test_other_stats_settings_recompute_the_controls(tmp_path, raw_config, monkeypatch):
    calls = []
    monkeypatch.setattr(controls12, "positive_controls_claims12", lambda stats, **kw: calls.append(stats) or [])
    section_controls.controls_appendix(_ctx(tmp_path, raw_config))
    section_controls.controls_appendix(_ctx(tmp_path, raw_config))
    section_controls.controls_appendix(_ctx(tmp_path, raw_config, confidence_level=0.9))
    assert len(calls) == 2 and calls[1].confidence_level == 0.9


@pytest.mark.parametrize("kind, verdict, loud", [("positive", "inconclusive", "A POSITIVE CONTROL DID NOT COME OUT"),
                                                 ("negative", "supported", "A NEGATIVE CONTROL CAME OUT")])
def test_a_control_that_fails_is_said_loudly(tmp_path, raw_config, monkeypatch, kind, verdict, loud):
    expected = "supported" if kind == "positive" else "not supported"
    bad = ControlResult("1", "identity affine map", kind, expected, verdict, "why", 3)
    monkeypatch.setattr(controls12, "positive_controls_claims12", lambda stats, **kw: [bad])
    text = section_controls.controls_appendix(_ctx(tmp_path, raw_config))
    assert loud in text and "**NO**" in text and "1 of 1 controls did NOT come out as expected" in text


def test_claim3_controls_join_the_table_when_their_module_exists(tmp_path, raw_config, monkeypatch):
    monkeypatch.setattr(section_controls, "_claim3_rows", CLAIM3_ROWS)
    monkeypatch.setattr(controls12, "positive_controls_claims12", lambda stats, **kw: [])
    monkeypatch.setitem(sys.modules, section_controls.CLAIM3_MODULE, None)  # a build without the module
    absent = section_controls.controls_appendix(_ctx(tmp_path, raw_config))
    assert "claims 3a-3c: not available" in absent
    module = types.ModuleType(section_controls.CLAIM3_MODULE)
    module.claim3_controls = lambda: [
        {"claim": "3a", "name": "independent Gaussian residual updates", "kind": "positive", "expected": "supported",
         "verdict": "supported"},
        {"claim": "3c", "name": "fBm H = 0.75", "kind": "negative", "expected": "not supported",
         "verdict": "inconclusive"}]
    monkeypatch.setitem(sys.modules, section_controls.CLAIM3_MODULE, module)
    text = section_controls.controls_appendix(_ctx(tmp_path, raw_config))
    assert _rows(text) == [["3a", "independent Gaussian residual updates", "positive", "supported", "supported", "yes"],
                           ["3c", "fBm H = 0.75", "negative", "not supported", "inconclusive", "yes"]]
    assert "not available" not in text


def test_no_results_folder_is_created_for_the_cache(tmp_path, raw_config, monkeypatch):
    monkeypatch.setattr(controls12, "positive_controls_claims12", lambda stats, **kw: [])
    cfg = from_dict(raw_config)
    ctx = ReportContext(cfg, tmp_path / "config.yaml", Results(cfg, tmp_path / "none"), tmp_path / "figures")
    assert "controls not cached (no results folder)" in section_controls.controls_appendix(ctx)
    assert not (tmp_path / "none").exists()


def test_the_real_claim3_controls_come_out_as_expected(tmp_path, raw_config, monkeypatch):
    """The claim-3 controls of stats/controls/positive_controls.py, through the appendix (their field is "role")."""
    monkeypatch.setattr(section_controls, "_claim3_rows", CLAIM3_ROWS)
    monkeypatch.setattr(controls12, "positive_controls_claims12", lambda stats, **kw: [])
    rows = _rows(section_controls.controls_appendix(_ctx(tmp_path, raw_config)))
    assert {r[0] for r in rows} == {"3a", "3b", "3c"} and all(r[-1] == "yes" for r in rows)
    assert {r[2] for r in rows} == {"positive", "negative"}
