"""Claims 3a/3b/3c: token states over depth, token states over training, and weights move as Brownian motion.

Per file the verdict is the calibrated rule itself (stats/rule.py `decide`, the function the calibration
simulates through): it is re-applied here to the file's stored key effects with this StatsConfig's
margins and alpha, the MSD exponent being the window exponent (stats/window_reading.py: the mean
per-walker log-log slope inside the window fixed in the config before the data, after the warm-up and
beyond the momentum time); a verdict also needs that exponent's own rule to keep its size on the
Brownian motions simulated at the file's shape over the window. A file counts only where the calibration
simulated its exact shape (stats/shapes.py) and found the rule trustworthy there for the verdict it gives, each verdict being
held to its own false-positive rate: "not brownian" needs the rate of "not brownian" on Brownian motion
(the rule's size) at most SIZE_GOAL; "brownian" needs that too and, at each margin edge and on i.i.d.
points, the rate of "brownian" at most 1 - POWER_GOAL (the equivalence test's own size). A rejection's
validity rests on its size; how often the rule would miss a walk that is not Brownian says nothing
against a rejection that was made. Size and power are cited for every file either way. Without that
the file is "inconclusive", never evidence for "supported".

Per run (the files of one family: layers, or layers x weight matrices): "supported" when every file is a
certified "brownian" (an intersection-union test: no multiplicity correction is needed for an "all"
statement); "not supported" when more than half of the files are certified "not brownian" (a majority,
so that one file's 5% false alarm cannot decide a run); else "inconclusive". Across runs and per
optimizer: claims/common.py `pool_runs` (supported when every trained run is, not supported when some
run is). Runs that did not train are left out.
"""
from __future__ import annotations

import math

from brownformer.verdicts import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, ClaimRecord

from ..calibration import POWER_GOAL, SIZE_GOAL
from ..rule import KEY_EFFECTS, MARGIN_KEYS, decide_one
from ..shapes import CalibrationShape, calibration_for
from ..window_reading import window_effects
from .common import did_not_train_record, pool_runs, unit_mean_interval

__all__ = ["brownian_family_claim", "file_verdict", "BROWNIAN_FAMILIES", "TITLES"]

BROWNIAN_FAMILIES = {"depth": "3a", "training": "3b", "weights": "3c"}
TITLES = {"3a": "Token states move as Brownian motion over depth",
          "3b": "Token states move as Brownian motion over training",
          "3c": "Weights move as Brownian motion over training"}


def _trustworthy(cal: dict | None, verdict: str) -> tuple[bool, str]:
    """Whether the calibration at a file's shape backs `verdict` (module docstring: each verdict is held to its
    own false-positive rate; power is needed only to certify "brownian")."""
    if cal is None:
        return False, "no calibration at this file's shape"
    if cal["size"] > SIZE_GOAL[1]:
        return False, f"calibrated size {cal['size']:.3f} > {SIZE_GOAL[1]}"
    if verdict != "brownian":
        return True, ""
    weak = {p: v for p, v in cal["power"].items() if v < POWER_GOAL}
    if weak:
        return False, "calibrated power " + ", ".join(f"{p} {v:.2f}" for p, v in weak.items()) + f" < {POWER_GOAL}"
    return True, ""


def file_verdict(result: dict, stats, table) -> tuple[str, str, dict | None]:
    """(rule verdict, reason, calibration at the file's shape) of one per-file battery output.

    The rule verdict is rule.decide_one on the stored effects; it is downgraded to "inconclusive" when
    the calibration at the file's exact shape is missing or shows the rule untrustworthy there.
    """
    verdict, reason = decide_one(window_effects(result), kind=result["kind"], margins=dict(stats.margins),
                                 alpha=stats.alpha, n_times=int(result["n_times"]))
    shape = result.get("calibration_shape")
    cal = calibration_for(table, CalibrationShape.from_dict(shape)) if shape and table is not None else None
    ok, why = _trustworthy(cal, verdict)
    if ok and verdict != INCONCLUSIVE:
        ok, why = _window_null_ok(result)
    if verdict != INCONCLUSIVE and not ok:
        return INCONCLUSIVE, f"rule says {verdict!r} but {why}", cal
    return verdict, reason, cal


def _window_null_ok(result: dict) -> tuple[bool, str]:
    """Whether the window exponent's own rule keeps its size at this file's shape: the Clopper-Pearson interval of
    its rate of "outside the margin" on the simulated Brownian motions must not lie above SIZE_GOAL."""
    null = ((result.get("local_slopes") or {}).get("effect") or {}).get("null")
    if not null:
        return True, ""
    from scipy.stats import binomtest
    n = int(null["n_replicates"])
    low = binomtest(int(round(null["size"] * n)), n).proportion_ci(0.95, method="exact").low
    if low > SIZE_GOAL[1]:
        return False, f"the window exponent's size on Brownian motion at this shape is {null['size']:.2f} of {n}"
    return True, ""


def _worst_calibration(cals: list[dict]) -> dict | None:
    """The least favourable calibration among a set of files' shapes (largest size, smallest power)."""
    cals = [c for c in cals if c]
    if not cals:
        return None
    worst = max(cals, key=lambda c: c["size"])
    power = {}
    for c in cals:
        for p, v in c["power"].items():
            power[p] = min(power.get(p, 1.0), v)
    return {"shape": worst["shape"], "size": worst["size"], "size_se": worst["size_se"],
            "equivalence_power": min(c["equivalence_power"] for c in cals), "power": power,
            "n_replicates": min(c["n_replicates"] for c in cals), "n_shapes": len({c["shape"]["id"] for c in cals}),
            "rule": "stats.rule.decide (TOST on the key effects), simulated at each file's exact shape"}


def _exponent(result: dict) -> float:
    """The window exponent (the verdict's MSD effect), or the full-range one for an output without a window."""
    v = (window_effects(result).get("msd_exponent") or result.get("msd_exponent") or {}).get("estimate")
    return float(v) if isinstance(v, (int, float)) else math.nan


def _window_row(result: dict) -> dict:
    """What a claim row shows of a file's window reading (the local-slope curve stays in the per-file JSON)."""
    win = result.get("local_slopes") or {}
    walkers = result.get("walkers") or {}
    return {"classification": result.get("classification"), "window": win.get("classification"),
            "window_description": win.get("description"),
            "ensemble_exponent": (win.get("ensemble_exponent") or {}).get("estimate"),
            "full_range_exponent": (result.get("msd_exponent") or {}).get("estimate"),
            "window_null_size": ((win.get("effect") or {}).get("null") or {}).get("size"),
            "walkers": walkers.get("reading"), "walker_rates": walkers.get("rates")}


def _run_record(key: str, run: str, files: list[dict], stats, table) -> ClaimRecord:
    verdicts, cals, rows = [], [], []
    for f in files:
        v, why, cal = file_verdict(f["result"], stats, table)
        verdicts.append(v)
        cals.append(cal)
        rows.append({"path": f["path"], "verdict": v, "reason": why, "msd_exponent": _exponent(f["result"]),
                     "shape_id": (f["result"].get("calibration_shape") or {}).get("id"), **_window_row(f["result"])})
    n = len(verdicts)
    n_b, n_nb = verdicts.count("brownian"), verdicts.count("not brownian")
    counts = f"{n_b} brownian, {n_nb} not brownian, {n - n_b - n_nb} inconclusive of {n} files"
    if n and n_b == n:
        verdict, reason = SUPPORTED, f"every file certified Brownian ({counts})"
    elif n_nb > n / 2:
        verdict, reason = NOT_SUPPORTED, f"most files certified not Brownian ({counts})"
    else:
        first = next((r["reason"] for r in rows if r["verdict"] != "brownian"), "no files")
        verdict, reason = INCONCLUSIVE, f"{counts}; e.g. {first}"
    est, _ = unit_mean_interval([r["msd_exponent"] for r in rows], stats=stats,
                                name="window MSD exponent (mean over files)")
    classes: dict[str, int] = {}
    for r in rows:
        classes[str(r["classification"])] = classes.get(str(r["classification"]), 0) + 1
    return ClaimRecord(claim=key, title=TITLES[key], verdict=verdict, reason=reason, estimate=est,
                       margin=tuple(stats.margins["msd_exponent"]), calibration=_worst_calibration(cals),
                       details={"files": rows, "n_brownian": n_b, "n_not_brownian": n_nb, "n_files": n,
                                "classifications": classes})


def brownian_family_claim(key: str, files: list[dict], stats, *, calibration=None,
                          excluded: dict | None = None) -> ClaimRecord:
    """Claim `key` ("3a", "3b" or "3c") over runs.

    Args:
        key: the claim id; files: [{"run", "path", "result": per-file battery JSON}] of that family.
        stats: StatsConfig (margins, alpha, confidence level, seed).
        calibration: calibration.parquet path or table (None: every verdict is "inconclusive").
        excluded: run -> reason, the runs that did not train (left out, shown as "did not train").
    """
    from ..run_stats import load_calibration
    excluded = dict(excluded or {})
    table = load_calibration(calibration)
    by_run: dict[str, list] = {}
    for f in files:
        by_run.setdefault(f["run"], []).append(f)
    per_run = {run: (did_not_train_record(key, TITLES[key], excluded[run]) if run in excluded
                     else _run_record(key, run, fs, stats, table)) for run, fs in sorted(by_run.items())}
    verdict, reason, _ = pool_runs(per_run, excluded=excluded)
    if table is None:
        reason += "; no calibration table: no verdict can be 'supported'"
    trained = {r: rec for r, rec in per_run.items() if r not in excluded}
    per_opt: dict[str, dict] = {}
    for run, rec in trained.items():
        parts = run.split("__")
        per_opt.setdefault(parts[1] if len(parts) == 3 else "unknown", {})[run] = rec
    per_optimizer = {}
    for opt, recs in sorted(per_opt.items()):
        v, why, _ = pool_runs(recs, excluded={})
        est, _ = unit_mean_interval([r.estimate.value for r in recs.values() if r.estimate], stats=stats,
                                    name="window MSD exponent (mean over runs)")
        per_optimizer[opt] = ClaimRecord(claim=key, title=TITLES[key], verdict=v, reason=why, estimate=est,
                                         margin=tuple(stats.margins["msd_exponent"]),
                                         calibration=_worst_calibration([r.calibration for r in recs.values()]))
    est, _ = unit_mean_interval([r.estimate.value for r in trained.values() if r.estimate], stats=stats,
                                name="window MSD exponent (mean over runs of the mean over files)")
    kinds = sorted({f["result"].get("kind") for f in files if f["run"] not in excluded} - {None})
    return ClaimRecord(
        claim=key, title=TITLES[key], verdict=verdict, reason=reason, estimate=est,
        margin=tuple(stats.margins["msd_exponent"]),
        calibration=_worst_calibration([r.calibration for r in trained.values()]),
        tests=[{"name": t, "margin": list(stats.margins[MARGIN_KEYS[t]])}
               for k in kinds for t in KEY_EFFECTS[k]],
        per_run=per_run, per_optimizer=per_optimizer,
        details={"p_value": None, "p_value_note": "an equivalence decision over several key effects per file has no "
                 "single p-value; not part of the Holm adjustment", "rule": __doc__.split("\n\n")[1].strip(),
                 "n_runs": len(trained)})
