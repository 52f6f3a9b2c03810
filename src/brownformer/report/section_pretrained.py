"""The report's section "Pretrained models (descriptive)": each listed checkpoint's verdicts and provenance."""
from __future__ import annotations

import pandas as pd

from brownformer.report.context import ReportContext
from brownformer.report.markdown import fmt, md_table
from brownformer.results.pretrained_outputs import pretrained_models

__all__ = ["pretrained_text"]

_CLAIMS = ("1", "2", "3a", "3b", "3c")
_HOW = ("`brownformer pretrained MODEL_DIR --out DIR` analyses a local Hugging Face checkpoint (offline); list it "
        "under the config's `pretrained:` block to have the pipeline run it and this section show it.")


def _row(name: str, res: dict) -> dict:
    shape, inputs = res.get("shape") or {}, res.get("inputs") or {}
    row = {"model": name, "model_type": res.get("model_type"),
           "layers x width": f"{shape.get('n_layers')} x {shape.get('d_model')}",
           "norm": f"{(res.get('adapter') or {}).get('placement')}-{(res.get('adapter') or {}).get('norm_kind')}",
           "inputs": f"{inputs.get('n_inputs')} x {inputs.get('n_tokens')}",
           "checkpoints": len(res.get("checkpoints") or [])}
    for c in _CLAIMS:
        row[f"claim {c}"] = ((res.get("claims") or {}).get(c) or {}).get("verdict", "n/a")
    return row


def _provenance(name: str, res: dict) -> str:
    sha = ((res.get("weights_sha256") or {}).get("combined") or "")[:12]
    versions = res.get("versions") or {}
    status = {c: ((res.get("claims") or {}).get(c) or {}).get("calibration_status") for c in ("3a", "3c")}
    return (f"- {name}: weights sha256 {sha}…, transformers {versions.get('transformers')}, per-head Q/K reproduce "
            f"the model's attention to {fmt((res.get('qk_max_deviation')))}; claim 3a calibration: {status['3a']}")


def pretrained_text(ctx: ReportContext) -> str:
    """Markdown: one row per listed model (verdict of every claim), provenance, and why it is descriptive."""
    models = pretrained_models(ctx.results)
    if not models:
        return "No pretrained models are listed. " + _HOW
    done = {n: r for n, r in models.items() if r is not None}
    missing = sorted(set(models) - set(done))
    parts = ["Each listed checkpoint is read through the same trajectory files and claim rules as the trained runs; "
             "one checkpoint is one model, so these verdicts describe it and are not pooled into Section 3.1. The "
             "probe inputs (windows of a local text, or digits resized to the model's image size) may be "
             "off-distribution for the model. Claim 2's step-0 null is a random-init model of the same config."]
    if done:
        parts += ["", md_table(pd.DataFrame([_row(n, r) for n, r in done.items()])), ""]
        parts += [_provenance(n, r) for n, r in done.items()]
    if missing:
        parts.append(f"\nNot available: {', '.join(missing)} (run `snakemake` to analyse them).")
    return "\n".join(parts)
