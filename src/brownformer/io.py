"""Atomic file writes (temp file in the same folder + os.replace) and file hashing.

A crash or a bad input never leaves a half-written output behind, and earlier results stay intact.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

__all__ = ["atomic_path", "write_json", "write_bytes", "sha256_file", "to_jsonable", "progress", "SIDECAR_SUFFIX",
           "sidecar_path", "find_sidecar"]

log = logging.getLogger(__name__)

#: a trajectory FILE.npy's sidecar is FILE.sidecar.json: never the FILE.json a user (or `stats trajectory --out`)
#: writes beside it, which the next run would read as the sidecar (docs/ARTIFACTS.md)
SIDECAR_SUFFIX = ".sidecar.json"


def sidecar_path(array: str | Path) -> Path:
    """Where the sidecar of the array FILE.npy is written: FILE.sidecar.json."""
    return Path(array).with_suffix(SIDECAR_SUFFIX)


def find_sidecar(array: str | Path) -> Path | None:
    """The sidecar of FILE.npy that exists: FILE.sidecar.json, else the old FILE.json (with a warning), else None.

    An old-name FILE.json that is a statistics output (it has "schema_version", which no sidecar has: what
    `brownformer stats trajectory FILE.npy --out FILE.json` wrote before) is not a sidecar.
    """
    new, old = sidecar_path(array), Path(array).with_suffix(".json")
    if new.exists():
        return new
    if old.exists():
        try:
            stats_output = "schema_version" in (json.loads(old.read_text()) or {})
        except (OSError, ValueError, TypeError):
            stats_output = False  # the reader reports what is wrong with it
        if stats_output:
            log.info("%s is a statistics output, not the sidecar of %s", old, Path(array).name)
            return None
        log.warning("%s: read as the sidecar of %s (old name; sidecars are now %s)", old,
                                            Path(array).name, new.name)
        return old
    return None


@contextmanager
def atomic_path(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix or path.suffix, dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o644)  # mkstemp creates 0600; outputs are meant to be shared
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def staged_folder(out: str | Path, *, merge: bool = False, last: str | None = None) -> Iterator[Path]:
    """A staging folder beside ``out`` that takes effect only if the block succeeds (earlier results stay intact).

    ``merge=False``: the staging folder replaces ``out`` whole. ``merge=True``: each of its entries replaces the
    same-named entry of ``out`` (other entries stay), the entry named ``last`` moved last (the completion marker).
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        yield tmp
        if merge:
            out.mkdir(exist_ok=True)
            for child in sorted(tmp.iterdir(), key=lambda p: p.name == last):
                target = out / child.name
                if target.is_dir():
                    shutil.rmtree(target)
                os.replace(child, target)
        else:
            old = None
            if out.exists():  # moved aside first: os.replace cannot overwrite a non-empty folder
                old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
                os.rmdir(old)
                os.replace(out, old)
            os.replace(tmp, out)
            if old is not None:
                shutil.rmtree(old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


#: types to_jsonable returns as they are
_PLAIN = frozenset({str, int, bool, type(None)})


#: how to_jsonable writes an infinite float: "null" (the default: JSON has no infinity) or "string" ("inf"/"-inf")
INFINITY_FORMS = ("null", "string")


def to_jsonable(obj: Any, *, infinity: str = "null") -> Any:
    """Plain-JSON view of result objects (through their `to_dict()`), numpy scalars/arrays, tuples, paths; NaN
    becomes None. The package's one JSON converter: every writer and every `to_dict` goes through it.

    Args:
        infinity: how an infinite float is written (INFINITY_FORMS): "null" (the default, like NaN) or "string"
            ("inf"/"-inf": claim 4's interval ends and medians the data cannot bound, which a reader must tell
            from undefined ones, stats/claims/comparison_records.py).
    """
    # the plain types first, by exact type: a stats file holds ~10^5 of them, and hasattr on each was most of the cost
    kind = type(obj)
    if kind is float:
        return obj if math.isfinite(obj) else _non_finite(obj, infinity)
    if infinity not in INFINITY_FORMS:
        raise ValueError(f"to_jsonable: infinity={infinity!r} is not one of {INFINITY_FORMS}")
    if kind in _PLAIN:
        return obj
    import numpy as np

    if (kind is not dict and kind is not list and kind is not tuple and hasattr(obj, "to_dict")
            and callable(obj.to_dict) and not isinstance(obj, type)):
        return to_jsonable(obj.to_dict(), infinity=infinity)
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v, infinity=infinity) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v, infinity=infinity) for v in obj]
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "biu" or (obj.dtype.kind == "f" and np.isfinite(obj).all()):
            return obj.tolist()  # Python numbers, none of them NaN or inf: what the element-wise pass returns
        return to_jsonable(obj.tolist(), infinity=infinity)
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else _non_finite(float(obj), infinity)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _non_finite(x: float, infinity: str) -> str | None:
    """NaN as None; an infinity as None or, with infinity="string", as "inf"/"-inf"."""
    if infinity not in INFINITY_FORMS:
        raise ValueError(f"to_jsonable: infinity={infinity!r} is not one of {INFINITY_FORMS}")
    if math.isnan(x) or infinity == "null":
        return None
    return "inf" if x > 0 else "-inf"


def write_json(path: str | Path, data: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(to_jsonable(data), indent=2, sort_keys=False, allow_nan=False) + "\n")


def write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def progress(iterable, *, desc: str, total: int | None = None):
    """A tqdm progress bar over `iterable` when stderr is a terminal; the bare iterable otherwise (under Snakemake
    stderr goes to the rule's log, which gets plain log lines instead)."""
    import sys

    if not sys.stderr.isatty():
        return iterable
    from tqdm.auto import tqdm
    return tqdm(iterable, desc=desc, total=total, mininterval=1)
