"""Compare every output file of two ci-DAG working directories (before / after a refactor).

    python benchmarks/compare_dag_outputs.py /tmp/typed_ref /tmp/typed_after

JSON: parsed, compared value by value, exactly (the paths that differ are listed). Parquet: pandas `equals` per
column. npy/npz: array_equal. PNG: the decoded pixels. pt: torch.load, tensors equal. Text (html, svg, ipynb, md,
yaml, tsv, log): line by line after masking ISO dates/times, hex strings of 7+ characters, the run directories,
column padding and tqdm bars. Prints one line per file that differs and a tally by kind: a difference under a
wall-clock key (VOLATILE), in the two figures drawn against wall-clock seconds, or in numbers only of a text file
(cost tables, logs) is told apart from one marked SCIENCE, which a refactor must not produce.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

#: what is wall-clock (or a path with a random suffix), not science: a differing value under such a key is reported apart
VOLATILE = re.compile(r"wall|seconds|_per_s$|opt_time_|capture_overhead|step_cost|store_mb|^path$|^init$|^traj_dir$")
PROGRESS = re.compile(r"\d+%\|.*it/s")  # a tqdm bar in a log: redrawn on a timer, so its lines differ run to run
NUMBER = re.compile(r"-?\d+(\.\d+)?(e-?\d+)?")
MASKS = [(re.compile(r"\.new-[a-z0-9_]{8}"), ".new-<tmp>"),
         (re.compile(r"(seconds ratio (&gt;|>) ?|step-cost ratio |margin 1 / )[\d.]+"), r"\1<s>"),
         (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(\+\d\d:\d\d|Z)?"), "<time>"),
         (re.compile(r"\b[0-9a-f]{7,64}\b"), "<hash>"),
         # run directories and source copies, also a helper's (/tmp/typed_after_A, /tmp/typedA_snap, /tmp/ref_ci,
         # /tmp/after_fast, /tmp/snap_fast)
         (re.compile(r"/tmp/typed[AB]?_(ref|after|base|snap)(_[AB])?"), "<dir>"),
         (re.compile(r"/tmp/(ref|after|snap)_[A-Za-z0-9]+"), "<dir>"),
         (re.compile(r"[ \u2580-\u259f]+"), " ")]  # column padding, progress-bar blocks


def _volatile(path: str) -> bool:
    return any(VOLATILE.search(k) for k in path.split(".") if not k.isdigit())


def _json_diff(a, b, where=""):
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}{k} (only in one)" for k in set(a) ^ set(b)]
        return out + [p for k in a.keys() & b.keys() for p in _json_diff(a[k], b[k], f"{where}{k}.")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where} (length {len(a)} vs {len(b)})"]
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in _json_diff(x, y, f"{where}{i}.")]
    return [] if a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b) else [where.rstrip(".")]


def _text(p: Path) -> list[str]:
    s = p.read_text(errors="replace")
    for rx, sub in MASKS:
        s = rx.sub(sub, s)
    return [line for line in s.splitlines() if not PROGRESS.search(line)]


def _torch_equal(a, b) -> bool:
    import torch
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_torch_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_torch_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b or (a != a and b != b)


#: figures whose axes are wall-clock seconds (their PNG/SVG and their copies inside the report differ run to run)
WALL_CLOCK_FIGURES = ("training_curves", "time_to_target")


def compare(a: Path, b: Path) -> str | None:
    """None when equal, else what differs."""
    if not b.exists():
        return "missing after"
    suf = "".join(a.suffixes[-1:])
    if suf == ".json":
        diff = _json_diff(json.loads(a.read_text()), json.loads(b.read_text()))
        science = [d for d in diff if not _volatile(d) and not _reason_differs_in_seconds_only(a, b, d)]
        if not diff:
            return None
        return (f"SCIENCE {len(science)} values: {sorted(science)[:6]}" if science else
                f"wall-clock only ({len(diff)} values: {sorted(diff)[:4]})")
    if suf == ".parquet":
        x, y = pd.read_parquet(a), pd.read_parquet(b)
        if list(x.columns) != list(y.columns) or len(x) != len(y):
            return f"shape/columns {x.shape} vs {y.shape}"
        cols = [c for c in x.columns if not x[c].equals(y[c])]
        science = [c for c in cols if not VOLATILE.search(str(c))]
        if not cols:
            return None
        return f"SCIENCE columns differ: {science}" if science else f"wall-clock only (columns {cols})"
    if suf == ".npy":
        return None if np.array_equal(np.load(a, allow_pickle=False), np.load(b, allow_pickle=False), equal_nan=True) else "array"
    if suf == ".npz":
        x, y = np.load(a), np.load(b)
        bad = [k for k in x.files if k not in y.files or not np.array_equal(x[k], y[k], equal_nan=True)]
        return None if not bad and set(x.files) == set(y.files) else f"arrays {bad}"
    if suf == ".png":
        import matplotlib.image as mpimg
        x, y = mpimg.imread(a), mpimg.imread(b)
        if x.shape == y.shape and np.array_equal(x, y):
            return None
        return "pixels of a wall-clock figure" if a.stem in WALL_CLOCK_FIGURES else "SCIENCE pixels"
    if suf == ".svg" and a.stem in WALL_CLOCK_FIGURES and a.read_bytes() != b.read_bytes():
        return "svg of a wall-clock figure"
    if suf == ".pt":
        import torch
        x, y = torch.load(a, weights_only=False), torch.load(b, weights_only=False)

        def strip(ck):
            rows = [{k: v for k, v in r.items() if not VOLATILE.search(k)} for r in ck.get("metrics_rows", [])]
            return {**{k: v for k, v in ck.items() if not VOLATILE.search(k)}, "metrics_rows": rows}
        if _torch_equal(x, y):
            return None
        return "wall-clock only (metrics_rows' timings)" if _torch_equal(strip(x), strip(y)) else "SCIENCE tensors"
    if a.read_bytes() == b.read_bytes():
        return None
    try:
        x, y = _text(a), _text(b)
    except UnicodeDecodeError:
        return "bytes"
    n = sum(1 for u, v in zip(x, y) if u != v) + abs(len(x) - len(y))
    if n == 0:
        return None
    def figure(line):  # a line embedding one of the wall-clock figures (the report's inline images)
        return any(f"fig-{name}" in line for name in WALL_CLOCK_FIGURES)
    beyond = sum(1 for u, v in zip(x, y) if NUMBER.sub("#", u) != NUMBER.sub("#", v) and not figure(u)) \
        + abs(len(x) - len(y))
    return f"{n} lines differ, " + (f"SCIENCE? {beyond} beyond numbers" if beyond else "in numbers only")


def _reason_differs_in_seconds_only(a: Path, b: Path, path: str) -> bool:
    """A text value (claim 4's reason) that differs only in the seconds ratio it quotes."""
    def get(d):
        for k in path.split("."):
            d = d[int(k)] if isinstance(d, list) else d[k]
        return d
    try:
        u, v = get(json.loads(a.read_text())), get(json.loads(b.read_text()))
    except (KeyError, IndexError, TypeError, ValueError):  # a path that is not one value (a list's length)
        return False
    if not (isinstance(u, str) and isinstance(v, str)):
        return False
    rx, sub = MASKS[1]
    return rx.sub(sub, u) == rx.sub(sub, v)


def main(ref: str, after: str) -> None:
    ref_p, after_p = Path(ref), Path(after)
    files = sorted(p for root in ("results", "figures") for p in (ref_p / root).rglob("*") if p.is_file())
    extra = sorted(p.relative_to(after_p) for root in ("results", "figures") for p in (after_p / root).rglob("*")
                   if p.is_file() and not (ref_p / p.relative_to(after_p)).exists())
    bad = {}
    for p in files:
        rel = p.relative_to(ref_p)
        why = compare(p, after_p / rel)
        if why:
            bad[str(rel)] = why
    for rel, why in bad.items():
        print(f"DIFF {rel}: {why}")
    kinds = {}
    for why in bad.values():
        key = "SCIENCE" if "SCIENCE" in why else "numbers-only text" if "numbers only" in why else \
            "wall-clock figure" if "wall-clock figure" in why else "wall-clock only"
        kinds[key] = kinds.get(key, 0) + 1
    print("differences by kind:", kinds)
    for rel in extra:
        print(f"ONLY AFTER {rel}")
    print(f"{len(files)} files compared, {len(files) - len(bad)} equal, {len(bad)} differ, {len(extra)} only after")


if __name__ == "__main__":
    main(*sys.argv[1:3])
