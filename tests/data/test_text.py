"""pydoc and textfile: determinism, vocabulary, contiguous split, input errors."""
import numpy as np
import pytest

from brownformer.data import DataError, load_prepared, prepare_dataset

from .conftest import dataset_cfg


def _decode(data, split):
    vocab = data.meta["vocab"]
    return "".join(vocab[i] for i in data.splits[split]["x"])


def test_pydoc_vocab_and_roundtrip(pydoc_dir):
    from pydoc_data.topics import topics

    data = load_prepared(pydoc_dir)
    vocab = data.meta["vocab"]
    assert data.kind == "text" and vocab == sorted(set(vocab)) and data.vocab_size == len(vocab)
    corpus = "\n".join(topics[k] for k in sorted(topics))
    assert set(vocab) == set(corpus)
    # Contiguous split: train + val + test is the corpus, in order.
    assert _decode(data, "train") + _decode(data, "val") + _decode(data, "test") == corpus
    for split in ("train", "val", "test"):
        x = data.splits[split]["x"]
        assert x.dtype == np.int64 and x.ndim == 1 and "y" not in data.splits[split]
        assert x.min() >= 0 and x.max() < len(vocab)


def test_pydoc_deterministic(tmp_path, pydoc_dir):
    again = prepare_dataset(dataset_cfg("pydoc"), tmp_path / "again")
    assert again["sha256"] == load_prepared(pydoc_dir).meta["sha256"]


def test_textfile_split_fractions(tmp_path):
    text = "".join(chr(ord("a") + i % 7) for i in range(1000)) + "é✓"
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    meta = prepare_dataset(dataset_cfg("textfile", path=str(path), val_fraction=0.1, test_fraction=0.2),
                           tmp_path / "out")
    assert meta["sizes"] == {"train": 701, "val": 100, "test": 201}
    assert meta["vocab"] == sorted(set(text)) and meta["vocab_size"] == 9
    data = load_prepared(tmp_path / "out")
    assert _decode(data, "train") + _decode(data, "val") + _decode(data, "test") == text
    assert _decode(data, "test").endswith("é✓")


def test_textfile_limit_train(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("abcdefghij" * 100, encoding="utf-8")
    meta = prepare_dataset(dataset_cfg("textfile", path=str(path), limit_train=50), tmp_path / "out")
    assert meta["sizes"]["train"] == 50 and meta["vocab_size"] == 10


def test_textfile_missing_file_error_names_path(tmp_path):
    missing = tmp_path / "nowhere.txt"
    with pytest.raises(DataError, match="nowhere.txt"):
        prepare_dataset(dataset_cfg("textfile", path=str(missing)), tmp_path / "out")
    with pytest.raises(DataError, match="needs `path`"):
        prepare_dataset(dataset_cfg("textfile"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_textfile_not_utf8_error(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\xe9 au lait".encode("latin-1"))
    with pytest.raises(DataError, match=r"not valid UTF-8: byte 3"):
        prepare_dataset(dataset_cfg("textfile", path=str(path)), tmp_path / "out")


def test_textfile_too_short(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("abc", encoding="utf-8")
    with pytest.raises(DataError, match="too short"):
        prepare_dataset(dataset_cfg("textfile", path=str(path)), tmp_path / "out")
