"""Training batches gathered where the model runs: the split lives on the device, batches never leave it.

`DeviceSampler` copies one split to the device once (CIFAR-10's 45,000 float32 images are 553 MB:
small for a data-centre GPU). Per step, only the random choices of `draw_batch` (B indices, crop
offsets and flips: a few hundred bytes) cross from the host, asynchronously from pinned memory;
the gather, the padded crop and the flip run as a handful of device kernels. The draws are the
ones `sample_batch` uses, and the crop/flip is pure indexing of the same float32 values, so a
batch equals `sample_batch`'s bit for bit, on any device. On the CPU the split is shared with
the numpy arrays (no copy).
"""
from __future__ import annotations

import numpy as np
import torch

from .dataset_folder import PreparedData
from .sampling import CROP_PAD, BatchDraw, _split, draw_batch, padding_fill

__all__ = ["DeviceSampler", "eval_batches_on"]


class DeviceSampler:
    """Batch `step` of a run as `sample_batch` draws it, assembled on `device`.

    Args:
        data: the prepared dataset.
        split: the split to draw from ("train" for training).
        device: where the split is kept and batches are built.
        seed: the run's data seed.
        batch_size: examples per batch.
        seq_len: window length (text only).
        augment: random crop + flip (images whose meta names an augmentation).

    Raises:
        DataError: as `sample_batch` (checked once, at construction, on batch 0's draws).
    """

    def __init__(self, data: PreparedData, split: str, device: str | torch.device, *, seed: int,
                 batch_size: int, seq_len: int | None = None, augment: bool = False):
        self.data, self.split, self.device = data, split, torch.device(device)
        self.seed, self.batch_size, self.seq_len, self.augment = seed, batch_size, seq_len, augment
        self.kind = data.kind
        draw_batch(data, split, step=0, seed=seed, batch_size=batch_size, seq_len=seq_len, augment=augment)
        arrays = _split(data, split)
        self.x = torch.from_numpy(arrays["x"]).to(self.device)  # images (N, C, H, W) | text stream (L,)
        self.y = torch.from_numpy(arrays["y"]).to(self.device) if self.kind == "image" else None
        if self.kind == "text":
            self.offsets = torch.arange(seq_len, device=self.device)  # (seq_len,)
        elif augment:
            C, H, W = self.x.shape[1:]
            fill = torch.from_numpy(padding_fill(data.meta)).to(self.device)  # (C,)
            self.canvas = fill[None, :, None, None].expand(batch_size, C, H + 2 * CROP_PAD, W + 2 * CROP_PAD)
            self.rows = torch.arange(H, device=self.device)  # (H,)
            self.cols = torch.arange(W, device=self.device)  # (W,)
            self.channels = torch.arange(C, device=self.device)[None, :, None, None]  # (1, C, 1, 1)
            self.examples = torch.arange(batch_size, device=self.device)[:, None, None, None]  # (B, 1, 1, 1)

    def _upload(self, draw: BatchDraw) -> torch.Tensor:
        """The draws as one (k, B) int64 device tensor: one small asynchronous copy per step."""
        parts = [draw.index] if draw.top is None else [draw.index, draw.top, draw.left, draw.flip]
        host = torch.from_numpy(np.stack([np.asarray(p, dtype=np.int64) for p in parts]))  # (k, B)
        if self.device.type == "cuda":
            # Pinned memory makes the copy asynchronous; the caching host allocator keeps the
            # buffer alive until the copy has run, so nothing here waits for the device.
            return host.pin_memory().to(self.device, non_blocking=True)
        return host.to(self.device)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y) of batch `step`, on the device; equal to `sample_batch(..., step=step)`."""
        draw = draw_batch(self.data, self.split, step=step, seed=self.seed, batch_size=self.batch_size,
                          seq_len=self.seq_len, augment=self.augment)
        drawn = self._upload(draw)  # (k, B)
        if self.kind == "text":
            pos = drawn[0][:, None] + self.offsets  # (B, seq_len)
            return self.x[pos], self.x[pos + 1]  # y: the next characters
        index = drawn[0]
        x, y = self.x[index], self.y[index]  # (B, C, H, W), (B,)
        if self.augment:
            x = self._crop_flip(x, drawn[1], drawn[2], drawn[3].bool())
        return x, y

    def _crop_flip(self, x: torch.Tensor, top: torch.Tensor, left: torch.Tensor, flip: torch.Tensor
                   ) -> torch.Tensor:
        """The padded crop and flip of `sampling._augment`, by the same indexing."""
        B, C, H, W = x.shape
        padded = self.canvas.clone()  # (B, C, H + 8, W + 8), black after standardisation
        padded[:, :, CROP_PAD:CROP_PAD + H, CROP_PAD:CROP_PAD + W] = x
        rows = top[:, None] + self.rows  # (B, H)
        cols = left[:, None] + self.cols  # (B, W)
        cols = torch.where(flip[:, None], cols.flip(1), cols)  # flipping = reading columns backwards
        return padded[self.examples, self.channels, rows[:, None, :, None], cols[:, None, None, :]]  # (B, C, H, W)


def eval_batches_on(batches: list[tuple[torch.Tensor, ...]], device: str | torch.device
                    ) -> list[tuple[torch.Tensor, ...]]:
    """Fixed evaluation batches moved to the device once (evaluation then reads no host memory)."""
    return [tuple(t.to(device) for t in batch) for batch in batches]
