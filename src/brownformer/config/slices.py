"""The slice of the config each workflow rule reads, written to a file the rule lists among its inputs.

Snakemake reruns a job when one of its inputs is newer than its outputs. The workflow therefore gives
each rule, instead of the whole config, the one slice it reads (``SLICES``): a small JSON file cut from
the validated config (defaults filled in), rewritten only when its content changes. An edit then reruns
exactly the jobs whose slice it changes, and the jobs downstream of them: a ``stats:`` key reruns no
training or extraction; one model's ``d_model`` retrains only that model's runs.

A rule picks its slice with one line in the Snakefile, ``config=config_slice("<kind>")``; a new kind is
one ``Slice`` entry here. A slice must hold every key its rules read (what a rule reads and its slice
does not hold would go stale silently), so the cross-run rules take ``study``, all but scheduling.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from brownformer.config import ExperimentConfig
from brownformer.io import atomic_path

__all__ = ["SLICES", "Slice", "slice_content", "slice_path", "write_slices"]

#: where the slice files live under the results root
SLICE_DIR = "config/slices"


@dataclass(frozen=True)
class Slice:
    """One kind of slice: the wildcard naming its key (None: one slice for the whole config), its keys,
    and how to cut the slice of one key from the config."""

    wildcard: str | None
    keys: Callable[[ExperimentConfig], list[str]]
    cut: Callable[[ExperimentConfig, str | None], dict[str, Any]]


def _datasets(cfg: ExperimentConfig) -> list[str]:
    return sorted({cfg.models[r.model].dataset for r in cfg.runs()})


def _study(cfg: ExperimentConfig, _key: str | None) -> dict[str, Any]:
    # `resources` is scheduling only (threads, memory, runtime), never science (workflow/schemas).
    return {k: v for k, v in cfg.raw.items() if k != "resources"}


SLICES: dict[str, Slice] = {
    # prepare_data: the dataset's own settings
    "dataset": Slice("dataset", _datasets, lambda cfg, name: {"dataset": cfg.raw["datasets"][name]}),
    # train_model, extract_trajectories: what shapes one run (ExperimentConfig.run_slice; its hash is run_hash)
    "run": Slice("run", lambda cfg: [r.run_id for r in (*cfg.runs(), *cfg.replica_runs())],
                 lambda cfg, run: cfg.run_slice(run)),
    # compute_stats, calibrate_tests: the statistics settings (the CLI passes them only StatsConfig)
    "stats": Slice(None, lambda cfg: [""], lambda cfg, _key: {"stats": cfg.raw.get("stats", {})}),
    # analyze_pretrained: what `brownformer pretrained --config` reads (statistics, probe settings and the seed
    # offset that shifts the probe seed) and the model's own block, so a report title reruns no pretrained model
    "pretrained": Slice("name", lambda cfg: sorted(cfg.raw.get("pretrained") or {}),
                        lambda cfg, name: {"stats": cfg.raw.get("stats", {}), "probes": cfg.raw.get("probes", {}),
                                           "seed_offset": cfg.raw.get("seed_offset", 0),
                                           "pretrained": {name: cfg.raw["pretrained"][name]}}),
    # summarize_stats, plot_figures, build_report: every science key (they read the grid, the report settings...)
    "study": Slice(None, lambda cfg: [""], _study),
}


def slice_content(cfg: ExperimentConfig, kind: str, key: str | None = None) -> str:
    """The canonical JSON text of one slice (sorted keys), the same for equal slices."""
    return json.dumps(SLICES[kind].cut(cfg, key or None), sort_keys=True, indent=1, default=str) + "\n"


def slice_path(root: str | Path, kind: str, key: str | None = None) -> Path:
    """The file of slice ``kind`` (and ``key`` for a per-wildcard kind) under the results root."""
    if kind not in SLICES:
        raise KeyError(f"unknown config slice {kind!r}; known: {', '.join(SLICES)}")
    return Path(root) / SLICE_DIR / kind / f"{key or kind}.json"


def write_slices(cfg: ExperimentConfig, root: str | Path) -> dict[tuple[str, str], Path]:
    """Write every slice of ``cfg`` under ``root``; a file whose content is unchanged is left alone (its
    mtime too, so it triggers no rerun). Returns (kind, key) -> path."""
    paths = {}
    for kind, spec in SLICES.items():
        for key in spec.keys(cfg):
            path = slice_path(root, kind, key)
            text = slice_content(cfg, kind, key)
            if not path.is_file() or path.read_text() != text:
                with atomic_path(path) as tmp:
                    tmp.write_text(text)
            paths[kind, key] = path
    return paths
