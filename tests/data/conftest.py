"""Shared builders for the data tests: a fake CIFAR-10 tarball and dataset configs."""
from __future__ import annotations

import hashlib
import io
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

from brownformer.config import DatasetConfig

FAKE_PER_BATCH = 20  # 5 x 20 = 100 "training" images: enough for a stratified 10-class split
FAKE_TEST = 10


def _batch(n: int, offset: int, rng: np.random.Generator) -> dict:
    # Same layout as the real files (written by Python 2 pickle, protocol 2).
    return {b"batch_label": b"fake batch", b"labels": [int((offset + i) % 10) for i in range(n)],
            b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
            b"filenames": [f"img_{offset + i}.png".encode() for i in range(n)]}


def build_fake_cifar(path: Path, *, seed: int = 0, members: dict | None = None) -> str:
    """Write a small tarball with the official layout to path; return its md5.

    `members` overrides member name -> bytes (to build broken tarballs).
    """
    rng = np.random.default_rng(seed)
    content = {f"cifar-10-batches-py/data_batch_{i}": pickle.dumps(_batch(FAKE_PER_BATCH, i * 100, rng), protocol=2)
               for i in range(1, 6)}
    content["cifar-10-batches-py/test_batch"] = pickle.dumps(_batch(FAKE_TEST, 7, rng), protocol=2)
    content.update(members or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, blob in content.items():
            if blob is None:
                continue
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture
def fake_cifar(tmp_path) -> tuple[Path, str]:
    """(data_dir holding cifar-10-python.tar.gz, its md5)."""
    data_dir = tmp_path / "cifar"
    md5 = build_fake_cifar(data_dir / "cifar-10-python.tar.gz")
    return data_dir, md5


def dataset_cfg(source: str, **kwargs) -> DatasetConfig:
    return DatasetConfig(name=kwargs.pop("name", source), source=source, **kwargs)


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory) -> Path:
    from brownformer.data import prepare_dataset

    out = tmp_path_factory.mktemp("prepared") / "digits"
    prepare_dataset(dataset_cfg("digits"), out)
    return out


@pytest.fixture(scope="session")
def pydoc_dir(tmp_path_factory) -> Path:
    from brownformer.data import prepare_dataset

    out = tmp_path_factory.mktemp("prepared") / "pydoc"
    prepare_dataset(dataset_cfg("pydoc"), out)
    return out
