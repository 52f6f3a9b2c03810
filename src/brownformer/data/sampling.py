"""Batches as pure functions of (seed, step): resuming at step k replays the same batches.

No iterator state exists: batch `step` is drawn from a fresh numpy Generator (PCG64) seeded with
the SeedSequence (seed, step, split). So a resumed run needs only the step counter, and a batch
never depends on how many batches were drawn before it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .dataset_folder import DataError, PreparedData

_SPLIT_SALT = {"train": 0, "val": 1, "test": 2}
_PROBE_SALT = 7  # keeps probe draws apart from sample_batch's streams
CROP_PAD = 4


def _rng(*entropy: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(list(entropy))))


def _split(data: PreparedData, split: str) -> dict[str, np.ndarray]:
    if split not in data.splits:
        raise DataError(f"unknown split {split!r}; known: {sorted(data.splits)}")
    return data.splits[split]


def _window_count(stream: np.ndarray, seq_len: int | None, split: str) -> int:
    """Number of valid window starts for (x, y) pairs of length seq_len."""
    if seq_len is None or seq_len < 1:
        raise DataError("text data needs seq_len >= 1")
    n = len(stream) - seq_len
    if n < 1:
        raise DataError(f"split {split!r} has {len(stream)} characters: too few for windows of "
                        f"seq_len={seq_len} (needs at least seq_len + 1)")
    return n


def _windows(stream: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    pos = starts[:, None] + np.arange(seq_len)  # (B, seq_len)
    return torch.from_numpy(stream[pos]), torch.from_numpy(stream[pos + 1])  # y: the next characters


@dataclass(frozen=True)
class BatchDraw:
    """The random choices behind batch `step` of a run: which examples and how each is augmented.

    Attributes:
        index: (B,) example indices (images) or window starts (text).
        top: (B,) crop offsets in 0..2*CROP_PAD (rows), or None without augmentation.
        left: (B,) crop offsets (columns), or None.
        flip: (B,) bool, horizontal flip, or None.
    """
    index: np.ndarray
    top: np.ndarray | None = None
    left: np.ndarray | None = None
    flip: np.ndarray | None = None


def draw_batch(data: PreparedData, split: str, *, step: int, seed: int, batch_size: int,
               seq_len: int | None = None, augment: bool = False) -> BatchDraw:
    """The draws of `sample_batch` (same arguments, same errors), without touching any pixel.

    Both the numpy path (`sample_batch`) and the on-device path (`DeviceSampler`) gather with these
    indices, so they give the same batch for the same (seed, step).
    """
    arrays = _split(data, split)
    rng = _rng(seed, step, _SPLIT_SALT[split])
    if data.kind == "text":
        return BatchDraw(rng.integers(0, _window_count(arrays["x"], seq_len, split), size=batch_size))
    N = len(arrays["y"])
    if batch_size > N:
        raise DataError(f"batch_size {batch_size} exceeds the {N} examples of split {split!r}")
    index = rng.choice(N, size=batch_size, replace=False)
    if not augment:
        return BatchDraw(index)
    if not data.meta.get("augmentation"):
        raise DataError(f"dataset {data.meta.get('dataset')!r} has no augmentation "
                        "(flips and shifts would change what small digits show)")
    top = rng.integers(0, 2 * CROP_PAD + 1, size=batch_size)
    left = rng.integers(0, 2 * CROP_PAD + 1, size=batch_size)
    return BatchDraw(index, top, left, rng.random(batch_size) < 0.5)


def padding_fill(meta) -> np.ndarray:
    """(C,) float32 value of a black pixel after standardisation: -mean/std per channel."""
    return -np.asarray(meta["mean"], dtype=np.float32) / np.asarray(meta["std"], dtype=np.float32)


def _augment(x: np.ndarray, draw: BatchDraw, meta) -> np.ndarray:
    """Random crop with 4 black pixels of padding, then a random horizontal flip, per image.

    As torchvision's RandomCrop(padding=4) + RandomHorizontalFlip before Normalize: the padding
    is black in [0, 1] pixel space, i.e. -mean/std per channel after standardisation.
    """
    B, C, H, W = x.shape
    padded = np.empty((B, C, H + 2 * CROP_PAD, W + 2 * CROP_PAD), dtype=x.dtype)
    padded[:] = padding_fill(meta)[None, :, None, None]
    padded[:, :, CROP_PAD:CROP_PAD + H, CROP_PAD:CROP_PAD + W] = x
    rows = draw.top[:, None] + np.arange(H)  # (B, H)
    cols = draw.left[:, None] + np.arange(W)  # (B, W)
    cols = np.where(draw.flip[:, None], cols[:, ::-1], cols)  # flipping = reading columns backwards
    out = padded[np.arange(B)[:, None, None, None], np.arange(C)[None, :, None, None],
                 rows[:, None, :, None], cols[:, None, None, :]]  # (B, C, H, W)
    return np.ascontiguousarray(out)


def sample_batch(data: PreparedData, split: str, *, step: int, seed: int, batch_size: int,
                 seq_len: int | None = None, augment: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch number `step` of a run seeded with `seed`, identical whenever it is asked for.

    Images: `batch_size` distinct examples drawn uniformly (without replacement within the
    batch); x float32 (B, C, H, W), y int64 (B,). `augment` applies crop + flip and is only
    allowed where meta["augmentation"] names one (not digits: a flipped 2 is not a 2).
    Text: `batch_size` windows at uniform random starts; x int64 (B, seq_len) and y the same
    windows shifted by one character.

    Raises:
        DataError: unknown split, batch larger than the split, too-short text, or augment on
            a dataset without augmentation.
    """
    draw = draw_batch(data, split, step=step, seed=seed, batch_size=batch_size, seq_len=seq_len, augment=augment)
    arrays = _split(data, split)
    if data.kind == "text":
        return _windows(arrays["x"], draw.index, seq_len)
    x = arrays["x"][draw.index]  # (B, C, H, W), a copy
    if augment:
        x = _augment(x, draw, data.meta)
    return torch.from_numpy(x), torch.from_numpy(arrays["y"][draw.index])


def eval_batches(data: PreparedData, split: str, *, batch_size: int, n_batches: int,
                 seq_len: int | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A fixed evaluation set: the same batches on every call and in every run.

    Images: the first n_batches * batch_size examples of the split (all if fewer; the last batch
    may be short). Splits are stored in shuffled order, so this is a random, class-balanced subset.
    Text: n_batches * batch_size non-overlapping windows spread evenly over the split (fewer if
    the split cannot hold that many).
    """
    arrays = _split(data, split)
    if data.kind == "text":
        stream = arrays["x"]
        span = _window_count(stream, seq_len, split) - 1  # last valid start
        n = min(n_batches * batch_size, (len(stream) - 1) // seq_len)
        # Integer spacing floor(k * span / (n - 1)) >= seq_len because n <= (len - 1) // seq_len.
        starts = (np.arange(n) * span) // max(n - 1, 1)
        return [_windows(stream, starts[i:i + batch_size], seq_len) for i in range(0, n, batch_size)]
    n = min(n_batches * batch_size, len(arrays["y"]))
    return [(torch.from_numpy(arrays["x"][i:i + batch_size].copy()),
             torch.from_numpy(arrays["y"][i:i + batch_size].copy())) for i in range(0, n, batch_size)]


def probe_inputs(data: PreparedData, *, n: int, seed: int, seq_len: int | None = None) -> torch.Tensor:
    """n fixed inputs from the validation split (never trained on) for trajectory probes.

    Images: n distinct validation images (n, C, H, W). Text: n windows (n, seq_len) at seeded
    random starts in the validation stream.
    """
    arrays = _split(data, "val")
    rng = _rng(seed, _PROBE_SALT)
    if data.kind == "text":
        stream = arrays["x"]
        starts = rng.integers(0, _window_count(stream, seq_len, "val"), size=n)
        return _windows(stream, starts, seq_len)[0]
    N = len(arrays["y"])
    if n > N:
        raise DataError(f"{n} probe inputs requested but the validation split has {N} examples")
    idx = np.sort(rng.choice(N, size=n, replace=False))
    return torch.from_numpy(arrays["x"][idx])


def pin_memory(batch: tuple[torch.Tensor, ...], device: str | torch.device) -> tuple[torch.Tensor, ...]:
    """Page-lock the batch's tensors when they are headed for a CUDA device (else unchanged)."""
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        return tuple(t.pin_memory() for t in batch)
    return tuple(batch)


def to_device(batch: tuple[torch.Tensor, ...], device: str | torch.device) -> tuple[torch.Tensor, ...]:
    """Move a batch to `device`; pinned and non-blocking when it is a CUDA device."""
    return tuple(t.to(device, non_blocking=True) for t in pin_memory(batch, device))
