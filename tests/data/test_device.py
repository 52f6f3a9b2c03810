"""DeviceSampler: the on-device gather, crop and flip give sample_batch's batches exactly.

The reference is the numpy path (`sample_batch`, itself tested against hand-built crops in
test_sampling.py). Equality is exact (torch.equal): both paths index the same float32 values
with the same draws, so no rounding is allowed to differ.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from brownformer.data import DataError, DeviceSampler, PreparedData, draw_batch, load_prepared, sample_batch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
STEPS = (0, 1, 7, 123)
SEEDS = (0, 5)


def _images(n=40, C=3, H=8, W=8, seed=0) -> PreparedData:
    """Random standardised images with a non-zero padding fill (mean/std not 0/1)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, C, H, W)).astype(np.float32)
    meta = {"dataset": "rand", "kind": "image", "augmentation": "crop+flip",
            "mean": [0.4, 0.5, 0.6][:C], "std": [0.2, 0.25, 0.3][:C]}
    splits = {s: {"x": x, "y": rng.integers(0, 10, n).astype(np.int64)} for s in ("train", "val", "test")}
    return PreparedData(kind="image", meta=meta, splits=splits)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("augment", [False, True], ids=["plain", "crop-flip"])
def test_device_images_equal_sample_batch(device, augment):
    data = _images()
    for seed in SEEDS:
        sampler = DeviceSampler(data, "train", device, seed=seed, batch_size=16, augment=augment)
        for step in STEPS:
            x, y = sampler.batch(step)
            ref_x, ref_y = sample_batch(data, "train", step=step, seed=seed, batch_size=16, augment=augment)
            assert x.device.type == device and x.dtype == ref_x.dtype and x.shape == ref_x.shape
            assert torch.equal(x.cpu(), ref_x), f"seed {seed} step {step}"
            assert torch.equal(y.cpu(), ref_y)


def test_crop_flip_draws_are_applied_exactly():
    """Each device image is its source image padded with the fill, cropped at (top, left), and
    flipped where drawn: rebuilt here pixel by pixel from the draws."""
    data = _images(n=20, C=2, H=5, W=6)
    sampler = DeviceSampler(data, "train", "cpu", seed=3, batch_size=8, augment=True)
    draw = draw_batch(data, "train", step=4, seed=3, batch_size=8, augment=True)
    x, _ = sampler.batch(4)
    src = data.splits["train"]["x"]
    fill = -np.asarray(data.meta["mean"], np.float32) / np.asarray(data.meta["std"], np.float32)
    assert draw.flip.any() and not draw.flip.all(), "pick a seed/step drawing both flips"
    for b in range(8):
        for c in range(2):
            for i in range(5):
                for j in range(6):
                    jj = 5 - j if draw.flip[b] else j  # column read in the unflipped crop
                    r, s = draw.top[b] + i - 4, draw.left[b] + jj - 4  # position in the source image
                    inside = 0 <= r < 5 and 0 <= s < 6
                    expected = src[draw.index[b], c, r, s] if inside else fill[c]
                    assert x[b, c, i, j].item() == expected, (b, c, i, j)


@pytest.mark.parametrize("device", DEVICES)
def test_device_text_windows_equal_sample_batch(device, pydoc_dir):
    data = load_prepared(pydoc_dir)
    sampler = DeviceSampler(data, "train", device, seed=1, batch_size=8, seq_len=32)
    for step in STEPS:
        x, y = sampler.batch(step)
        ref_x, ref_y = sample_batch(data, "train", step=step, seed=1, batch_size=8, seq_len=32)
        assert torch.equal(x.cpu(), ref_x) and torch.equal(y.cpu(), ref_y)


def test_device_sampler_refuses_what_sample_batch_refuses(digits_dir):
    digits = load_prepared(digits_dir)
    with pytest.raises(DataError, match="no augmentation"):
        DeviceSampler(digits, "train", "cpu", seed=0, batch_size=4, augment=True)
    with pytest.raises(DataError, match="exceeds"):
        DeviceSampler(_images(n=10), "train", "cpu", seed=0, batch_size=11)
