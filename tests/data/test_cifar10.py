"""CIFAR-10 loader on a small fake tarball with the official layout."""
import os
import pickle

import numpy as np
import pytest

from brownformer.data import DataError, load_prepared, prepare_dataset
from brownformer.data import cifar10

from .conftest import FAKE_PER_BATCH, FAKE_TEST, build_fake_cifar, dataset_cfg


def test_read_structure_and_sizes(fake_cifar):
    data_dir, md5 = fake_cifar
    raw = cifar10.read_cifar10_tarball(data_dir / cifar10.CIFAR10_FILE, expected_md5=md5)
    x, y = raw["train"]
    assert x.shape == (5 * FAKE_PER_BATCH, 3, 32, 32) and x.dtype == np.uint8
    assert y.shape == (5 * FAKE_PER_BATCH,) and y.dtype == np.int64
    assert raw["test"][0].shape == (FAKE_TEST, 3, 32, 32)
    # Batches are concatenated in order: batch i's labels start at (100 * i) % 10 == 0.
    np.testing.assert_array_equal(y[:FAKE_PER_BATCH], np.arange(FAKE_PER_BATCH) % 10)


def test_channel_layout_is_rgb_planes(tmp_path):
    data_dir = tmp_path / "c"
    md5 = build_fake_cifar(data_dir / cifar10.CIFAR10_FILE)
    raw = cifar10.read_cifar10_tarball(data_dir / cifar10.CIFAR10_FILE, expected_md5=md5)
    rng = np.random.default_rng(0)  # the builder's first batch, drawn the same way
    first = rng.integers(0, 256, size=(FAKE_PER_BATCH, 3072), dtype=np.uint8)
    np.testing.assert_array_equal(raw["train"][0][:FAKE_PER_BATCH, 1].ravel(), first[:, 1024:2048].ravel())


def test_prepare_from_fake_tarball(fake_cifar, tmp_path, monkeypatch):
    data_dir, md5 = fake_cifar
    monkeypatch.setattr(cifar10, "CIFAR10_MD5", md5)  # the public path checks the official md5
    cfg = dataset_cfg("cifar10", data_dir=str(data_dir), val_fraction=0.2, augment=True)
    meta = prepare_dataset(cfg, tmp_path / "out")
    assert meta["sizes"] == {"train": 80, "val": 20, "test": FAKE_TEST}
    assert meta["image_shape"] == [3, 32, 32] and meta["n_classes"] == 10 and meta["augmentation"]
    data = load_prepared(tmp_path / "out")
    train = data.splits["train"]["x"].astype(np.float64)
    np.testing.assert_allclose(train.mean(axis=(0, 2, 3)), 0.0, atol=1e-5)
    np.testing.assert_allclose(train.std(axis=(0, 2, 3)), 1.0, atol=1e-5)
    assert np.bincount(data.splits["val"]["y"], minlength=10).tolist() == [2] * 10  # stratified

    limited = prepare_dataset(dataset_cfg("cifar10", data_dir=str(data_dir), val_fraction=0.2,
                                          limit_train=30), tmp_path / "limited")
    assert limited["sizes"] == {"train": 30, "val": 20, "test": FAKE_TEST}


def test_missing_tarball_error_names_path_and_file(tmp_path):
    data_dir = tmp_path / "empty"
    with pytest.raises(DataError) as err:
        prepare_dataset(dataset_cfg("cifar10", data_dir=str(data_dir)), tmp_path / "out")
    message = str(err.value)
    assert "cifar-10-python.tar.gz" in message and str(data_dir) in message and cifar10.CIFAR10_URL in message
    with pytest.raises(DataError, match="data_dir"):
        prepare_dataset(dataset_cfg("cifar10"), tmp_path / "out")
    assert not (tmp_path / "out").exists() and not data_dir.exists()


def test_bad_checksum_is_refused_and_file_kept(fake_cifar, tmp_path):
    data_dir, _ = fake_cifar  # the public path expects the official md5, which the fake lacks
    before = (data_dir / cifar10.CIFAR10_FILE).read_bytes()
    with pytest.raises(DataError, match="corrupted or not the CIFAR-10 python version"):
        prepare_dataset(dataset_cfg("cifar10", data_dir=str(data_dir), download=True), tmp_path / "out")
    # download: true never replaces an existing file, even a wrong one.
    assert (data_dir / cifar10.CIFAR10_FILE).read_bytes() == before
    assert sorted(os.listdir(data_dir)) == [cifar10.CIFAR10_FILE]


def test_missing_member_and_bad_pickle(tmp_path):
    path = tmp_path / "a" / cifar10.CIFAR10_FILE
    md5 = build_fake_cifar(path, members={"cifar-10-batches-py/data_batch_3": None})
    with pytest.raises(DataError, match="data_batch_3"):
        cifar10.read_cifar10_tarball(path, expected_md5=md5)

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    path = tmp_path / "b" / cifar10.CIFAR10_FILE
    md5 = build_fake_cifar(path, members={"cifar-10-batches-py/test_batch": pickle.dumps(Evil())})
    with pytest.raises(DataError, match="refusing to load"):
        cifar10.read_cifar10_tarball(path, expected_md5=md5)

    path = tmp_path / "c" / cifar10.CIFAR10_FILE
    bad = pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]})
    md5 = build_fake_cifar(path, members={"cifar-10-batches-py/test_batch": bad})
    with pytest.raises(DataError, match=r"uint8 \(N, 3072\)"):
        cifar10.read_cifar10_tarball(path, expected_md5=md5)


def test_download_from_url_verifies_and_never_overwrites(fake_cifar, tmp_path):
    source, md5 = fake_cifar
    url = (source / cifar10.CIFAR10_FILE).resolve().as_uri()  # file:// stands in for the network
    target_dir = tmp_path / "dl"
    target = cifar10.download_cifar10(target_dir, url=url, expected_md5=md5)
    assert target.read_bytes() == (source / cifar10.CIFAR10_FILE).read_bytes()

    target.write_bytes(b"an existing file")  # a second download must leave it alone
    cifar10.download_cifar10(target_dir, url=url, expected_md5=md5)
    assert target.read_bytes() == b"an existing file"
    assert sorted(os.listdir(target_dir)) == [cifar10.CIFAR10_FILE]  # no temporary left behind


def test_download_with_wrong_checksum_leaves_nothing(fake_cifar, tmp_path):
    source, _ = fake_cifar
    url = (source / cifar10.CIFAR10_FILE).resolve().as_uri()
    with pytest.raises(DataError, match="md5"):
        cifar10.download_cifar10(tmp_path / "dl", url=url)  # official md5 expected
    assert os.listdir(tmp_path / "dl") == []


def test_public_download_path(fake_cifar, tmp_path, monkeypatch):
    source, md5 = fake_cifar
    monkeypatch.setattr(cifar10, "CIFAR10_MD5", md5)
    monkeypatch.setattr(cifar10, "CIFAR10_URL", (source / cifar10.CIFAR10_FILE).resolve().as_uri())
    raw = cifar10.load_cifar10(tmp_path / "new", download=True)
    assert raw["train"][0].shape[0] == 5 * FAKE_PER_BATCH
    assert (tmp_path / "new" / cifar10.CIFAR10_FILE).is_file()
