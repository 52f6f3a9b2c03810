"""Read the results tree (docs/ARTIFACTS.md) for the figures and the report: one reader, typed.

Every accessor is read once, lazily. A missing or unreadable input gives an empty table, None
or an empty mapping, and a line in `notes` saying why, so the figures draw an honest "no data"
panel and the report says "not available" instead of crashing or inventing numbers.
claims.json is read only through brownformer.verdicts.read_claims, the per-run statistics only through
brownformer.statsfile (the typed contracts): a file that breaks one is reported in `notes`, never re-interpreted.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from brownformer.config import ExperimentConfig, RunSpec
from brownformer.io import find_sidecar
from brownformer.statsfile import RunStatsFile, RunStatsSummary, parse_stats_file
from brownformer.stats.claims.details import parse_details
from brownformer.verdicts import ClaimsFile, read_claims

log = logging.getLogger(__name__)

__all__ = ["Results", "Manifest", "read_json", "read_parquet", "dig"]


def read_json(path: Path) -> Any | None:
    """Parsed JSON, or None (logged) when the file is missing or not valid JSON."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None


def read_parquet(path: Path) -> pd.DataFrame:
    """The table, or an empty frame (logged) when missing or unreadable."""
    if not Path(path).is_file():
        return pd.DataFrame()
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        log.warning("cannot read %s: %s", path, exc)
        return pd.DataFrame()


def dig(obj: Any, *keys: Any, default: Any = None) -> Any:
    """obj[k1][k2]... or `default` when any step is missing (dicts and lists)."""
    for k in keys:
        try:
            obj = obj[k]
        except (KeyError, IndexError, TypeError):
            return default
        if obj is None:
            return default
    return obj


@dataclass(frozen=True)
class Manifest:
    """The provenance a run recorded in its manifest.json (fields absent there are None or empty)."""
    run_id: str
    config_hash: str | None = None
    run_hash: str | None = None  # hash of the config slice that shaped the run (ExperimentConfig.run_hash)
    git_sha: str | None = None
    git_dirty: bool | None = None
    versions: dict = field(default_factory=dict)
    device: dict = field(default_factory=dict)
    seeds: dict = field(default_factory=dict)
    wall_time_s: float | None = None

    @classmethod
    def from_dict(cls, run_id: str, d: dict) -> Manifest:
        git = d.get("git") if isinstance(d.get("git"), dict) else {}
        wall = d.get("wall_time_s")
        return cls(run_id=run_id, config_hash=d.get("config_hash"), run_hash=d.get("run_hash"), git_sha=git.get("sha"), git_dirty=git.get("dirty"),
                   versions=dict(d.get("versions") or {}), device=dict(d.get("device") or {}),
                   seeds=dict(d.get("seeds") or {}),
                   wall_time_s=float(wall) if isinstance(wall, (int, float)) else None)


@dataclass
class Results:
    """One view of a results folder for one config.

    Attributes:
        cfg: the experiment config (which runs to expect, dataset kinds, report settings).
        root: the results folder.
        notes: why inputs were missing or unreadable (the report lists them under Limitations).
    """

    cfg: ExperimentConfig
    root: Path
    notes: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.root = Path(self.root)

    # ---- runs -----------------------------------------------------------------------------------
    @property
    def runs(self) -> list[RunSpec]:
        """Every run of the grid: metrics and manifests."""
        return self.cfg.runs()

    @property
    def probed_runs(self) -> list[RunSpec]:
        """The runs that capture probes: only these have trajectories and per-run statistics (the others
        are metrics-only, e.g. claim 4's extra seeds)."""
        return self.cfg.probed_runs()

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    @cached_property
    def metrics(self) -> pd.DataFrame:
        """All runs' metrics.parquet stacked, with run, model, optimizer, seed columns."""
        frames = []
        for spec in self.runs:
            df = read_parquet(self.run_dir(spec.run_id) / "metrics.parquet")
            if df.empty:
                self.notes.append(f"{spec.run_id}: metrics.parquet missing or empty")
                continue
            df = df.copy()
            df["run"], df["model"], df["optimizer"], df["seed"] = spec.run_id, spec.model, spec.optimizer, spec.seed
            frames.append(df)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def metrics_by_run(self) -> dict[str, pd.DataFrame]:
        """run id -> that run's metrics (with the run columns), for the claim rules that take this shape."""
        m = self.metrics
        return {} if m.empty else {run: g for run, g in m.groupby("run", sort=True)}

    @cached_property
    def manifests(self) -> dict[str, Manifest]:
        """run id -> Manifest, for the runs that wrote one."""
        out = {}
        for spec in self.runs:
            m = read_json(self.run_dir(spec.run_id) / "manifest.json")
            if isinstance(m, dict):
                out[spec.run_id] = Manifest.from_dict(spec.run_id, m)
        return out

    # ---- per-run statistics and trajectories ----------------------------------------------------
    def run_stats(self, run_id: str, base: Path | None = None) -> dict[str, RunStatsFile]:
        """Every per-file statistics JSON under runs/<run>/stats/ (or `base`) as its brownformer.statsfile type, keyed
        by its path relative to that folder (no suffix); summary.json is `run_summary`. Files that break the contract
        (e.g. written by an older schema) are left out, with one note per run."""
        base = self.run_dir(run_id) / "stats" if base is None else Path(base)
        out: dict[str, RunStatsFile] = {}
        broken = []
        for p in sorted(base.rglob("*.json")) if base.is_dir() else []:
            if p == base / "summary.json":
                continue
            data = read_json(p)
            try:
                if data is not None:
                    out[p.relative_to(base).with_suffix("").as_posix()] = parse_stats_file(data, str(p))
            except ValueError as exc:
                broken.append(str(exc))
        if broken:
            log.warning("%s: %d statistics files break the contract: %s", run_id, len(broken), broken[0])
            self.notes.append(f"{run_id}: {len(broken)} statistics files left out, they break the per-run statistics "
                              f"contract ({broken[0]})")
        return out

    def run_summary(self, run_id: str) -> RunStatsSummary | None:
        """runs/<run>/stats/summary.json through the contract; None (with a note) when missing or malformed."""
        data = read_json(self.run_dir(run_id) / "stats" / "summary.json")
        if data is None:
            return None
        try:
            return RunStatsSummary.from_dict(data, f"{run_id} stats/summary.json")
        except ValueError as exc:
            self.notes.append(str(exc))
            return None

    @cached_property
    def all_run_stats(self) -> dict[str, dict[str, RunStatsFile]]:
        """run id -> `run_stats`, for the probed runs (a metrics-only run has no statistics)."""
        return {spec.run_id: self.run_stats(spec.run_id) for spec in self.probed_runs}

    @cached_property
    def replica_stats(self) -> dict[str, dict[str, RunStatsFile]]:
        """base run id -> the per-file statistics of its replica set (replicas/<run>/stats/: the replica-contrast
        files that decide claims 3b and 3c), for the replica sets of this config."""
        return {base: self.run_stats(base, self.root / "replicas" / base / "stats")
                for base in self.cfg.replica_sets() if (self.root / "replicas" / base / "stats").is_dir()}

    def trajectory_index(self, run_id: str) -> list[dict]:
        """The entries of runs/<run>/trajectories/index.json that name a file (none for a metrics-only run)."""
        if not self.cfg.probed(run_id):
            return []  # even from an earlier config that probed it: figures show the runs the claims use
        idx = read_json(self.run_dir(run_id) / "trajectories" / "index.json")
        files = dig(idx, "files", default=[])
        return [f for f in files if isinstance(f, dict) and "path" in f]

    def trajectory_files(self, run_id: str, category: str) -> list[dict]:
        """Index entries of one category (depth, training, weights, gradnoise, attention), path-sorted."""
        entries = [f for f in self.trajectory_index(run_id) if f.get("category") == category
                   or str(f.get("path", "")).startswith(category + "/")]
        return sorted(entries, key=lambda f: f["path"])

    def load_trajectory(self, run_id: str, rel: str) -> tuple[np.ndarray | None, dict]:
        """(array, sidecar) of runs/<run>/trajectories/<rel>; (None, {}) when unreadable."""
        path = self.run_dir(run_id) / "trajectories" / rel
        try:
            X = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            log.warning("cannot read %s: %s", path, exc)
            return None, {}
        side = find_sidecar(path)
        side = (read_json(side) or {}) if side is not None else {}
        return X, side

    # ---- cross-run statistics -------------------------------------------------------------------
    @cached_property
    def summary(self) -> pd.DataFrame:
        """results/stats/summary.parquet: one row per (run, file, quantity)."""
        return read_parquet(self.root / "stats" / "summary.parquet")

    @cached_property
    def calibration(self) -> pd.DataFrame:
        """results/stats/calibration.parquet: rejection rates of the battery on simulated processes."""
        return read_parquet(self.root / "stats" / "calibration.parquet")

    @cached_property
    def claims(self) -> ClaimsFile | None:
        """claims.json through the typed contract; None (with a note) when missing or malformed."""
        path = self.root / "stats" / "claims.json"
        if not path.is_file():
            self.notes.append("claims.json missing")
            return None
        try:
            return read_claims(path, parse_details=parse_details)
        except (OSError, ValueError, TypeError, KeyError, IndexError) as exc:
            # A file that breaks the contract is reported, never re-interpreted.
            log.warning("claims.json does not follow the verdicts contract: %s", exc)
            self.notes.append(f"claims.json does not follow the verdicts contract ({exc})")
            return None

    @cached_property
    def benchmarks(self) -> pd.DataFrame:
        """Snakemake benchmark files results/benchmarks/<rule>/<job>.tsv: rule, job, s (and the rest)."""
        rows = []
        base = self.root / "benchmarks"
        for p in sorted(base.glob("*/*.tsv")) if base.is_dir() else []:
            try:
                df = pd.read_csv(p, sep="\t")
            except Exception as exc:  # a truncated file must not hide the others
                log.warning("cannot read benchmark %s: %s", p, exc)
                continue
            if df.empty or "s" not in df.columns:
                continue
            row = df.iloc[-1].to_dict()
            row.update(rule=p.parent.name, job=p.stem)
            rows.append(row)
        return pd.DataFrame(rows)

    def chance_baseline(self, dataset: str):
        """The chance level of the prepared dataset data/<dataset> (stats_stage.chance_baseline); None when its files
        are missing or unreadable."""
        from brownformer.stats_stage.chance_baseline import chance_baseline
        try:
            return chance_baseline(self.root / "data" / dataset)
        except ValueError:
            return None

    # ---- anything else under the results folder (e.g. a scaling study's tables) ------------------
    def read_json(self, rel: str) -> Any | None:
        """<root>/<rel> parsed, or None when missing or unreadable."""
        return read_json(self.root / rel)

    def read_table(self, rel: str) -> pd.DataFrame:
        """<root>/<rel> (parquet), or an empty frame when missing or unreadable."""
        return read_parquet(self.root / rel)
