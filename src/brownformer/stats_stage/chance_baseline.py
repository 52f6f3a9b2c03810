"""The chance level of a prepared dataset's val split, read from its files (rules 2 and 3 of
brownformer.stats.core.training_status, which decides with it)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from brownformer.stats.core.training_status import CHANCE_SE_MULTIPLE, ChanceBaseline

__all__ = ["chance_baseline"]


def _load_split(data_dir: Path, split: str) -> dict:
    path = data_dir / f"{split}.npz"
    if not path.exists():
        raise ValueError(f"{path} does not exist (prepare the dataset first)")
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def chance_baseline(data_dir: str | Path) -> ChanceBaseline:
    """The chance level of a prepared dataset's val split (module docstring, rules 2 and 3).

    Raises:
        ValueError: missing or unreadable meta.json / split files.
    """
    data_dir = Path(data_dir)
    meta_path = data_dir / "meta.json"
    if not meta_path.exists():
        raise ValueError(f"{meta_path} does not exist (prepare the dataset first)")
    meta = json.loads(meta_path.read_text())
    val = _load_split(data_dir, "val")
    if "y" in val:  # images: labels
        y = val["y"].astype(np.int64).ravel()
        if y.size == 0:
            raise ValueError(f"{data_dir}: empty val split")
        c = float(np.bincount(y).max() / y.size)
        return ChanceBaseline("val_accuracy", c, CHANCE_SE_MULTIPLE * math.sqrt(c * (1 - c) / y.size),
                              f"majority-class accuracy of the val split ({meta.get('n_classes')} classes, "
                              f"n_val={y.size}); margin {CHANCE_SE_MULTIPLE:g} binomial SEs")
    x_train, x_val = _load_split(data_dir, "train")["x"].ravel(), val["x"].ravel()
    V = int(meta.get("vocab_size") or max(x_train.max(), x_val.max()) + 1)
    p = (np.bincount(x_train, minlength=V) + 1.0) / (x_train.size + V)  # add-one: unseen val chars stay finite
    bits = -np.log2(p[x_val])
    se = float(bits.std(ddof=1)) / math.sqrt(bits.size)
    return ChanceBaseline("val_bpc", float(bits.mean()), CHANCE_SE_MULTIPLE * se,
                          f"unigram cross-entropy of the val stream under the train split's add-one unigram law "
                          f"(n_val={bits.size}); margin {CHANCE_SE_MULTIPLE:g} SEs")
