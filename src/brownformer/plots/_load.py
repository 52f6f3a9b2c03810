"""Read the results tree (docs/ARTIFACTS.md) defensively for figures and the report.

Every reader returns an empty table or None when its input is missing or unreadable and logs
why; the figures then draw an annotated "no data" panel instead of crashing or inventing numbers.
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

log = logging.getLogger(__name__)

__all__ = ["Results", "read_json", "read_parquet", "dig"]


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


def _finite(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if np.isfinite(v) else None


@dataclass
class Results:
    """One view of a results folder for one config; properties are read once, lazily."""

    cfg: ExperimentConfig
    root: Path
    notes: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.root = Path(self.root)

    @property
    def runs(self) -> list[RunSpec]:
        return self.cfg.runs()

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def dataset_kind(self, model: str) -> str:
        """'image' or 'text', from the model's dataset source."""
        return "text" if self.cfg.dataset_of(model).source in ("pydoc", "textfile") else "image"

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

    @cached_property
    def manifests(self) -> dict[str, dict]:
        out = {}
        for spec in self.runs:
            m = read_json(self.run_dir(spec.run_id) / "manifest.json")
            if isinstance(m, dict):
                out[spec.run_id] = m
        return out

    def run_stats(self, run_id: str) -> dict[str, Any]:
        """Every JSON under runs/<run>/stats/, keyed by its path relative to that folder (no suffix)."""
        base = self.run_dir(run_id) / "stats"
        out: dict[str, Any] = {}
        if base.is_dir():
            for p in sorted(base.rglob("*.json")):
                data = read_json(p)
                if data is not None:
                    out[p.relative_to(base).with_suffix("").as_posix()] = data
        return out

    @cached_property
    def all_run_stats(self) -> dict[str, dict[str, Any]]:
        return {spec.run_id: self.run_stats(spec.run_id) for spec in self.runs}

    def trajectory_index(self, run_id: str) -> list[dict]:
        idx = read_json(self.run_dir(run_id) / "trajectories" / "index.json")
        files = dig(idx, "files", default=[])
        return [f for f in files if isinstance(f, dict) and "path" in f]

    def load_trajectory(self, run_id: str, rel: str) -> tuple[np.ndarray | None, dict]:
        """(array, sidecar) of runs/<run>/trajectories/<rel>; (None, {}) when unreadable."""
        path = self.run_dir(run_id) / "trajectories" / rel
        try:
            X = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            log.warning("cannot read %s: %s", path, exc)
            return None, {}
        side = read_json(path.with_suffix(".json")) or {}
        return X, side

    @cached_property
    def summary(self) -> pd.DataFrame:
        return read_parquet(self.root / "stats" / "summary.parquet")

    @cached_property
    def calibration(self) -> pd.DataFrame:
        return read_parquet(self.root / "stats" / "calibration.parquet")

    @cached_property
    def claims(self) -> Any | None:
        return read_json(self.root / "stats" / "claims.json")

    @cached_property
    def benchmarks(self) -> pd.DataFrame:
        """Snakemake benchmark files results/benchmarks/<rule>/<job>.tsv: rule, job, s (and the rest)."""
        rows = []
        base = self.root / "benchmarks"
        for p in sorted(base.glob("*/*.tsv")) if base.is_dir() else []:
            try:
                df = pd.read_csv(p, sep="\t")
            except Exception as exc:
                log.warning("cannot read benchmark %s: %s", p, exc)
                continue
            if df.empty or "s" not in df.columns:
                continue
            row = df.iloc[-1].to_dict()
            row.update(rule=p.parent.name, job=p.stem)
            rows.append(row)
        return pd.DataFrame(rows)
