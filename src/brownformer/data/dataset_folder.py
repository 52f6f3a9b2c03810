"""The prepared-data folder: `{train,val,test}.npz` + `meta.json` (docs/ARTIFACTS.md, "Data files").

Writing is atomic at the level that matters: every file is first written into a temporary
folder beside the output folder, and only when all of them exist are they moved in with
`os.replace` (meta.json last). A failure while building or writing therefore leaves an earlier
good output untouched. Reading checks every file's sha256 against meta.json, so a truncated or
edited file is reported instead of silently training on it.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from brownformer.io import sha256_file

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
META_FILE = "meta.json"


class DataError(ValueError):
    """A data problem (missing, corrupted or unusable input); the message says what to do."""


@dataclass(frozen=True)
class PreparedData:
    """One prepared dataset in memory.

    Attributes:
        kind: "image" or "text".
        meta: the parsed meta.json.
        splits: split name -> {"x": array, "y": array (images only)}.
    """
    kind: str
    meta: Mapping[str, Any]
    splits: Mapping[str, Mapping[str, np.ndarray]]

    @property
    def n_classes(self) -> int | None:
        return self.meta.get("n_classes")

    @property
    def vocab_size(self) -> int | None:
        return self.meta.get("vocab_size")

    @property
    def image_shape(self) -> tuple[int, int, int] | None:
        shape = self.meta.get("image_shape")
        return tuple(shape) if shape is not None else None


def _save_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """np.savez's format (uncompressed), but byte-reproducible: np.savez stamps the current time
    into the zip entries, which would change the files' sha256 on every rerun."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, arr in arrays.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with zf.open(info, "w", force_zip64=True) as out:
                np.lib.format.write_array(out, np.asanyarray(arr), allow_pickle=False)


def write_prepared(out_dir: str | Path, splits: Mapping[str, Mapping[str, np.ndarray]],
                   meta: Mapping[str, Any]) -> dict:
    """Write the split files and meta.json atomically; return meta with sizes and sha256 filled in.

    Args:
        out_dir: the dataset folder (created if missing).
        splits: split name -> arrays to store (`x`, and `y` for images), for every name in SPLITS.
        meta: everything meta.json holds except "sizes" and "sha256", which are computed here.

    Returns:
        The meta dict exactly as written to meta.json.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Same parent -> same filesystem, so os.replace is an atomic rename.
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        meta = dict(meta)
        meta["sizes"] = {name: int(len(splits[name]["x"])) for name in SPLITS}
        meta["sha256"] = {}
        for name in SPLITS:
            fname = f"{name}.npz"
            _save_npz(tmp_dir / fname, splits[name])
            meta["sha256"][fname] = sha256_file(tmp_dir / fname)
        with open(tmp_dir / META_FILE, "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
        out_dir.mkdir(exist_ok=True)
        # Old meta.json goes first so that an interruption between moves reads as "incomplete"
        # (new meta.json missing) rather than as a mix of old and new files.
        (out_dir / META_FILE).unlink(missing_ok=True)
        for name in SPLITS:
            os.replace(tmp_dir / f"{name}.npz", out_dir / f"{name}.npz")
        os.replace(tmp_dir / META_FILE, out_dir / META_FILE)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    log.info("wrote %s: sizes %s", out_dir, meta["sizes"])
    return meta


def load_prepared(data_dir: str | Path, *, verify: bool = True) -> PreparedData:
    """Read a folder written by `prepare_dataset`.

    Args:
        data_dir: the dataset folder (e.g. results/data/digits).
        verify: check every split file's sha256 against meta.json.

    Raises:
        DataError: naming the missing file, or the file whose checksum does not match.
    """
    data_dir = Path(data_dir)
    hint = f"rerun `brownformer data` for {str(data_dir)!r}"
    meta_path = data_dir / META_FILE
    if not meta_path.is_file():
        raise DataError(f"prepared data incomplete: {str(meta_path)!r} is missing; {hint}")
    try:
        with open(meta_path, encoding="utf-8") as fh:
            meta = json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{str(meta_path)!r} is not valid JSON ({exc}); {hint}") from None
    splits: dict[str, dict[str, np.ndarray]] = {}
    for name in SPLITS:
        path = data_dir / f"{name}.npz"
        if not path.is_file():
            raise DataError(f"prepared data incomplete: {str(path)!r} is missing; {hint}")
        if verify:
            expected = meta.get("sha256", {}).get(path.name)
            actual = sha256_file(path)
            if actual != expected:
                raise DataError(f"{str(path)!r} is corrupted: sha256 {actual} does not match "
                                f"{expected} recorded in meta.json; {hint}")
        try:
            with np.load(path, allow_pickle=False) as npz:
                splits[name] = {key: npz[key] for key in npz.files}
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
            raise DataError(f"{str(path)!r} cannot be read ({exc}); {hint}") from None
    return PreparedData(kind=meta["kind"], meta=meta, splits=splits)
