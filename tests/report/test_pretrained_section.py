"""The report's "Pretrained models (descriptive)" section: how to add one without any; each model's verdicts."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from brownformer.report.context import ReportContext
from brownformer.report.section_pretrained import pretrained_text
from brownformer.report.sections import SECTIONS

ROOT = Path(__file__).resolve().parents[2]
VERDICTS = {"1": "supported", "2": "not supported", "3a": "inconclusive", "3b": "supported", "3c": "not supported"}


def test_section_is_listed_and_says_how_without_models(tmp_path):
    assert "Pretrained models (descriptive)" in [s.heading for s in SECTIONS]
    text = pretrained_text(ReportContext.load(ROOT / "config" / "config.yaml", tmp_path, tmp_path))
    assert "No pretrained models are listed" in text and "brownformer pretrained MODEL_DIR" in text


def test_section_tables_each_listed_model_and_names_the_missing_one(tmp_path):
    raw = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    raw["pretrained"] = {"tiny": {"path": str(tmp_path)}, "absent": {"path": str(tmp_path)}}
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    out = tmp_path / "results" / "pretrained" / "tiny"
    out.mkdir(parents=True)
    (out / "pretrained.json").write_text(json.dumps({
        "model_type": "gpt2", "shape": {"n_layers": 8, "d_model": 32}, "inputs": {"n_inputs": 4, "n_tokens": 16},
        "adapter": {"placement": "pre", "norm_kind": "layernorm"}, "checkpoints": [{"step": 0}, {"step": 5}],
        "weights_sha256": {"combined": "ab" * 32}, "versions": {"transformers": "9.9"}, "qk_max_deviation": 0.0,
        "claims": {c: {"verdict": v, "calibration_status": "s"} for c, v in VERDICTS.items()}}))
    ctx = ReportContext.load(cfg, tmp_path / "results", tmp_path)
    text = pretrained_text(ctx)
    row = next(line for line in text.splitlines() if line.startswith("| tiny"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:6] == ["tiny", "gpt2", "8 x 32", "pre-layernorm", "4 x 16", "2"]
    assert cells[6:] == [VERDICTS[c] for c in ("1", "2", "3a", "3b", "3c")]
    assert "off-distribution" in text and "Not available: absent" in text
    assert any("pretrained model absent" in n for n in ctx.results.notes)
