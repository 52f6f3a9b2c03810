"""digits: shapes, standardisation, split sizes, determinism."""
import json

import numpy as np
import pytest

from brownformer.data import DataError, load_prepared, prepare_dataset

from .conftest import dataset_cfg

STANDARDISED_ATOL = 1e-5


def test_digits_shapes_and_dtypes(digits_dir):
    data = load_prepared(digits_dir)
    assert data.kind == "image" and data.n_classes == 10 and data.image_shape == (1, 8, 8)
    total = 0
    for split, arrays in data.splits.items():
        assert arrays["x"].dtype == np.float32 and arrays["x"].shape[1:] == (1, 8, 8)
        assert arrays["y"].dtype == np.int64 and arrays["y"].shape == (len(arrays["x"]),)
        assert data.meta["sizes"][split] == len(arrays["y"])
        total += len(arrays["y"])
    assert total == 1797


def test_digits_split_sizes_follow_fractions(tmp_path):
    meta = prepare_dataset(dataset_cfg("digits", val_fraction=0.2, test_fraction=0.1), tmp_path / "d")
    n_val, n_test = round(1797 * 0.2), round(1797 * 0.1)  # 359, 180
    assert meta["sizes"] == {"train": 1797 - n_val - n_test, "val": n_val, "test": n_test}


def test_digits_standardised_with_train_statistics(digits_dir):
    data = load_prepared(digits_dir)
    train = data.splits["train"]["x"].astype(np.float64)
    np.testing.assert_allclose(train.mean(axis=(0, 2, 3)), 0.0, atol=STANDARDISED_ATOL)
    np.testing.assert_allclose(train.std(axis=(0, 2, 3)), 1.0, atol=STANDARDISED_ATOL)
    # Undoing the recorded standardisation gives the original 0..16 grey levels / 16.
    mean, std = np.array(data.meta["mean"]), np.array(data.meta["std"])
    raw = data.splits["test"]["x"] * std[None, :, None, None] + mean[None, :, None, None]
    np.testing.assert_allclose(raw * 16, np.round(raw * 16), atol=1e-4)
    assert raw.min() >= -1e-6 and raw.max() <= 1 + 1e-6


def test_digits_splits_disjoint_and_stratified(digits_dir):
    data = load_prepared(digits_dir)
    rows = {s: {a.tobytes() for a in data.splits[s]["x"]} for s in data.splits}
    # load_digits has a handful of exact duplicate images; splits share at most those.
    assert len(rows["train"] & rows["test"]) <= 5 and len(rows["val"] & rows["test"]) <= 5
    for split in data.splits:
        counts = np.bincount(data.splits[split]["y"], minlength=10)
        assert counts.min() > 0.8 * counts.mean()


def test_digits_deterministic_and_seed_dependent(tmp_path, digits_dir):
    again = prepare_dataset(dataset_cfg("digits"), tmp_path / "again")
    assert again["sha256"] == json.loads((digits_dir / "meta.json").read_text())["sha256"]
    prepare_dataset(dataset_cfg("digits", split_seed=1), tmp_path / "s1")
    other = load_prepared(tmp_path / "s1")
    assert not np.array_equal(other.splits["train"]["y"], load_prepared(digits_dir).splits["train"]["y"])


def test_limit_train_truncates_train_only(tmp_path):
    meta = prepare_dataset(dataset_cfg("digits", limit_train=100), tmp_path / "d")
    assert meta["sizes"] == {"train": 100, "val": 270, "test": 270}
    data = load_prepared(tmp_path / "d")
    np.testing.assert_allclose(data.splits["train"]["x"].mean(), 0.0, atol=STANDARDISED_ATOL)


def test_meta_fields(digits_dir):
    meta = load_prepared(digits_dir).meta
    for key in ("dataset", "source", "kind", "sizes", "sha256", "split_seed", "n_classes",
                "image_shape", "mean", "std", "description"):
        assert key in meta, key
    assert set(meta["sha256"]) == {"train.npz", "val.npz", "test.npz"}


def test_augment_refused_for_digits(tmp_path):
    with pytest.raises(DataError, match="augment"):
        prepare_dataset(dataset_cfg("digits", augment=True), tmp_path / "d")
    assert not (tmp_path / "d").exists()
