"""The report's section on real pretrained transformers: each listed checkpoint's claims 1, 2, 3a (3b, 3c with a
checkpoint series) beside the toy models' verdicts, its provenance, and the models that were unavailable."""
from __future__ import annotations

import pandas as pd

from brownformer.report.context import ReportContext
from brownformer.report.markdown import fmt, md_table
from brownformer.results.pretrained_outputs import DEPTH_CLAIMS, claim_cells, is_unavailable, pretrained_models

__all__ = ["pretrained_text"]

_CLAIMS = ("1", "2", "3a", "3b", "3c")
_HOW = ("`brownformer pretrained MODEL_DIR --out DIR` analyses a local Hugging Face checkpoint (offline); list it "
        "under the config's `pretrained:` block to have the pipeline run it and this section show it.")
_INTRO = ("**A real pretrained transformer.** Every verdict above comes from toy models trained here; this section "
          "reads checkpoints that others trained and people use, through the same trajectory files and claim rules. "
          "One checkpoint is one model, so these verdicts describe it and are not pooled into the toy models' "
          "verdicts (Section 3.1): the pooling rule counts independent training runs of one configuration, and a "
          "pretrained model is neither. The probe inputs (windows of the pydoc text through the checkpoint's own "
          "tokenizer, or digits resized to the model's image size) may be off-distribution for the model. Claim 2's "
          "step-0 null is a random-init model of the same config. Depth is read at sub-layer resolution where the "
          "model has two norms per block: the attention and the MLP update are one step each, so a 6-layer model "
          "gives 12 norm points and 13 residual states (the battery needs 8); this assumes the two kinds of update "
          "share one clock, and unequal steps read as not Brownian. Claim 3's rule is calibrated at each file's own "
          "shape.")


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


def _toy_verdicts(ctx: ReportContext) -> dict[str, str]:
    claims = ctx.results.claims
    return {c: claims.claims[c].verdict for c in DEPTH_CLAIMS if claims and c in claims.claims}


def _beside_toys(done: dict[str, dict], toys: dict[str, str]) -> str:
    """Claims 1, 2, 3a: the toy models' pooled verdict, then each real model's verdict with its numbers."""
    rows = []
    for c in DEPTH_CLAIMS:
        row = {"claim": c, "toy models (pooled)": toys.get(c, "n/a")}
        for name, res in done.items():
            cells = claim_cells({"claim": c, **((res.get("claims") or {}).get(c) or {})})
            row[name] = f"{cells['verdict']}: {cells['estimate']}" + (f", {cells['size_power']}"
                                                                      if cells["size_power"] else "")
        rows.append(row)
    return md_table(pd.DataFrame(rows))


def _reasons(name: str, res: dict) -> list[str]:
    return [f"  - claim {c}: {claim_cells({'claim': c, **res['claims'][c]})['reason']}"
            for c in DEPTH_CLAIMS if c in (res.get("claims") or {})]


def _provenance(name: str, res: dict) -> str:
    sha = res.get("weights_sha256") or {}
    origin = res.get("origin") or {}
    where = (f"package {origin.get('distribution')} {origin.get('version')}" if origin.get("kind") == "package"
             else f"folder {origin.get('path', res.get('model_dir'))}")
    files = ", ".join(f"{f} sha256 {h}" for f, h in sorted((sha.get("files") or {}).items()))
    verified = "verified against the published hash" if sha.get("verified") else "not checked against a known hash"
    return (f"- {name}: weights from {where}; {files or 'sha256 ' + str(sha.get('combined'))} ({verified}); "
            f"transformers {(res.get('versions') or {}).get('transformers')}; depth steps "
            f"{res.get('depth_steps', 'block')}; per-head Q/K reproduce the model's attention to "
            f"{fmt(res.get('qk_max_deviation'))}")


def pretrained_text(ctx: ReportContext) -> str:
    """Markdown: the real models beside the toy models (claims 1, 2, 3a), one row per model, provenance, and which
    listed models were unavailable and why."""
    models = pretrained_models(ctx.results)
    if not models:
        return "No pretrained models are listed. " + _HOW
    done = {n: r for n, r in models.items() if r is not None and not is_unavailable(r)}
    unavailable = {n: r["reason"] for n, r in models.items() if r is not None and is_unavailable(r)}
    missing = sorted(n for n, r in models.items() if r is None)
    parts = [_INTRO]
    if done:
        parts += ["", _beside_toys(done, _toy_verdicts(ctx)), "", md_table(pd.DataFrame(
            [_row(n, r) for n, r in done.items()])), ""]
        for n, r in done.items():
            parts += [_provenance(n, r), *_reasons(n, r)]
    for n, why in sorted(unavailable.items()):
        parts.append(f"\n**{n} unavailable**: {why}. Its claims are not decided in this run.")
    if missing:
        parts.append(f"\nNot available: {', '.join(missing)} (run `snakemake` to analyse them).")
    return "\n".join(parts)
