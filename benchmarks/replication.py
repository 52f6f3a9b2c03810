"""Replication on fresh seeds: the study at two seed offsets, each claim's verdict and interval side by side.

    python benchmarks/replication.py --config config/config.yaml --offsets 0 1000 --cores 2 \
        --out benchmarks/results/replication.md

Each offset runs the workflow up to claims.json (`snakemake <results>/stats/claims.json`) with the config's
`seed_offset` set and its own output roots (`<root>/offset_<k>/results`, `.../figures`), so the two studies
share nothing but the config. Then two tables: per claim both verdicts and whether they agree; per claim (and per
model variant, where the claim pools several) both deciding estimates with 95% intervals, the seeds each interval
is over, and whether the intervals overlap (issue 32: verdicts agree and intervals overlap). The default config
takes each offset its full pipeline time (docs/methods/seeds.md: about 18 minutes of 2 idle cores up to the
report; claims.json comes a few minutes earlier); the file records each offset's wall-clock.
`--compare-only` reads the two claims files of an earlier run again.
"""
from __future__ import annotations

import argparse
import copy
import math
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

from brownformer.verdicts import ClaimsFile, read_claims

ROOT = Path(__file__).resolve().parents[1]


def offset_config(raw: dict, offset: int, root: Path) -> dict:
    """The config at one seed offset, writing under root/offset_<offset>."""
    raw = copy.deepcopy(raw)
    raw["seed_offset"] = offset
    raw["paths"] = {"results": str(root / f"offset_{offset}" / "results"),
                    "figures": str(root / f"offset_{offset}" / "figures")}
    return raw


def run_offset(raw: dict, offset: int, root: Path, cores: str, *, dry_run: bool = False) -> Path:
    """Run the workflow up to claims.json at `offset` (only plan it: `dry_run`); returns the claims file."""
    cfg = offset_config(raw, offset, root)
    config = root / f"offset_{offset}" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    claims = Path(cfg["paths"]["results"]) / "stats" / "claims.json"
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "workflow" / "Snakefile"),
           "--directory", str(ROOT), "--cores", cores, *(["-n"] if dry_run else []), str(claims),
           "--configfile", str(config)]
    subprocess.run(cmd, check=True, cwd=ROOT)
    return claims


def _interval(record) -> tuple[float, float] | None:
    est = record.estimate if record is not None else None
    if est is None or any(math.isnan(x) for x in est.confidence_interval):  # an open end (inf) still compares
        return None
    return tuple(est.confidence_interval)


def _spelled(record) -> str:
    if record is None or record.estimate is None:
        return "-"
    est = record.estimate
    lo, hi = est.confidence_interval
    return f"{est.name} {est.estimate:.3g} [{lo:.3g}, {hi:.3g}]"


def _seeds(record) -> str:
    """The seeds the record's interval is over: per deciding configuration (claims.json `seeds.n_seeds`)."""
    if record is None or record.seeds is None or not record.seeds.n_seeds:
        return "-"
    counts = record.seeds.n_seeds
    return str(next(iter(counts.values()))) if len(set(counts.values())) == 1 and len(counts) == 1 else \
        ", ".join(f"{k}: {n}" for k, n in sorted(counts.items()))


def _model_seeds(record, model: str) -> str:
    """A model variant's seed count, from its claim's `seeds.n_seeds` (its own record carries none)."""
    n = record.seeds.n_seeds.get(model) if record is not None and record.seeds is not None else None
    return "-" if n is None else str(n)


def _row(label: str, a, b, offsets: tuple[int, int], seeds: tuple[str, str] | None = None) -> dict:
    ia, ib = _interval(a), _interval(b)
    overlap = None if ia is None or ib is None else max(ia[0], ib[0]) <= min(ia[1], ib[1])
    return {"claim": label,
            f"verdict (offset {offsets[0]})": a.verdict if a else "-",
            f"estimate [95% CI] (offset {offsets[0]})": _spelled(a),
            f"seeds (offset {offsets[0]})": seeds[0] if seeds else _seeds(a),
            f"verdict (offset {offsets[1]})": b.verdict if b else "-",
            f"estimate [95% CI] (offset {offsets[1]})": _spelled(b),
            f"seeds (offset {offsets[1]})": seeds[1] if seeds else _seeds(b),
            "verdicts agree": bool(a and b and a.verdict == b.verdict),
            "intervals overlap": "-" if overlap is None else overlap}


def compare(first: ClaimsFile, second: ClaimsFile, offsets: tuple[int, int]) -> pd.DataFrame:
    """Per claim (of either file): both verdicts, estimates and seed counts, whether the verdicts agree and the
    intervals overlap; then a row per model variant of a claim that pools several ("claim / model")."""
    rows = []
    for claim in sorted(set(first.claims) | set(second.claims)):
        a, b = first.claims.get(claim), second.claims.get(claim)
        rows.append(_row(claim, a, b, offsets))
        models = sorted(set(a.per_model if a else {}) | set(b.per_model if b else {}))
        rows += [_row(f"{claim} / {m}", a.per_model.get(m) if a else None, b.per_model.get(m) if b else None,
                      offsets, (_model_seeds(a, m), _model_seeds(b, m))) for m in models if len(models) > 1]
    return pd.DataFrame(rows)


def report(table: pd.DataFrame, config: str, offsets: tuple[int, int], wall_s: dict | None = None) -> str:
    """Markdown: the verdicts table and the intervals table (rows "claim / model": per model variant)."""
    claims = table[~table["claim"].str.contains(" / ")]
    agree = bool(claims["verdicts agree"].all())
    overlap = all(v is True or v == "-" for v in claims["intervals overlap"])
    verdicts = claims[["claim", *(f"verdict (offset {k})" for k in offsets), "verdicts agree"]]
    intervals = table[["claim", *(f"{c} (offset {k})" for k in offsets for c in ("estimate [95% CI]", "seeds")),
                       "intervals overlap"]]
    took = "" if not wall_s else " Wall-clock: " + ", ".join(
        f"offset {k} {s / 60:.1f} min" for k, s in wall_s.items()) + "."
    return "\n".join([
        "# Replication on fresh seeds (benchmarks/replication.py)", "",
        f"`python benchmarks/replication.py --config {config} --offsets {offsets[0]} {offsets[1]}`: the workflow up to "
        "claims.json at each `seed_offset` (every seed the runs use shifted: initialisation, data order, replicas, "
        f"probe inputs; the tuned settings kept), in its own results folder.{took}", "",
        "## Verdicts", "", verdicts.to_markdown(index=False), "",
        "## Intervals (rows `claim / model`: the claim's estimate on one model variant)", "",
        intervals.to_markdown(index=False), "",
        f"Every verdict agrees: {'yes' if agree else 'NO'}. Every pair of intervals overlaps: "
        f"{'yes' if overlap else 'NO'} ('-': a claim without an interval in one of the runs).", ""])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--offsets", type=int, nargs=2, default=[0, 1000])
    p.add_argument("--root", type=Path, default=ROOT / "results" / "replication", help="output roots per offset")
    p.add_argument("--cores", default="all")
    p.add_argument("--compare-only", action="store_true", help="compare the claims files of an earlier run")
    p.add_argument("--dry-run", action="store_true", help="plan both runs (snakemake -n), compare nothing")
    p.add_argument("--out", default="benchmarks/results/replication.md")
    args = p.parse_args(argv)
    raw = yaml.safe_load(Path(args.config).read_text())
    offsets = tuple(args.offsets)
    files, wall_s = [], {}
    for offset in offsets:
        claims = Path(offset_config(raw, offset, args.root)["paths"]["results"]) / "stats" / "claims.json"
        start = time.perf_counter()
        files.append(claims if args.compare_only else run_offset(raw, offset, args.root, args.cores,
                                                                 dry_run=args.dry_run))
        if not args.compare_only:
            wall_s[offset] = time.perf_counter() - start
    if args.dry_run:
        return 0
    table = compare(read_claims(files[0]), read_claims(files[1]), offsets)
    text = report(table, args.config, offsets, wall_s)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
