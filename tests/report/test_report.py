"""build_report on a fake results tree: every figure embedded, every claim with its verdict, estimate, margin,
calibration and reason, the did-not-train runs, the appendix fields."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest
import yaml

from brownformer.plots import make_figures
from brownformer.report import build_report
from brownformer.report.deciding import NOT_SIMULATED
from brownformer.report.sections import SECTIONS
from brownformer.results import FIGURES
from brownformer.verdicts import read_claims

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
    return cfg, html.read_text(), root / "out", results


def _row(html: str, *cells: str) -> str:
    """The HTML table row whose first cells are `cells`."""
    start = r"\s*".join(rf"<td>{re.escape(c)}</td>" for c in cells)
    m = re.search(rf"{start}.*?</tr>", html, flags=re.S)
    assert m, f"no table row starting with {cells!r}"
    return m.group(0)


def test_every_figure_is_embedded_with_a_numbered_caption(report):
    _, html, _, _ = report
    for n, stem in enumerate(FIGURES, start=1):
        assert f"id='fig-{stem}'" in html or f'id="fig-{stem}"' in html, stem
        assert f"Figure {n}." in html
    assert len(re.findall(r"data:image/png;base64,", html)) >= len(FIGURES)
    assert "src=\"figures/" not in html and "src='figures/" not in html  # self-contained


def test_every_figure_group_has_a_report_section():
    keys = {s.key for s in SECTIONS}
    assert {f.group for f in FIGURES.values()} <= keys


def test_each_claim_row_shows_what_claims_json_says(report):
    _, html, _, results = report
    claims = read_claims(results / "stats" / "claims.json")
    for cid, rec in claims.claims.items():
        row = _row(html, cid, rec.title)
        assert rec.verdict.upper() in row, cid
        assert (rec.reason or "") in row
        if rec.estimate:
            lo, hi = rec.estimate.confidence_interval
            assert f"{lo:g}" in row and f"{hi:g}" in row, cid
        if rec.margin:
            assert f"[{rec.margin[0]:g}, {rec.margin[1]:g}]" in row, cid
        if rec.calibration:
            assert f"size {rec.calibration['size']:g}" in row and "400 replicates" in row, cid
            assert f"power ≥ {min(rec.calibration['power'].values()):g}" in row, cid
        else:  # claim 4 simulates its rule per decisive comparison, so without one it says "not simulated"
            assert (NOT_SIMULATED if cid == "4" else "not calibrated") in row, cid


def test_did_not_train_runs_are_listed(report):
    _, html, _, _ = report
    row = _row(html, fake.DID_NOT_TRAIN_RUN)
    assert "diverged" in row
    assert "DID NOT TRAIN" in html  # the headline verdict of claim 4 in the fake tree


def test_appendix_fields(report):
    cfg, html, _, _ = report
    assert cfg.hash in html
    assert "0123456789abcdef" in html  # git SHA recorded by the runs
    assert "Git SHA at report time" in html and "dirty" in html
    for package in ("torch", "numpy", "matplotlib"):
        assert f"<td>{package}</td>" in html
    assert "torch=0" in html and "probes=1234" in html  # per-run seeds from the manifests
    assert "train_model" in html and "12.5" in html  # stage wall time from the benchmark files
    # the controls appendix: claims 1 and 2's rules can say yes (stats/controls/positive_controls_claims12.py)
    assert "Can the rules say yes?" in html and "controls came out as expected" in html


def test_no_code_in_html_and_notebook_kept(report):
    _, html, out, _ = report
    assert "ReportContext.load" not in html and "display(Markdown" not in html
    nb = nbformat.read(out / "report.ipynb", as_version=4)
    assert any("injected-parameters" in c.metadata.get("tags", []) for c in nb.cells)


def test_missing_inputs_say_not_available(tmp_path):
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(fake.RAW_CONFIG))
    html = build_report(fake.fake_config(), tmp_path / "none", tmp_path / "nofigs", tmp_path / "out",
                        config_path=config_path).read_text()
    assert "not available" in html
    assert f"Figure {len(FIGURES)} is not available" in html


def test_a_claims_file_breaking_the_contract_is_reported_not_reinterpreted(tmp_path):
    results = fake.build_fake_results(tmp_path / "results")
    path = results / "stats" / "claims.json"
    path.write_text(path.read_text().replace('"verdict": "supported"', '"verdict": "yes"'))
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(fake.RAW_CONFIG))
    html = build_report(fake.fake_config(), results, tmp_path / "nofigs", tmp_path / "out",
                        config_path=config_path).read_text()
    assert "does not follow the verdicts contract" in html
    assert "SUPPORTED" not in html
