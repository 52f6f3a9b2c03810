"""Reproducibility appendix: config and hash, git state, versions, device, seeds, wall time per stage."""
from __future__ import annotations

import html
import logging

import pandas as pd
import yaml

from brownformer.manifest import git_state, package_versions
from brownformer.report.context import ReportContext
from brownformer.report.markdown import fmt, md_table, setting_text

log = logging.getLogger(__name__)

__all__ = ["appendix", "stage_times", "provenance"]


def provenance(ctx: ReportContext) -> dict:
    """Git state, versions and device recorded by the runs (the first manifest), else measured now."""
    manifests = list(ctx.results.manifests.values())
    runs = {r.run_id for r in ctx.cfg.runs()}
    first = manifests[0] if manifests else None
    return {"git_runs": sorted({str(m.git_sha) for m in manifests}),
            "git_dirty_runs": sorted({str(m.git_dirty) for m in manifests}),
            "git_report": git_state(ctx.config_path.resolve().parent),
            "versions_runs": first.versions if first else {}, "versions_report": package_versions(),
            "device": first.device if first else {},
            "config_hashes": sorted({str(m.config_hash) for m in manifests}),
            # runs trained under other settings than this config gives them (a run a config edit did not
            # touch keeps its manifest, and with it the config hash of the config it was trained under)
            "stale_runs": sorted(run for run, m in ctx.results.manifests.items() if run in runs
                                 and m.run_hash not in (None, ctx.cfg.run_hash(run)))}


def stage_times(ctx: ReportContext) -> pd.DataFrame:
    """Wall time per Snakemake rule from results/benchmarks/<rule>/*.tsv (column s)."""
    b = ctx.results.benchmarks
    if b.empty:
        return b
    g = b.groupby("rule")["s"]
    return pd.DataFrame({"jobs": g.size(), "total s": g.sum(), "max s": g.max()}).reset_index()


def _seeds(ctx: ReportContext) -> pd.DataFrame:
    rows = []
    for spec in ctx.cfg.runs():
        m = ctx.results.manifests.get(spec.run_id)
        rows.append({"run": spec.run_id,
                     "seeds": setting_text(dict(sorted(m.seeds.items()))) if m and m.seeds
                     else "not available",
                     "wall time s": fmt(m.wall_time_s if m else None),
                     "git": ((m.git_sha if m else None) or "n/a")[:12] + ("+dirty" if m and m.git_dirty else "")})
    return pd.DataFrame(rows)


def appendix(ctx: ReportContext) -> str:
    cfg = ctx.cfg
    prov = provenance(ctx)
    g = prov["git_report"]
    versions = {**{k: v for k, v in prov["versions_report"].items()}}
    run_versions = prov["versions_runs"]
    vt = pd.DataFrame([{"package": k, "report": v or "not installed", "training runs": run_versions.get(k, "n/a")}
                       for k, v in versions.items()])
    dev = prov["device"]
    device_text = ", ".join(f"{k}: {v}" for k, v in sorted(dev.items())) if dev else "not available (no run manifest)"
    st = stage_times(ctx)
    hash_note = ("" if not prov["stale_runs"] else
                 f" **Warning:** {', '.join(prov['stale_runs'])} were trained under other settings than this "
                 "config gives them (their recorded run hash differs).")
    config_yaml = yaml.safe_dump(dict(cfg.raw), sort_keys=True)
    return "\n".join([
        "## Appendix: reproducibility", "",
        f"- **Config file:** `{ctx.config_path}`",
        f"- **Config hash (sha256):** `{cfg.hash}`{hash_note}",
        f"- **Git SHA at report time:** `{g.get('sha') or 'not available'}`; **dirty:** `{'not available' if g.get('dirty') is None else g.get('dirty')}`",
        f"- **Git SHA(s) of the training runs:** {', '.join(f'`{s}`' for s in prov['git_runs']) or 'not available'}; "
        f"dirty: {', '.join(prov['git_dirty_runs']) or 'n/a'}",
        f"- **torch:** {versions.get('torch')}; **CUDA:** {versions.get('cuda') or 'none'} "
        f"(runs: torch {run_versions.get('torch', 'n/a')}, CUDA {run_versions.get('cuda') or 'none'})",
        f"- **Device of the runs:** {device_text}",
        f"- **Seeds:** {', '.join(map(str, sorted({r.seed for r in cfg.runs()})))} (data split seed(s): "
        f"{', '.join(sorted({str(d.split_seed) for d in cfg.datasets.values()}))}; probe seed {cfg.probes.seed}; "
        f"statistics seed {cfg.stats.seed})",
        f"- **Seed offset:** {cfg.seed_offset} (added to every seed the runs use: initialisation, data order, "
        "replicas, probe inputs). `snakemake --cores all --config seed_offset=1000` runs the study again on fresh "
        "seeds; `python benchmarks/replication.py --config CONFIG --offsets 0 1000` runs and compares two offsets, "
        "verdict by verdict and interval by interval (`benchmarks/results/replication.md`).", "",
        "### Package versions", md_table(vt), "",
        "### Wall time per stage (Snakemake benchmark files)",
        md_table(st) if not st.empty else "Stage wall times: not available (no results/benchmarks/*/*.tsv).", "",
        "### Runs", md_table(_seeds(ctx)), "",
        "### Configuration (validated, defaults filled in)",
        f"<pre style='font-size:80%'>{html.escape(config_yaml)}</pre>",
    ])
