"""The capture store `results/runs/<R>/probes/`: one .npz per capture point,
`index.parquet` (one row per capture) and `meta.json` (model dims, projections, probe config).

Every file is written atomically (temp file + rename), the npz before its index row, so a crash
leaves at worst an unindexed npz that the resumed run overwrites. Captures are keyed by their
position k in the schedule, which makes a rerun of the same step write the same file.
"""
from __future__ import annotations

import json
import logging
import zipfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from brownformer.io import atomic_path, sha256_file, write_json

log = logging.getLogger(__name__)

__all__ = ["CaptureStore", "INDEX_COLUMNS", "capture_file"]

INDEX_FILE = "index.parquet"
META_FILE = "meta.json"
INDEX_COLUMNS = ("capture", "step", "lr_sum", "lr_sq_sum", "file", "sha256", "has_noise", "seconds", "bytes")


def capture_file(k: int) -> str:
    return f"c{k}.npz"


def _savez(path: Path, arrays: Mapping[str, np.ndarray], *, compress: bool) -> None:
    """np.savez's format (np.load reads it) with a fixed timestamp, so equal arrays give equal bytes
    (and sha256). Uncompressed by default: float16 activations deflate by only ~25% and deflating
    costs about a third of a (noise-free) capture; the default store stays far under 500 MB."""
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method, compresslevel=1 if compress else None, allowZip64=True) as zf:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            with zf.open(info, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asanyarray(array), allow_pickle=False)


class CaptureStore:
    """Read and append to one run's capture store."""

    def __init__(self, root: str | Path, *, compress: bool = False):
        self.root, self.compress = Path(root), compress
        index_path = self.root / INDEX_FILE
        if index_path.exists():
            self.index = pd.read_parquet(index_path).sort_values("capture").reset_index(drop=True)
        else:
            self.index = pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
                INDEX_COLUMNS, ("int64", "int64", "float64", "float64", "str", "str", "bool", "float64", "int64"))})

    @property
    def captured(self) -> set[int]:
        return set(int(k) for k in self.index["capture"])

    def read_meta(self) -> dict | None:
        path = self.root / META_FILE
        return json.loads(path.read_text()) if path.exists() else None

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        write_json(self.root / META_FILE, meta)

    def write_npz(self, k: int, arrays: Mapping[str, np.ndarray]) -> Path:
        """Write c<k>.npz atomically (overwriting an unindexed leftover of a crashed run)."""
        path = self.root / capture_file(k)
        with atomic_path(path) as tmp:
            _savez(tmp, arrays, compress=self.compress)
        return path

    def add_row(self, k: int, row: Mapping[str, Any]) -> dict:
        """Index capture k (its npz must exist), replacing any row of the same capture."""
        path = self.root / capture_file(k)
        full = {**row, "capture": k, "file": path.name, "sha256": sha256_file(path),
                "bytes": path.stat().st_size}
        rest = self.index[self.index["capture"] != k]
        new = pd.DataFrame([{c: full[c] for c in INDEX_COLUMNS}])
        self.index = (new if rest.empty else pd.concat([rest, new], ignore_index=True)) \
            .sort_values("capture").reset_index(drop=True)
        self.write_index()
        return full

    def write_index(self) -> Path:
        """Write index.parquet as it stands: with no captures yet, the empty table a run trained without
        probes leaves (the pipeline declares the file as a training output)."""
        path = self.root / INDEX_FILE
        with atomic_path(path) as tmp:
            self.index.to_parquet(tmp, index=False)
        return path

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.root.iterdir() if p.is_file()) if self.root.exists() else 0

    def load(self, k: int, *, verify: bool = True) -> dict[str, np.ndarray]:
        """All arrays of capture k (one capture in memory), checked against the index's sha256."""
        row = self.index[self.index["capture"] == k]
        if row.empty:
            raise KeyError(f"capture {k} is not in {self.root / INDEX_FILE}")
        path = self.root / row["file"].iloc[0]
        if verify and sha256_file(path) != row["sha256"].iloc[0]:
            raise ValueError(f"{path}: sha256 does not match {INDEX_FILE}; the store is corrupted, rerun training")
        with np.load(path) as npz:
            return {name: npz[name] for name in npz.files}
