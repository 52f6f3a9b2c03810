"""sample_batch / eval_batches / probe_inputs: determinism, statelessness, shapes, augmentation."""
import numpy as np
import pytest
import torch

from brownformer.data import (DataError, PreparedData, eval_batches, load_prepared, pin_memory,
                              probe_inputs, sample_batch, to_device)

SEQ_LEN = 32


@pytest.fixture(scope="module")
def digits(digits_dir):
    return load_prepared(digits_dir)


@pytest.fixture(scope="module")
def pydoc(pydoc_dir):
    return load_prepared(pydoc_dir)


def _tiny_images(n=12, C=2, H=6, W=6) -> PreparedData:
    """Images whose pixels are all distinct, with mean 0 / std 1 so padding is exactly 0."""
    x = np.arange(1, n * C * H * W + 1, dtype=np.float32).reshape(n, C, H, W)
    meta = {"dataset": "tiny", "kind": "image", "augmentation": "crop+flip", "mean": [0.0] * C, "std": [1.0] * C}
    splits = {s: {"x": x, "y": np.arange(n, dtype=np.int64)} for s in ("train", "val", "test")}
    return PreparedData(kind="image", meta=meta, splits=splits)


def test_images_deterministic_and_stateless(digits):
    a = sample_batch(digits, "train", step=5, seed=3, batch_size=16)
    sample_batch(digits, "train", step=6, seed=3, batch_size=16)  # drawing others changes nothing
    b = sample_batch(digits, "train", step=5, seed=3, batch_size=16)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    c = sample_batch(digits, "train", step=6, seed=3, batch_size=16)
    d = sample_batch(digits, "train", step=5, seed=4, batch_size=16)
    assert not torch.equal(a[1], c[1]) and not torch.equal(a[1], d[1])
    assert a[0].shape == (16, 1, 8, 8) and a[0].dtype == torch.float32 and a[1].dtype == torch.int64


def test_images_without_replacement_within_batch():
    data = _tiny_images()
    x, y = sample_batch(data, "train", step=0, seed=0, batch_size=12)
    assert sorted(y.tolist()) == list(range(12))
    with pytest.raises(DataError, match="exceeds"):
        sample_batch(data, "train", step=0, seed=0, batch_size=13)


def _counting_text(n=1000) -> PreparedData:
    """A text stream whose token at position i is i, so a window's first token is its start."""
    meta = {"dataset": "count", "kind": "text", "vocab_size": n}
    splits = {s: {"x": np.arange(n, dtype=np.int64)} for s in ("train", "val", "test")}
    return PreparedData(kind="text", meta=meta, splits=splits)


def test_text_targets_are_shifted_inputs(pydoc):
    x, y = sample_batch(pydoc, "train", step=2, seed=0, batch_size=8, seq_len=SEQ_LEN)
    assert x.shape == y.shape == (8, SEQ_LEN) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    again = sample_batch(pydoc, "train", step=2, seed=0, batch_size=8, seq_len=SEQ_LEN)
    assert torch.equal(x, again[0]) and torch.equal(y, again[1])
    # Windows are contiguous pieces of the stream and y ends one past x, inside the split.
    x, y = sample_batch(_counting_text(), "train", step=0, seed=0, batch_size=64, seq_len=SEQ_LEN)
    assert torch.equal(x, x[:, :1] + torch.arange(SEQ_LEN)) and torch.equal(y, x + 1)
    assert int(y.max()) <= 999


def test_text_errors(pydoc):
    with pytest.raises(DataError, match="seq_len"):
        sample_batch(pydoc, "train", step=0, seed=0, batch_size=2)
    with pytest.raises(DataError, match="unknown split"):
        sample_batch(pydoc, "training", step=0, seed=0, batch_size=2, seq_len=4)


def test_augmentation_is_a_padded_crop_or_its_flip():
    data = _tiny_images()
    x, y = sample_batch(data, "train", step=1, seed=0, batch_size=12, augment=True)
    plain, _ = sample_batch(data, "train", step=1, seed=0, batch_size=12)
    assert x.shape == plain.shape and torch.equal(y, _)
    src = data.splits["train"]["x"]
    n_flipped = 0
    for img, label in zip(x.numpy(), y.numpy()):
        padded = np.pad(src[label], ((0, 0), (4, 4), (4, 4)))  # zero = black after standardisation
        crops = [(padded[:, i:i + 6, j:j + 6], flip) for i in range(9) for j in range(9) for flip in (0, 1)]
        matches = [flip for crop, flip in crops if np.array_equal(img, crop[:, :, ::-1] if flip else crop)]
        assert matches, "augmented image is not a crop of the padded original"
        n_flipped += matches[0]
    assert 0 < n_flipped < 12
    again, _ = sample_batch(data, "train", step=1, seed=0, batch_size=12, augment=True)
    assert torch.equal(x, again)


def test_augment_refused_for_digits(digits):
    with pytest.raises(DataError, match="no augmentation"):
        sample_batch(digits, "train", step=0, seed=0, batch_size=4, augment=True)


def test_eval_batches_images_fixed(digits):
    batches = eval_batches(digits, "val", batch_size=32, n_batches=3)
    assert [len(b[1]) for b in batches] == [32, 32, 32]
    np.testing.assert_array_equal(torch.cat([b[0] for b in batches]).numpy(), digits.splits["val"]["x"][:96])
    every = eval_batches(digits, "val", batch_size=100, n_batches=10)
    assert [len(b[1]) for b in every] == [100, 100, 70]  # all 270 when fewer than asked


def test_eval_batches_text_non_overlapping(pydoc):
    batches = eval_batches(pydoc, "val", batch_size=4, n_batches=5, seq_len=SEQ_LEN)
    assert len(batches) == 5
    for x, y in batches:
        assert x.shape == (4, SEQ_LEN) and torch.equal(x[:, 1:], y[:, :-1])
    assert all(torch.equal(a[0], b[0]) for a, b in
               zip(batches, eval_batches(pydoc, "val", batch_size=4, n_batches=5, seq_len=SEQ_LEN)))
    data = _counting_text()
    batches = eval_batches(data, "val", batch_size=4, n_batches=5, seq_len=SEQ_LEN)
    starts = torch.cat([b[0][:, 0] for b in batches]).numpy()
    assert len(starts) == 20 and starts[0] == 0 and starts[-1] == 1000 - SEQ_LEN - 1  # spread to both ends
    assert np.all(np.diff(starts) >= SEQ_LEN)
    all_windows = eval_batches(data, "val", batch_size=8, n_batches=100, seq_len=SEQ_LEN)
    starts = torch.cat([b[0][:, 0] for b in all_windows]).numpy()
    assert len(starts) == 999 // SEQ_LEN and np.all(np.diff(starts) >= SEQ_LEN)
    assert int(all_windows[-1][1].max()) <= 999


def test_probe_inputs_from_validation(digits, pydoc):
    probes = probe_inputs(digits, n=16, seed=1234)
    assert probes.shape == (16, 1, 8, 8)
    assert torch.equal(probes, probe_inputs(digits, n=16, seed=1234))
    val_rows = {row.tobytes() for row in digits.splits["val"]["x"]}
    assert all(p.numpy().tobytes() in val_rows for p in probes)
    text = probe_inputs(pydoc, n=5, seed=0, seq_len=SEQ_LEN)
    assert text.shape == (5, SEQ_LEN) and text.dtype == torch.int64
    with pytest.raises(DataError, match="validation split has 270"):
        probe_inputs(digits, n=271, seed=0)


def test_pin_memory_is_a_no_op_on_cpu():
    batch = (torch.zeros(2, 3), torch.ones(2, dtype=torch.int64))
    pinned = pin_memory(batch, "cpu")
    assert all(a is b for a, b in zip(pinned, batch))
    moved = to_device(batch, "cpu")
    assert all(torch.equal(a, b) for a, b in zip(moved, batch))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_to_device_pins_and_moves_to_cuda():
    batch = (torch.zeros(2, 3), torch.ones(2, dtype=torch.int64))
    assert all(t.is_pinned() for t in pin_memory(batch, "cuda"))
    moved = to_device(batch, "cuda")
    assert all(t.is_cuda for t in moved) and torch.equal(moved[1].cpu(), batch[1])
