"""CIFAR-10 from the official python-version tarball (Krizhevsky 2009).

The tarball `cifar-10-python.tar.gz` holds `cifar-10-batches-py/data_batch_1..5` (10,000
images each) and `test_batch`, each a pickled dict with b"data" (N, 3072) uint8, rows laid out
as 1024 red, 1024 green, 1024 blue values of a 32x32 image, and b"labels" (N ints in 0..9).

It is read from a user's `data_dir`, and fetched from its canonical address only when the config
says `download: true`. The md5 published on the official page is checked before anything is
unpickled, and the unpickler only accepts the numpy types these files contain, so a wrong file
cannot run code. An existing file is never overwritten.
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
import pickle
import tarfile
import tempfile
import urllib.request
from pathlib import Path

import numpy as np

from .dataset_folder import DataError

log = logging.getLogger(__name__)

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_FILE = "cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"  # from https://www.cs.toronto.edu/~kriz/cifar.html
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer",
                   "dog", "frog", "horse", "ship", "truck")
_MEMBER_DIR = "cifar-10-batches-py"
TRAIN_MEMBERS = tuple(f"{_MEMBER_DIR}/data_batch_{i}" for i in range(1, 6))
TEST_MEMBER = f"{_MEMBER_DIR}/test_batch"

# numpy pickles arrays through these (and protocol-2 pickles bytes through _codecs.encode);
# nothing else may be constructed while unpickling.
_ALLOWED_GLOBALS = {
    ("_codecs", "encode"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
}


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def file_md5(path: str | Path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def _where_to_put_it(path: Path) -> str:
    return (f"download {CIFAR10_URL} and put it at {str(path)!r} (the folder is the dataset's "
            f"`data_dir`), or set `download: true` for this dataset")


def read_cifar10_tarball(path: str | Path, *, expected_md5: str = CIFAR10_MD5
                         ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Verify and read the tarball.

    Args:
        path: the `cifar-10-python.tar.gz` file.
        expected_md5: its md5; the official value by default (tests pass a fake tarball's).

    Returns:
        {"train": (x, y), "test": (x, y)} with x uint8 (N, 3, 32, 32) and y int64 (N,); train
        is the five data batches concatenated in order.

    Raises:
        DataError: if the file is missing, its md5 differs, or its layout is not the one above.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"CIFAR-10 tarball {CIFAR10_FILE!r} not found at {str(path)!r}: {_where_to_put_it(path)}")
    md5 = file_md5(path)
    if md5 != expected_md5:
        raise DataError(f"{str(path)!r} is corrupted or not the CIFAR-10 python version: md5 {md5}, "
                        f"expected {expected_md5}. Delete it, then {_where_to_put_it(path)}")
    try:
        with tarfile.open(path, "r:gz") as tar:
            train = [_read_batch(tar, m) for m in TRAIN_MEMBERS]
            test = _read_batch(tar, TEST_MEMBER)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DataError(f"{str(path)!r} is not a readable gzip tarball ({exc}). "
                        f"Delete it, then {_where_to_put_it(path)}") from None
    x_train = np.concatenate([x for x, _ in train])
    y_train = np.concatenate([y for _, y in train])
    return {"train": (x_train, y_train), "test": test}


def _read_batch(tar: tarfile.TarFile, member: str) -> tuple[np.ndarray, np.ndarray]:
    """One pickled batch -> (x uint8 (N, 3, 32, 32), y int64 (N,))."""
    try:
        fh = tar.extractfile(member)
    except KeyError:
        fh = None
    if fh is None:
        raise DataError(f"CIFAR-10 tarball has no file {member!r}; expected "
                        f"{', '.join(TRAIN_MEMBERS + (TEST_MEMBER,))}")
    try:
        batch = _ArrayUnpickler(io.BytesIO(fh.read()), encoding="bytes").load()
        data = np.asarray(batch[b"data"])
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except (pickle.UnpicklingError, KeyError, TypeError, ValueError, EOFError) as exc:
        raise DataError(f"CIFAR-10 member {member!r} is not a pickled dict with b'data' and "
                        f"b'labels' ({exc!r})") from None
    N = len(labels)
    if data.dtype != np.uint8 or data.shape != (N, 3072) or labels.ndim != 1:
        raise DataError(f"CIFAR-10 member {member!r}: expected data uint8 (N, 3072) and N labels, got "
                        f"data {data.dtype} {data.shape} and labels {labels.shape}")
    if N and (labels.min() < 0 or labels.max() > 9):
        raise DataError(f"CIFAR-10 member {member!r}: labels outside 0..9")
    return data.reshape(N, 3, 32, 32), labels  # (N, C, H, W): rows are R, G, B planes


def download_cifar10(data_dir: str | Path, *, url: str | None = None,
                     expected_md5: str | None = None) -> Path:
    """Fetch the tarball into data_dir, verified, without ever replacing an existing file.

    `url` and `expected_md5` default to CIFAR10_URL and CIFAR10_MD5 (looked up at call time).
    The download goes to a temporary file in data_dir; only after its md5 matches is it linked
    to its final name, which fails (and leaves the existing file) if one appeared meanwhile.

    Raises:
        DataError: on a network error or a checksum mismatch (nothing is left behind).
    """
    url = CIFAR10_URL if url is None else url
    expected_md5 = CIFAR10_MD5 if expected_md5 is None else expected_md5
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    target = data_dir / CIFAR10_FILE
    fd, tmp_name = tempfile.mkstemp(prefix=f".{CIFAR10_FILE}.", suffix=".part", dir=data_dir)
    tmp = Path(tmp_name)
    try:
        log.info("downloading %s to %s", url, target)
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
            while chunk := response.read(1 << 20):
                out.write(chunk)
        md5 = file_md5(tmp)
        if md5 != expected_md5:
            raise DataError(f"downloaded {url} has md5 {md5}, expected {expected_md5}; nothing was "
                            f"written. Download it yourself and put it at {str(target)!r}")
        try:
            os.link(tmp, target)  # unlike rename, never replaces an existing file
        except FileExistsError:
            log.warning("%s appeared during the download; keeping the existing file", target)
        except OSError:  # a filesystem without hard links
            if not target.exists():
                os.rename(tmp, target)
    except OSError as exc:
        raise DataError(f"could not download {url} ({exc}). Download it yourself and put it at "
                        f"{str(target)!r}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return target


def load_cifar10(data_dir: str | Path | None, *, download: bool = False,
                 expected_md5: str | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The public path: find (or, if allowed, fetch) the tarball in data_dir and read it.

    Args:
        data_dir: folder holding `cifar-10-python.tar.gz`.
        download: fetch it from CIFAR10_URL if it is missing.
        expected_md5: None means the official md5 (CIFAR10_MD5, looked up at call time).
    """
    if data_dir is None:
        raise DataError("CIFAR-10 needs `data_dir`: the folder holding (or to receive) "
                        f"{CIFAR10_FILE!r}")
    path = Path(data_dir) / CIFAR10_FILE
    md5 = CIFAR10_MD5 if expected_md5 is None else expected_md5
    if not path.exists() and download:
        download_cifar10(data_dir, url=CIFAR10_URL, expected_md5=md5)
    return read_cifar10_tarball(path, expected_md5=md5)
