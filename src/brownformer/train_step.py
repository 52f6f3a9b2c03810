"""One optimisation step, without host syncs, optionally captured as one CUDA graph.

The step (forward under autocast, loss, backward, optional gradient clipping, optimizer step)
returns the loss as a device tensor; nothing in it reads a device value on the host, so the host
runs ahead and queues the next step while the device works (`LossTracker` keeps the training
loss on the device until a log step asks for it).

`train.cuda_graphs` (CUDA only) records the whole step once and replays it: one launch instead of
a few hundred small kernels per step, which is what bounds the paper ViT at batch 128. The first
`CAPTURE_AFTER` steps run eagerly on a side stream (lazy state, cuBLAS workspaces, momentum
buffers are created there); step `CAPTURE_AFTER` is recorded and every later step copies its batch
into the graph's input buffers and replays. Capture needs an optimizer whose step is capture-safe,
declared as torch.optim does with `capturable=True` in every param group (AdamW here: fused, with
its step counters and learning rate as device tensors); any other optimizer runs eagerly, with a
warning. An optimizer that declares it must keep every step-to-step state on the device: a replay
runs no Python, so a host-side counter or branch would stay as it was when the step was recorded. On the CPU the key does nothing: there are no graphs to capture, and the numbers are
exactly those of the eager step.
"""
from __future__ import annotations

import logging
from typing import Callable

import torch
import torch.nn as nn

from brownformer.models import loss_fn
from brownformer.optim import implementation_flags

log = logging.getLogger(__name__)

__all__ = ["TrainStep", "LossTracker", "adamw_implementation", "capturable", "CAPTURE_AFTER"]

CAPTURE_AFTER = 3  # eager warm-up steps before the capture (PyTorch's CUDA graphs notes use 3)


def adamw_implementation(device: torch.device, *, cuda_graphs: bool) -> dict:
    """torch.optim.AdamW flags for `device` (brownformer.optim.registry: the registry holds each
    optimizer's implementation choice)."""
    return implementation_flags("adamw", device, cuda_graphs=cuda_graphs)


def capturable(optimizer: torch.optim.Optimizer) -> bool:
    """True when every param group declares a capture-safe step (torch.optim's `capturable`)."""
    return all(bool(group.get("capturable", False)) for group in optimizer.param_groups)


class TrainStep:
    """`step(x, y) -> loss`: one update of `model` by `optimizer` on the batch (x, y).

    Args:
        model: the trained module (its parameters are what `optimizer` updates).
        optimizer: any torch.optim optimizer whose groups carry `initial_lr`.
        device: where model and batches live.
        forward: the callable run on x (the model, or a torch.compile of it).
        grad_clip: max global gradient norm, or None.
        bf16: forward and backward under bf16 autocast.
        cuda_graphs: capture the step as one CUDA graph (CUDA and a capturable optimizer only).
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *, device: torch.device,
                 forward: Callable | None = None, grad_clip: float | None = None, bf16: bool = False,
                 cuda_graphs: bool = False):
        self.model, self.optimizer, self.device = model, optimizer, torch.device(device)
        # `is None`, not `or`: dynamo's wrapper of a compiled module raises on len(), which a truth test calls
        self.forward = model if forward is None else forward
        self.grad_clip, self.bf16 = grad_clip, bf16
        self.capture = cuda_graphs and self.device.type == "cuda" and capturable(optimizer)
        if cuda_graphs and self.device.type == "cuda" and not self.capture:
            log.warning("train.cuda_graphs: %s does not declare a capturable step; running eagerly",
                        type(optimizer).__name__)
        if self.capture:  # a learning rate baked into the graph as a number could not follow the schedule
            for group in optimizer.param_groups:
                group["lr"] = torch.as_tensor(group["lr"], dtype=torch.float32, device=self.device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self._eager_steps = 0

    @property
    def captured(self) -> bool:
        """Whether steps are replayed from a CUDA graph now."""
        return self.graph is not None

    def set_lr(self, factor: float) -> float:
        """Set every group's lr to `initial_lr * factor` (in place when it is a device tensor).

        Returns:
            The first group's new lr as a float (for the metrics), computed on the host.
        """
        for group in self.optimizer.param_groups:
            value = group["initial_lr"] * factor
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(value)  # queued on the device: no sync, and the graph reads it
            else:
                group["lr"] = value
        return self.optimizer.param_groups[0]["initial_lr"] * factor

    def autocast(self):
        """The step's autocast context (bf16 when configured); evaluation uses it too."""
        # Autocast's cast cache must be off while capturing (PyTorch's CUDA graphs notes).
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.bf16,
                              cache_enabled=False if self.capture else None)

    def _update(self, x: torch.Tensor, y: torch.Tensor, *, zero_grad: bool) -> torch.Tensor:
        if getattr(self.optimizer, "wants_closure", False):  # K-FAC: re-evaluates the loss every few steps
            return self.optimizer.step(self._closure(x, y, zero_grad=zero_grad))
        with self.autocast():
            loss = loss_fn(self.forward(x), y)
        if zero_grad:
            self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self._clip()
        self.optimizer.step()
        return loss.detach()

    def _clip(self) -> None:
        # An optimizer that bounds its own step (K-FAC's KL bound, which follows the lr schedule) is not
        # clipped: a clip before preconditioning would become part of its step rule, and when the bound
        # binds it undoes any rescaling of the gradient anyway (measured: docs/methods/kfac.md).
        if self.grad_clip is not None and not getattr(self.optimizer, "bounds_its_step", False):
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)

    def _closure(self, x: torch.Tensor, y: torch.Tensor, *, zero_grad: bool) -> Callable[[], torch.Tensor]:
        """The loss on (x, y) at the current parameters; with gradients (zeroed first) when grad is enabled.

        The optimizer calls it once with gradients and, on its adaptation steps, once more under
        torch.no_grad() (a forward only); the values stay on the device.
        """
        def closure() -> torch.Tensor:
            with self.autocast():
                loss = loss_fn(self.forward(x), y)
            if torch.is_grad_enabled():
                if zero_grad:
                    self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self._clip()
            return loss.detach()
        return closure

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One step on (x, y); returns the batch's loss, a 0-d device tensor (never read here)."""
        if not self.capture:
            return self._update(x, y, zero_grad=True)
        if self.graph is None and self._eager_steps < CAPTURE_AFTER:
            self._eager_steps += 1
            side, main = torch.cuda.Stream(self.device), torch.cuda.current_stream(self.device)
            side.wait_stream(main)
            with torch.cuda.stream(side):
                loss = self._update(x, y, zero_grad=True)
            main.wait_stream(side)
            return loss
        if self.graph is None:
            self._record(x, y)
        self._x.copy_(x)
        self._y.copy_(y)
        self.graph.replay()
        return self._loss.clone()  # the graph overwrites its output at the next replay

    def _record(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Record one step into a CUDA graph; recording runs nothing (the caller replays it)."""
        self._x, self._y = x.clone(), y.clone()
        # Gradients are then allocated inside the graph's memory pool and rewritten by each replay.
        self.optimizer.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._loss = self._update(self._x, self._y, zero_grad=False)
        log.info("captured the training step as a CUDA graph after %d eager steps", self._eager_steps)


class LossTracker:
    """The training loss kept on the device: the last batch's and the sum since the last read.

    `add` queues one addition; `read` (at log steps) fetches both numbers with one transfer.
    `state`/`load` carry the partial sum through a checkpoint, so a resumed run logs the same means.
    """

    def __init__(self, device: torch.device):
        self.total = torch.zeros((), dtype=torch.float64, device=device)
        self.count = 0
        self.last: torch.Tensor | None = None

    def add(self, loss: torch.Tensor) -> None:
        self.total += loss
        self.count += 1
        self.last = loss

    def read(self) -> tuple[float, float]:
        """(last loss, mean loss since the previous read); resets the mean. One host sync."""
        last, total = torch.stack([self.last.double(), self.total]).tolist()
        mean = total / self.count
        self.total.zero_()
        self.count = 0
        return last, mean

    def state(self) -> dict:
        return {"total": float(self.total), "count": self.count}

    def load(self, state: dict) -> None:
        self.total.fill_(state["total"])
        self.count = int(state["count"])
