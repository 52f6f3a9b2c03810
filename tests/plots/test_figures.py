"""make_figures: every catalogued figure as png + svg, byte-identical across runs, honest when inputs are missing."""
from __future__ import annotations

from pathlib import Path

import pytest

from brownformer.plots import drawing_function, make_figures
from brownformer.results import FIGURES, Results, time_to_target_table

from .fake_results import build_fake_results, fake_config

CAPTIONS = Path(__file__).resolve().parents[2] / "workflow" / "report"


@pytest.fixture(scope="module")
def fake_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    return build_fake_results(root)


@pytest.fixture(scope="module")
def first_figures(fake_tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("figures_a")
    return out, make_figures(fake_config(), fake_tree, out)


@pytest.mark.parametrize("stem", list(FIGURES))
def test_catalog_entry_resolves_to_a_drawing_function_and_a_caption(stem):
    figure = FIGURES[stem]
    assert callable(drawing_function(figure))
    assert (CAPTIONS / figure.caption).read_text().strip(), f"{figure.caption} is empty"


def test_every_figure_written_as_png_and_svg(first_figures):
    out, written = first_figures
    expected = {out / f"{stem}.{ext}" for stem in FIGURES for ext in ("png", "svg")}
    assert set(written) == expected
    for path in expected:
        assert path.stat().st_size > 1000, path
        assert not list(out.glob(".*")), "temporary files left behind"


def test_no_figure_fell_back_to_the_error_panel(first_figures):
    out, _ = first_figures
    failed = [p.name for p in sorted(out.glob("*.svg")) if "drawing failed" in p.read_text()]
    assert failed == []


def test_figures_are_byte_identical_across_runs_and_worker_counts(first_figures, fake_tree, tmp_path):
    out_a, _ = first_figures  # drawn in this process
    written = make_figures(fake_config(), fake_tree, tmp_path, jobs=2)  # drawn by two worker processes
    assert sorted(p.name for p in written) == sorted(p.name for p in out_a.iterdir())
    differing = [p.name for p in sorted(out_a.iterdir()) if p.read_bytes() != (tmp_path / p.name).read_bytes()]
    assert differing == []


def test_svg_carries_no_date_or_software_version(first_figures):
    out, _ = first_figures
    text = (out / "training_curves.svg").read_text()
    assert "<dc:date>" not in text and "Matplotlib v" not in text


def test_missing_inputs_draw_no_data_panels(tmp_path):
    # No results at all: every figure still exists and says why it is empty.
    written = make_figures(fake_config(), tmp_path / "empty", tmp_path / "figs")
    assert len(written) == 2 * len(FIGURES)
    for stem in FIGURES:  # matplotlib keeps each text as an SVG comment even with glyphs as paths
        assert "no data" in (tmp_path / "figs" / f"{stem}.svg").read_text(), stem


def test_overview_shows_the_did_not_train_verdict(first_figures):
    out, _ = first_figures
    assert "did not train" in (out / "claims_overview.svg").read_text()


def test_time_to_target_reaches_the_weakest_adamw_seed(fake_tree):
    tt = time_to_target_table(Results(fake_config(), fake_tree))
    vit = tt[tt["model"] == "vit-pre"]
    adamw_finals = vit[vit["optimizer"] == "adamw"]["final"]
    # the target is reached by every AdamW seed by its last evaluation
    assert vit[vit["optimizer"] == "adamw"]["reached"].all()
    assert vit["target"].iat[0] <= adamw_finals.max()
    kfac = vit[vit["optimizer"] == "kfac-iterative"]
    assert kfac["reached"].all() and (kfac["steps"] < 40).all()
    lm = tt[tt["model"] == "lm-pre"]
    assert lm["metric"].unique().tolist() == ["val_bpc"]  # text: lower is better
