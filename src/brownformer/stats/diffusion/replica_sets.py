"""Claims 3b and 3c over replicas of the training noise: which files decide, and how they are keyed.

All probe inputs of one run follow one training path, so an interval over inputs is conditional on that path.
A replica set (runs from one initialisation with other data orders; probes/replicas.py) gives contrast
trajectories whose groups are independent replica contrasts: the battery's cluster bootstrap then resamples
replicas, the unit of replication of the training noise, and the drift (the replica-mean path) is gone before
any statistic is computed. So wherever a family (training: 3b, weights: 3c) has replica files, those decide it
and the single-path files of every run are reported as description only (not calibrated, not pooled); a
config without replicas keeps the single-path decision, labelled as conditional on one path.
"""
from __future__ import annotations

from brownformer.statsfile import SummaryRow

__all__ = ["REPLICA_SET_SUFFIX", "REPLICA_FAMILIES", "replica_set_key", "base_run", "is_replica_file",
           "split_by_unit", "calibrated_files"]

#: a replica set's statistics are keyed "<base run>__replicas" beside the base run's own (results/replicas/<base>)
REPLICA_SET_SUFFIX = "__replicas"
#: the battery categories replicas decide (claims 3b and 3c); depth (3a) is a function of one input, not of noise
REPLICA_FAMILIES = ("training", "weights")


def replica_set_key(base: str) -> str:
    """The key of a replica set's statistics among the runs' (`base` is the grid run of replica 0)."""
    return f"{base}{REPLICA_SET_SUFFIX}"


def base_run(key: str) -> str:
    """The grid run a statistics key belongs to: the base run of a replica set, else the key itself."""
    return key[: -len(REPLICA_SET_SUFFIX)] if key.endswith(REPLICA_SET_SUFFIX) else key


def is_replica_file(entry_or_row: dict) -> bool:
    """Whether a trajectory file (its index.json entry, stats-summary row or per-file result) holds replica contrasts."""
    entry = entry_or_row.get("entry") if isinstance(entry_or_row.get("entry"), dict) else entry_or_row
    return entry.get("unit") == "replica"


def split_by_unit(category: str, files: list[dict]) -> tuple[list[dict], list[dict]]:
    """(deciding files, descriptive files) of one claim family.

    files are [{"run", "path", "result"}] (stats_stage/summary.py). For 3b/3c with any replica file the deciding files are
    the replica files, re-keyed to their base run; the single-path files are descriptive. Otherwise all files decide.
    """
    reps = [f for f in files if is_replica_file(f["result"])]
    if category not in REPLICA_FAMILIES or not reps:
        return list(files), []
    single = [f for f in files if not is_replica_file(f["result"])]
    return [{**f, "run": base_run(f["run"])} for f in reps], single


def calibrated_files(rows: list[SummaryRow]) -> list[SummaryRow]:
    """The stats-summary rows whose shapes the calibration simulates: all, except single-path training/weights files
    when replica files of that family exist (those families are decided on replicas; `split_by_unit`)."""
    with_replicas = {r.category for r in rows if r.unit == "replica"}
    return [r for r in rows if r.unit == "replica" or r.category not in with_replicas
            or r.category not in REPLICA_FAMILIES]
