"""build_report on a fake results tree: every figure embedded, every claim with a verdict, the appendix fields."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest
import yaml

from brownformer.plots import FIGURES, make_figures
from brownformer.report import build_report

_spec = importlib.util.spec_from_file_location("fake_results", Path(__file__).parents[1] / "plots" / "fake_results.py")
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    results = fake.build_fake_results(root / "results")
    config_path = root / "config.yaml"
    config_path.write_text(yaml.safe_dump(fake.RAW_CONFIG))
    cfg = fake.fake_config()
    make_figures(cfg, results, root / "figures")
    html = build_report(cfg, results, root / "figures", root / "out", config_path=config_path)
    return cfg, html.read_text(), root / "out"


def test_every_figure_is_embedded_with_a_numbered_caption(report):
    _, html, _ = report
    for n, (stem, title) in enumerate(FIGURES.items(), start=1):
        assert f"id='fig-{stem}'" in html or f'id="fig-{stem}"' in html, stem
        assert f"Figure {n}." in html
    assert len(re.findall(r"data:image/png;base64,", html)) >= len(FIGURES)
    assert "src=\"figures/" not in html and "src='figures/" not in html  # self-contained


def test_every_claim_has_a_verdict(report):
    _, html, _ = report
    for claim, verdict in (("1 sphere", "SUPPORTED"), ("2 markov", "NOT SUPPORTED"), ("3a depth-brownian", "INCONCLUSIVE"),
                           ("4 optimizer", "INCONCLUSIVE")):
        row = re.search(rf"<td>{claim}</td>.*?</tr>", html, flags=re.S)
        assert row and verdict in row.group(0), claim


def test_appendix_fields(report):
    cfg, html, _ = report
    assert cfg.hash in html
    assert "0123456789abcdef" in html  # git SHA recorded by the runs
    assert "Git SHA at report time" in html and "dirty" in html
    for package in ("torch", "numpy", "matplotlib"):
        assert f"<td>{package}</td>" in html
    assert "torch=0" in html and "probes=1234" in html  # per-run seeds from the manifests
    assert "train_model" in html and "12.5" in html  # stage wall time from the benchmark files


def test_no_code_in_html_and_notebook_kept(report):
    _, html, out = report
    assert "ReportContext.load" not in html and "display(Markdown" not in html
    nb = nbformat.read(out / "report.ipynb", as_version=4)
    assert any("injected-parameters" in c.metadata.get("tags", []) for c in nb.cells)


def test_packaged_notebook_matches_workflow_copy():
    packaged = (REPO / "src" / "brownformer" / "report" / "report.ipynb").read_text()
    assert packaged == (REPO / "workflow" / "notebooks" / "report.ipynb").read_text()


def test_missing_inputs_say_not_available(tmp_path):
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(fake.RAW_CONFIG))
    html = build_report(fake.fake_config(), tmp_path / "none", tmp_path / "nofigs", tmp_path / "out",
                        config_path=config_path).read_text()
    assert "not available" in html
    assert "Figure 9 is not available" in html
