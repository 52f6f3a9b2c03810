"""The appendix's provenance: a run trained under other settings than the config gives it is named."""
from __future__ import annotations

import json
from pathlib import Path

from brownformer.config import from_dict
from brownformer.report.context import ReportContext
from brownformer.report.section_appendix import provenance
from brownformer.results import Results


def _context(tmp_path: Path, cfg, run_hashes: dict[str, str]) -> ReportContext:
    for run, run_hash in run_hashes.items():
        path = tmp_path / "results" / "runs" / run / "manifest.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"run_id": run, "config_hash": "a config edited since", "run_hash": run_hash}))
    return ReportContext(cfg, tmp_path / "config.yaml", Results(cfg, tmp_path / "results"), tmp_path / "figures")


def test_only_runs_whose_run_hash_differs_are_stale(tmp_path, raw_config):
    cfg = from_dict(raw_config)
    fresh, stale = [r.run_id for r in cfg.runs()][:2]
    ctx = _context(tmp_path, cfg, {fresh: cfg.run_hash(fresh), stale: "trained under another model width"})
    assert provenance(ctx)["stale_runs"] == [stale]


def test_the_appendix_states_the_seed_offset_the_study_ran_at(tmp_path, raw_config):
    from brownformer.report.section_appendix import appendix
    for offset in (0, 1000):
        cfg = from_dict({**raw_config, "seed_offset": offset})
        text = appendix(_context(tmp_path / str(offset), cfg, {}))
        assert f"**Seed offset:** {offset} " in text and "benchmarks/results/replication.md" in text
