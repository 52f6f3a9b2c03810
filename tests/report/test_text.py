"""The Methods text: which runs train without probes (metrics only), in the design paragraph and per pair."""
from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

from brownformer.config import from_dict
from brownformer.report.context import ReportContext
from brownformer.report.section_study import _metrics_only_text, _trained_with_table, methods
from brownformer.results import Results

_spec = importlib.util.spec_from_file_location("fake_results", Path(__file__).parents[1] / "plots" / "fake_results.py")
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)


def _context(tmp_path, *extra_blocks) -> ReportContext:
    raw = copy.deepcopy(fake.RAW_CONFIG)  # seeds 0, 1: vit-pre x (adamw, kfac-iterative), lm-pre x adamw
    raw["grid"] += list(extra_blocks)
    cfg = from_dict(raw)
    return ReportContext(cfg, tmp_path / "config.yaml", Results(cfg, tmp_path / "results"), tmp_path / "figures")


def test_metrics_only_runs_are_named_in_the_design_and_per_pair(tmp_path):
    ctx = _context(tmp_path,
                   {"models": ["vit-pre"], "optimizers": ["adamw", "kfac-iterative"], "seeds": [0, 1, 2, 3, 4],
                    "probes": False},
                   {"models": ["lm-pre"], "optimizers": ["adamw"], "seeds": [5], "probes": False})
    # seeds 0 and 1 are probed by the first blocks; 3 vit-pre seeds x 2 optimizers + 1 lm-pre seed are metrics only
    assert _metrics_only_text(ctx.cfg) == "seeds 2–4 of adamw and kfac-iterative on vit-pre; seed 5 of adamw on lm-pre"
    text = methods(ctx)
    assert "13 training runs" in text and "7 of them train without probes" in text
    assert "seeds 2–4 of adamw and kfac-iterative on vit-pre" in text and "the other 6 runs" in text
    table = _trained_with_table(ctx).set_index(["model", "optimizer"])
    assert table.loc[("vit-pre", "adamw"), "seeds"] == "0, 1, 2, 3, 4"
    assert table["of which metrics only"].to_dict() == {("vit-pre", "adamw"): "2, 3, 4",
                                                         ("vit-pre", "kfac-iterative"): "2, 3, 4",
                                                         ("lm-pre", "adamw"): "5"}


def test_seeds_that_are_not_consecutive_are_listed(tmp_path):
    ctx = _context(tmp_path, {"models": ["vit-pre"], "optimizers": ["adamw"], "seeds": [3, 7], "probes": False})
    assert _metrics_only_text(ctx.cfg) == "seeds 3 and 7 of adamw on vit-pre"


def test_a_fully_probed_grid_says_nothing_about_metrics_only_runs(tmp_path):
    ctx = _context(tmp_path)
    assert _metrics_only_text(ctx.cfg) == ""
    assert "without probes" not in methods(ctx)
    assert "of which metrics only" not in _trained_with_table(ctx)
