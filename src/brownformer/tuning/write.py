"""Outputs of the tuning: the config's ``tuned`` block (a YAML file, optionally rewritten in a config
in place) and the tuning table with every trial (markdown and JSON)."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import yaml

from brownformer.config.tuned import tuned_settings
from brownformer.io import atomic_path, to_jsonable
from brownformer.tuning.quasi_random import PROBE_ALPHA

__all__ = ["tuned_block", "block_text", "replace_tuned_block", "write_tuned", "write_tables"]



def _spelled(x):
    """JSON spelling of a score: a number, "inf" (censored: never reached the target), None (undefined)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return "inf" if x == math.inf else x


def _scalar(value) -> str:
    """YAML text of one value that reads back as the same value (PyYAML reads '1e-05' as a string)."""
    text = yaml.safe_dump(value, default_flow_style=True).strip()
    return text[:-3].strip() if text.endswith("...") else text


def tuned_block(results, base: dict | None) -> dict:
    """``base`` (a config's ``tuned`` mapping) with each tuned (model, optimizer) entry updated by its winner."""
    tuned = {m: {o: dict(s) for o, s in per.items()} for m, per in (base or {}).items()}
    for r in results:
        tuned.setdefault(r.model, {}).setdefault(r.optimizer, {}).update(r.best_settings)
    # plain JSON values (a config's parsed betas are a tuple; YAML reads the written pair back as a list)
    return to_jsonable(tuned)


def block_text(tuned: dict, comment: list[str]) -> str:
    """``tuned:`` and one flow-style line per model, the comment lines inside the block (indented)."""
    lines = ["tuned:"] + [f"  # {c}" for c in comment]
    for model, per in tuned.items():
        entries = ", ".join(f"{o}: {{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in s.items()) + "}"
                            for o, s in per.items())
        lines.append(f"  {model}: {{{entries}}}")
    return "\n".join(lines) + "\n"


def replace_tuned_block(config_text: str, block: str) -> str:
    """``config_text`` with its top-level ``tuned:`` block (that line and the indented or blank lines after
    it, trailing blank lines kept) replaced by ``block``; appended when the config has none."""
    lines = config_text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if re.match(r"^tuned\s*:", line)), None)
    if start is None:
        sep = "" if config_text.endswith("\n") or not config_text else "\n"
        return config_text + sep + "\n" + block
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():  # keep the blank lines before the next key
        end -= 1
    return "".join(lines[:start]) + block + "".join(lines[end:])


def _comment(results, source: str, table) -> list[str]:
    pairs = sorted({(r.model, r.optimizer) for r in results})
    models = sorted({m for m, _ in pairs})
    trials = sorted({len(r.trials) for r in results})
    return [f"Written by `brownformer tune` from {source} (last: {', '.join(models)} x "
            f"{', '.join(sorted({o for _, o in pairs}))}; {'/'.join(map(str, trials))} trials per optimizer, selection",
            f"on steps to report.targets); every trial: {table}. Entries no tuning run wrote are kept from before."]


def write_tuned(results, cfg, out, *, into=None, source: str = "config", table="") -> dict:
    """Write the ``tuned:`` block to ``out`` (a YAML file) and, with ``into``, into that config file.

    With ``into`` the block updated is that file's as it reads now (another tuning run may have written
    other pairs meanwhile), else the config's."""
    if into is not None:
        base = (yaml.safe_load(Path(into).read_text()) or {}).get("tuned")
    elif Path(out).exists():  # an earlier pair of the same tuning wrote it
        base = (yaml.safe_load(Path(out).read_text()) or {}).get("tuned")
    else:
        base = tuned_settings(cfg.tuned)
    tuned = tuned_block(results, base)
    block = block_text(tuned, _comment(results, source, table))
    if yaml.safe_load(block)["tuned"] != tuned:  # every value must read back as itself
        raise ValueError("the tuned block does not read back as the tuned settings")
    with atomic_path(out) as tmp:
        tmp.write_text(block)
    if into is not None:
        text = replace_tuned_block(Path(into).read_text(), block)
        with atomic_path(into) as tmp:
            tmp.write_text(text)
    return tuned


def _per_seed(outcome) -> str:
    """Each seed's steps to the target, as the table spells them ("s100: 245; s101: >400")."""
    return "; ".join(f"s{s['seed']}: " + (f"{s['steps']:g}" if s["reached"] else
                     ("diverged" if s["diverged"] else f">{s['steps_run']}")) for s in outcome.seeds)


def _trial_rows(results) -> list[dict]:
    rows = []
    for r in results:
        for n, (index, settings, outcome) in enumerate(r.trials, 1):
            seeds = _per_seed(outcome)
            rows.append({"model": r.model, "optimizer": r.optimizer, "trial": n, **settings,
                         "steps (mean)": outcome.score if outcome.complete else math.nan,
                         "complete": outcome.complete, "per seed (steps to target)": seeds,
                         "metric at stop (mean)": (abs(outcome.tiebreak) if math.isfinite(outcome.tiebreak)
                                                   else math.nan),
                         **({"smoothed score": r.smoothed[n - 1]} if r.smoothed is not None else {}),
                         "chosen": n - 1 == r.best, "seconds": sum(s["seconds"] for s in outcome.seeds),
                         "cpu seconds": sum(s.get("cpu_seconds", math.nan) for s in outcome.seeds),
                         "grid index": list(index)})
    return rows


def _finite(x, default: float) -> float:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else float(default)


def _previous(path: Path, tc) -> dict:
    """What an earlier tuning with the same protocol (seeds, trials, evaluation) wrote into this table's JSON."""
    if not path.exists():
        return {}
    old = json.loads(path.read_text())
    same = (old.get("seeds") == list(tc.seeds) and old.get("trials_per_pair") == tc.trials
            and old.get("eval_every") == tc.eval_every)
    return old if same else {}


def _method_text(tc) -> str:
    if tc.method == "quasi-random":
        return (f"{tc.trials} scrambled-Halton settings per (model, optimizer) in each optimizer's ranges, every "
                "optimizer alike, none stopped early; the winner has the best score smoothed over its 2 nearest "
                "trials (tuning/quasi_random.py), each knob 'inside' its range or on its 'edge'.")
    return (f"up to {tc.trials} trials per (model, optimizer), every optimizer alike (a search ends earlier once its "
            "finest grid adds nothing: the table's 'trials' column); ties: the smaller lr if every seed reached the "
            "target, else the better metric at the end of the budget. A trial stops once it cannot beat the best so "
            "far (incomplete: worse than the winner).")


def _knob_text(k) -> str:
    """A knob as the table states it: its grid step (coordinate search) or its range (quasi-random)."""
    if k.step is None:
        return f"{k.key} [{k.low:g}, {k.high:g}] {k.scale}"
    return f"{k.key} x{k.step:g}" + (" (1 - m)" if k.scale == "complement" else "")


def _probe_rows(results) -> list[dict]:
    """One row per edge probe (tuning/quasi_random.py): the winner's value, the probe's, both scores, the status."""
    rows = []
    for r in results:
        status = {k.key: s for k, s in zip(r.knobs, r.status)}
        for p in r.probes:
            rows.append({"model": r.model, "optimizer": r.optimizer, "knob": p.knob,
                         "winner value": p.winner_value,
                         "probe value": p.value, "probe steps (mean)": _spelled(p.outcome.score),
                         "per seed (steps to target)": _per_seed(p.outcome),
                         "winner smoothed score": r.smoothed[r.best],
                         # the winner's own score beside the smoothed one the status compares with: a probe no
                         # better than this is a flat or worse direction, whatever the status says
                         "winner steps (mean)": _spelled(r.best_outcome.score), "status": status[p.knob]})
    return rows


def write_tables(results, tc, cfg, table, *, source: str, wall_seconds: float, workers: int) -> None:
    """The tuning table: protocol, the chosen setting per pair with its bracket status, every trial.

    Pairs an earlier tuning with the same protocol wrote into the same table, and this one does not
    redo, are kept (so the optimizers may be tuned in separate runs into one table)."""
    table = Path(table)
    old = _previous(table.with_suffix(".json"), tc)
    redone = {(r.model, r.optimizer) for r in results}
    kept = lambda row: (row["model"], row["optimizer"]) not in redone
    rows = [{**row, "steps (mean)": _spelled(row["steps (mean)"]), "seeds": list(o.seeds)}
            for row, o in zip(_trial_rows(results), [o for r in results for _, _, o in r.trials])]
    rows = [r for r in old.get("trials", []) if kept(r)] + rows
    chosen = [c for c in old.get("chosen", []) if kept(c)] + [
        {"model": r.model, "optimizer": r.optimizer, **r.best_settings,
         "steps (mean)": _spelled(r.best_outcome.score), "trials": len(r.trials),
         "knobs": ", ".join(f"{k.key}: {s}" for k, s in zip(r.knobs, r.status)), "search seconds": r.seconds}
        for r in results]
    probes = [p for p in old.get("probes", []) if kept(p)] + _probe_rows(results)
    knobs = {**old.get("knobs", {}), **{o: [_knob_text(k) for k in ks] for o, ks in tc.knobs.items()}}
    targets = {**old.get("targets", {}), **{m: cfg.report.targets[m] for m in tc.models}}
    cpu = sum(_finite(row.get("cpu seconds"), row["seconds"]) for row in rows)
    wall = max(old.get("wall_seconds", 0.0), wall_seconds)
    text = "\n".join([
        f"# Equal-budget tuning ({source})", "",
        f"Command: `brownformer tune --config {source} ...` (rule tune_optimizers); protocol: docs/methods/claim4.md.",
        f"Tuning seeds {list(tc.seeds)} (disjoint from the grid's evaluation seeds); method {tc.method}; "
        + _method_text(tc) + f" Evaluation every {tc.eval_every} steps; target = report.targets "
        f"{targets}; score = restricted mean over the seeds of the steps to the target (a seed that never reaches it "
        "within the budget counts as one evaluation past it).",
        "Knobs: " + "; ".join(f"{o}: {', '.join(k)}" for o, k in knobs.items()) + ".",
        f"Training: {cpu:.0f} CPU-seconds over {len(rows)} trials ({wall:.0f} s wall, {workers} worker(s)).", "",
        "## Chosen settings", "", pd.DataFrame(chosen).to_markdown(index=False, floatfmt=".4g"), "",
        "## Edge probes", "",
        "A winner's knob within 5% of a face of its range, trained again beyond the face (tuning/quasi_random.py): "
        "'edge' if the probe beats the winner's own runs beyond the tuning seeds' noise (paired by seed: mean gain at "
        f"least one evaluation interval and a one-sided paired t-test at {PROBE_ALPHA:.0%}; widen the range), else "
        "'inside'.", "",
        pd.DataFrame(probes).to_markdown(index=False, floatfmt=".4g") if probes else "No winner has a knob near a "
        "face that is not its natural limit.", "",
        "## Every trial", "",
        pd.DataFrame(rows).drop(columns=["grid index", "seeds"]).to_markdown(index=False, floatfmt=".4g"), ""])
    with atomic_path(table) as tmp:
        tmp.write_text(text)
    payload = {"source": source, "seeds": list(tc.seeds), "trials_per_pair": tc.trials, "eval_every": tc.eval_every,
               "targets": targets, "knobs": knobs, "cpu_seconds": cpu, "wall_seconds": wall, "chosen": chosen,
               "probes": probes, "trials": rows}
    with atomic_path(table.with_suffix(".json")) as tmp:
        tmp.write_text(json.dumps(to_jsonable(payload), indent=1))
