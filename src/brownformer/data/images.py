"""Image datasets -> standardised float32 (N, C, H, W) splits.

digits: scikit-learn's bundled 1797 handwritten 8x8 digits (pixel values 0..16), split
stratified by class into train/val/test with `split_seed`. cifar10: the official 50,000 training
images split stratified into train/val, the official 10,000 test images as test
(`test_fraction` does not apply). Pixels are scaled to [0, 1], then standardised with the
per-channel mean and (population) std of the train split as used, i.e. after `limit_train`.
"""
from __future__ import annotations

import numpy as np

from . import cifar10

DIGITS_DESCRIPTION = ("scikit-learn load_digits: 1797 real handwritten digits (UCI optdigits test "
                      "set), 8x8 grey levels 0..16, 10 classes")
CIFAR10_DESCRIPTION = ("CIFAR-10 (Krizhevsky 2009), python-version tarball: 32x32 RGB, 10 classes; "
                       "official train split into train/val, official test as test")


def _stratified_split(y: np.ndarray, n_holdout: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (rest, holdout) with class proportions kept; both in shuffled order."""
    idx = np.arange(len(y))
    from sklearn.model_selection import train_test_split  # only to prepare data: every training job imports this module
    rest, held = train_test_split(idx, test_size=n_holdout, stratify=y, random_state=seed, shuffle=True)
    return np.asarray(rest), np.asarray(held)


def _finish(x01: dict[str, np.ndarray], y: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """Standardise with the train split's per-channel statistics; return (splits, stats).

    Statistics are accumulated in float64 one channel at a time and applied in place in float32,
    so that CIFAR-10 needs no full float64 copy.
    """
    train = x01["train"]
    C = train.shape[1]
    mean = np.array([train[:, c].mean(dtype=np.float64) for c in range(C)])  # (C,)
    std = np.array([train[:, c].std(dtype=np.float64) for c in range(C)])  # (C,)
    std = np.where(std > 0, std, 1.0)  # a constant channel stays constant rather than NaN
    splits = {}
    for name, x in x01.items():
        z = x.astype(np.float32, copy=False)  # (N, C, H, W); x is a fresh array, safe to modify
        for c in range(C):
            z[:, c] -= np.float32(mean[c])
            z[:, c] /= np.float32(std[c])
        splits[name] = {"x": z, "y": y[name].astype(np.int64)}
    return splits, {"mean": mean.tolist(), "std": std.tolist()}


def _limit(idx: np.ndarray, limit: int | None) -> np.ndarray:
    return idx if limit is None else idx[:limit]


def digits_splits(*, val_fraction: float, test_fraction: float, split_seed: int,
                  limit_train: int | None = None) -> tuple[dict, dict]:
    """Returns (splits, extra meta) for scikit-learn's digits."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.images / 16.0)[:, None, :, :]  # (1797, 1, 8, 8) in [0, 1]
    y = bunch.target.astype(np.int64)
    N = len(y)
    rest, test = _stratified_split(y, round(N * test_fraction), split_seed)
    train_pos, val_pos = _stratified_split(y[rest], round(N * val_fraction), split_seed)
    index = {"train": _limit(rest[train_pos], limit_train), "val": rest[val_pos], "test": test}
    splits, stats = _finish({k: x[i] for k, i in index.items()}, {k: y[i] for k, i in index.items()})
    meta = {"n_classes": 10, "classes": [str(c) for c in range(10)], "image_shape": [1, 8, 8],
            "augmentation": None, "description": DIGITS_DESCRIPTION,
            "split_method": "stratified random (sklearn train_test_split), test then val",
            **stats}
    return splits, meta


def cifar10_splits(*, data_dir: str | None, download: bool, val_fraction: float, split_seed: int,
                   limit_train: int | None = None) -> tuple[dict, dict]:
    """Returns (splits, extra meta) for CIFAR-10 read from data_dir (see cifar10.load_cifar10)."""
    raw = cifar10.load_cifar10(data_dir, download=download)
    x_all, y_all = raw["train"]
    x_test, y_test = raw["test"]
    train_idx, val_idx = _stratified_split(y_all, round(len(y_all) * val_fraction), split_seed)
    train_idx = _limit(train_idx, limit_train)
    x01 = {"train": x_all[train_idx] / np.float32(255),  # uint8 -> float32 in [0, 1]
           "val": x_all[val_idx] / np.float32(255), "test": x_test / np.float32(255)}
    y = {"train": y_all[train_idx], "val": y_all[val_idx], "test": y_test}
    splits, stats = _finish(x01, y)
    meta = {"n_classes": 10, "classes": list(cifar10.CIFAR10_CLASSES), "image_shape": [3, 32, 32],
            "augmentation": "random crop (pad 4 with black) + horizontal flip",
            "description": CIFAR10_DESCRIPTION,
            "split_method": "stratified random (sklearn train_test_split) of the official train set; "
                            "official test set",
            "tarball_md5": cifar10.CIFAR10_MD5, **stats}
    return splits, meta
