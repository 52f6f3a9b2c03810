"""make_figures: every catalogued figure as png + svg, byte-identical across runs, honest when inputs are missing."""
from __future__ import annotations

import pytest

from brownformer.plots import FIGURES, make_figures
from brownformer.plots._load import Results
from brownformer.plots.training import time_to_target

from .fake_results import build_fake_results, fake_config


@pytest.fixture(scope="module")
def fake_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    return build_fake_results(root)


@pytest.fixture(scope="module")
def first_figures(fake_tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("figures_a")
    return out, make_figures(fake_config(), fake_tree, out)


def test_every_figure_written_as_png_and_svg(first_figures):
    out, written = first_figures
    expected = {out / f"{stem}.{ext}" for stem in FIGURES for ext in ("png", "svg")}
    assert set(written) == expected
    for path in expected:
        assert path.stat().st_size > 1000, path
        assert not list(out.glob(".*")), "temporary files left behind"


def test_figures_are_byte_identical_across_runs(first_figures, fake_tree, tmp_path):
    out_a, _ = first_figures
    make_figures(fake_config(), fake_tree, tmp_path)
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


def test_time_to_target_uses_adamw_median_final(fake_tree):
    tt = time_to_target(Results(fake_config(), fake_tree))
    vit = tt[tt["model"] == "vit-pre"]
    adamw_finals = vit[vit["optimizer"] == "adamw"]["final"]
    assert vit["target"].unique().tolist() == [pytest.approx(adamw_finals.median())]
    kfac = vit[vit["optimizer"] == "kfac-iterative"]
    assert kfac["reached"].all() and (kfac["steps"] < 40).all()
    lm = tt[tt["model"] == "lm-pre"]
    assert lm["metric"].unique().tolist() == ["val_bpc"]  # text: lower is better
