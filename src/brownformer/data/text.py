"""Character-level text datasets -> int64 token streams.

pydoc: the English help texts that ship with CPython (`pydoc_data.topics.topics`, a dict
topic -> text), joined with newlines in sorted key order so that the corpus is a deterministic
function of the Python version (recorded in meta). textfile: any local UTF-8 file.

The vocabulary is the sorted set of characters of the whole corpus (token id = position in
meta["vocab"]), so val/test never hold unknown characters. The split is contiguous and
deterministic (no seed): the first 1 - val_fraction - test_fraction of the characters are train,
then val, then test. Contiguous rather than shuffled because shuffling characters or windows
would leak text across splits.
"""
from __future__ import annotations

import hashlib
import platform
from pathlib import Path

import numpy as np

from .dataset_folder import DataError

PYDOC_DESCRIPTION = ("CPython's pydoc_data.topics help texts (English), joined with newlines in "
                     "sorted topic order; character-level")


def pydoc_corpus() -> tuple[str, dict]:
    """Returns (text, source info)."""
    from pydoc_data.topics import topics

    text = "\n".join(topics[key] for key in sorted(topics))
    return text, {"python_version": platform.python_version(), "n_topics": len(topics)}


def read_textfile(path: str | Path | None) -> tuple[str, dict]:
    """Returns (text, source info) for a UTF-8 file.

    Raises:
        DataError: if the path is unset or missing, or the file is not UTF-8.
    """
    if path is None:
        raise DataError("source 'textfile' needs `path`: the UTF-8 text file to read")
    path = Path(path)
    if not path.is_file():
        raise DataError(f"text file {str(path)!r} does not exist (set `path` to a UTF-8 text file)")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"text file {str(path)!r} is not valid UTF-8: byte {exc.start} "
                        f"({raw[exc.start:exc.start + 1]!r}): {exc.reason}") from None
    return text, {"path": str(path), "file_sha256": hashlib.sha256(raw).hexdigest()}


def encode(text: str) -> tuple[np.ndarray, list[str]]:
    """Text -> (int64 token ids (N_chars,), vocab) with vocab the sorted distinct characters."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")  # (N_chars,) code points
    vocab_codes = np.unique(codes)  # sorted
    ids = np.searchsorted(vocab_codes, codes).astype(np.int64)
    return ids, [chr(c) for c in vocab_codes]


def text_splits(text: str, *, val_fraction: float, test_fraction: float,
                limit_train: int | None = None) -> tuple[dict, dict]:
    """Returns (splits, extra meta): contiguous train | val | test character streams.

    `limit_train` keeps only the first `limit_train` characters of the train part.
    """
    ids, vocab = encode(text)
    N = len(ids)
    n_train = round(N * (1 - val_fraction - test_fraction))
    n_val = round(N * val_fraction)
    if min(n_train, n_val, N - n_train - n_val) < 2:
        raise DataError(f"text of {N} characters is too short to split into train/val/test "
                        f"with val_fraction={val_fraction}, test_fraction={test_fraction}")
    bounds = {"train": (0, n_train), "val": (n_train, n_train + n_val), "test": (n_train + n_val, N)}
    splits = {name: {"x": ids[lo:hi].copy()} for name, (lo, hi) in bounds.items()}
    if limit_train is not None:
        splits["train"]["x"] = splits["train"]["x"][:limit_train].copy()
    meta = {"vocab": vocab, "vocab_size": len(vocab), "n_chars": N,
            "split_method": "contiguous: first part train, then val, then test (no shuffling)",
            "corpus_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
    return splits, meta
