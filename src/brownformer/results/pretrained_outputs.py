"""The pretrained models' outputs (config `pretrained:`): RESULTS/pretrained/<name>/pretrained.json, and the cells
that the terminal (`brownformer pretrained`) and the report both print for one model's claim."""
from __future__ import annotations

import json
import math

from brownformer.results.reader import Results

__all__ = ["pretrained_models", "claim_cells", "is_unavailable", "terminal_rows", "DEPTH_CLAIMS"]

#: the claims a single checkpoint decides (3b and 3c need a checkpoint series)
DEPTH_CLAIMS = ("1", "2", "3a")


def pretrained_models(res: Results) -> dict[str, dict | None]:
    """name -> pretrained.json content for every model the config lists; None (and a note) when missing."""
    out: dict[str, dict | None] = {}
    for name in sorted(res.cfg.raw.get("pretrained") or {}):
        path = res.root / "pretrained" / name / "pretrained.json"
        try:
            out[name] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            res.notes.append(f"pretrained model {name}: {path} unreadable ({type(exc).__name__})")
            out[name] = None
    return out


def is_unavailable(result: dict) -> bool:
    """A pretrained.json that records a model the run could not have (package missing, sha256 mismatch)."""
    return result.get("status") == "unavailable"


def _num(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.3g}"


def _size_power(cal: dict | None) -> str:
    if not cal:
        return ""
    power = cal.get("power")
    if isinstance(power, dict):  # per alternative: the weakest is what the verdict can promise
        values = [v for v in power.values() if isinstance(v, (int, float))]
        power = min(values) if values else None
    text = f"size {_num(cal.get('size'))}"
    return text + (f" / power {_num(power)}" if power is not None else "")


def claim_cells(claim: dict) -> dict[str, str]:
    """One claim of a pretrained.json as printable cells: verdict, estimate [CI], margin, size / power, reason
    (a Brownian claim's reason ends with its calibration status: a verdict without calibration says so)."""
    est = claim.get("estimate") or {}
    ci = est.get("confidence_interval") or [None, None]
    margin = claim.get("margin")
    runs = list((claim.get("per_run") or {}).values())
    # one model is one "run": its own reason names the files and numbers; the pooled one only counts that one run
    reason = str((runs[0] if len(runs) == 1 else claim).get("reason") or claim.get("reason") or "")
    status = str(claim.get("calibration_status") or "")
    if status and status not in reason and str(claim.get("claim", "")).startswith("3"):
        reason = f"{reason}; {status}" if reason else status
    return {"verdict": str(claim.get("verdict", "n/a")),
            "estimate": f"{_num(est.get('value'))} [{_num(ci[0])}, {_num(ci[1])}]" if est else "",
            "margin": f"[{_num(margin[0])}, {_num(margin[1])}]" if margin else "",
            "size_power": _size_power(claim.get("calibration")), "reason": reason}


def terminal_rows(results: list[dict]) -> tuple[list[dict], list[str]]:
    """The verdict table's rows (brownformer.terminal.VerdictRow fields) and notes of one or more pretrained.json:
    one block of rows per model, so that several models sit side by side; claims 3b and 3c only with a series."""
    rows, notes = [], []
    for res in results:
        if is_unavailable(res):
            rows.append({"item": res["name"], "verdict": "unavailable", "reason": res["reason"]})
            continue
        claims = [c for c in res["claims"] if c in DEPTH_CLAIMS or res.get("checkpoints")]
        rows += [{"item": f"{res['name']} claim {c}", **claim_cells({"claim": c, **res["claims"][c]})} for c in claims]
        if not res["calibration"]["replicates"]:
            notes.append(f"{res['name']}: claim 3 not calibrated (--no-calibration): its verdicts cannot be "
                         "'supported'")
    return rows, notes
