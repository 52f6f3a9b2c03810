"""Which nn.Linear layers K-FAC preconditions, and the hooks that collect their factor statistics.

Scope rule (on the qualified module name, split at dots, case-insensitive):
  * ``attention``: some name component contains ``attn`` or ``attention``
    (``blocks.0.attn.q`` ... ``blocks.0.attn.o``);
  * ``mlp``: not attention, and some component contains ``mlp``, ``ffn`` or ``feed_forward``
    (``blocks.0.mlp.fc1``, ``blocks.0.mlp.fc2``);
  * ``all``: every ``nn.Linear`` with a trainable weight (also a classifier ``head`` or the
    layers of a plain ``nn.Sequential`` MLP, which belong to no other scope).
``per_head``: layers in attention scope whose last name component is ``q``, ``k``, ``v`` (or
``q_proj``/``query`` ...) get a block-diagonal ``G`` with one block per head; the head count
comes from ``n_heads`` or the parent module's ``n_heads``/``num_heads``/``n_head`` attribute.

Hooks: one forward hook per layer keeps the (detached) layer input ``a`` and registers a tensor
hook on the layer output ``s`` that keeps ``g = dL/ds`` when ``loss.backward()`` reaches it (a
tensor hook on ``s`` is used instead of a module full-backward hook because it also works when the
input needs no gradient and it does not fire inside the Monte-Carlo backward below). The hooks
only keep references; the factors of all layers are computed in ``KFAC.step`` with one batched
matrix product per group of same-shaped layers (``_kfac_groups``), which is much cheaper than a
few small products per layer inside backward. Keeping ``a`` until the step holds the layer inputs
that autograd saved for backward anyway a little longer, plus the output gradients (one
activation-sized tensor per layer). Statistics are computed in float32 (float64 for a float64
model) with autocast disabled, so bf16 autocast never reaches the factors.

``fisher="mc"``: a forward hook on the model keeps the logits ``z`` (``(B, ..., classes)``) and
registers a tensor hook on them. When ``loss.backward()`` reaches ``z`` the hook samples
``y ~ softmax(z)`` and runs ``torch.autograd.grad(z, [s_l], grad_outputs=(softmax(z) -
onehot(y)) / B, retain_graph=True)``: the gradients of the sampled-label cross-entropy (the
true Fisher, Martens & Grosse 2015 sec. 5) w.r.t. every captured layer output. That costs one
extra backward pass to the layer outputs (no weight gradients), i.e. roughly a third of a
forward+backward, on factor-update steps only. It assumes the model returns the logits of a
categorical likelihood (cross-entropy loss) as a tensor.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn

logger = logging.getLogger(__name__)

SCOPES = ("all", "attention", "mlp")
FISHERS = ("empirical", "mc")
_ATTENTION = re.compile(r"attn|attention")
_MLP = re.compile(r"mlp|ffn|feed_?forward")
_HEAD_PROJECTIONS = {"q", "k", "v", "q_proj", "k_proj", "v_proj", "query", "key", "value"}


def layer_scope(name: str) -> str:
    """Classify a qualified module name as ``"attention"``, ``"mlp"`` or ``"other"``."""
    parts = name.lower().split(".")
    if any(_ATTENTION.search(p) for p in parts):
        return "attention"
    if any(_MLP.search(p) for p in parts):
        return "mlp"
    return "other"


@dataclass
class KFACLayer:
    """One preconditioned layer and the inputs / output gradients kept since the last ``step``."""

    name: str
    module: nn.Linear
    head_size: int | None = None
    inputs: list[torch.Tensor] = field(default_factory=list, repr=False)
    output_grads: list[torch.Tensor] = field(default_factory=list, repr=False)

    @property
    def has_bias(self) -> bool:
        return self.module.bias is not None and self.module.bias.requires_grad

    @property
    def shape(self) -> tuple[int, int]:
        """``(out, in[+1])`` of the augmented weight matrix ``[W, b]``."""
        out_features, in_features = self.module.weight.shape
        return out_features, in_features + int(self.has_bias)

    def reset(self) -> None:
        self.inputs.clear()
        self.output_grads.clear()


def _head_count(model: nn.Module, name: str, n_heads: int | None) -> int:
    if n_heads is not None:
        return n_heads
    parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
    for attr in ("n_heads", "num_heads", "n_head"):
        if isinstance(getattr(parent, attr, None), int):
            return getattr(parent, attr)
    raise ValueError(f"per_head=True but no head count for {name!r}: pass n_heads=")


def find_layers(model: nn.Module, *, scope: str, per_head: bool, n_heads: int | None) -> list[KFACLayer]:
    """The in-scope ``nn.Linear`` layers of ``model`` (see the module docstring for the rule)."""
    layers, seen = [], set()
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or not module.weight.requires_grad:
            continue
        if scope != "all" and layer_scope(name) != scope:
            continue
        if id(module.weight) in seen:
            raise ValueError(f"layer {name!r} shares its weight with another layer in scope")
        seen.add(id(module.weight))
        head_size = None
        is_projection = name.rpartition(".")[2].lower() in _HEAD_PROJECTIONS
        if per_head and layer_scope(name) == "attention" and is_projection:
            heads = _head_count(model, name, n_heads)
            if module.out_features % heads:
                raise ValueError(f"{name!r}: out_features {module.out_features} not divisible by {heads} heads")
            head_size = module.out_features // heads
        layers.append(KFACLayer(name=name, module=module, head_size=head_size))
    if not layers:
        raise ValueError(f"no trainable nn.Linear layer in scope {scope!r}")
    return layers


class FactorCapture:
    """Registers the hooks and keeps each layer's inputs and output gradients until ``step``."""

    def __init__(self, model: nn.Module, layers: list[KFACLayer], *, fisher: str,
                 generator: torch.Generator | None = None):
        self.model, self.layers = model, layers
        self.fisher, self.generator = fisher, generator
        self.enabled = True
        self.seconds = 0.0
        self._outputs: list[tuple[KFACLayer, torch.Tensor]] = []  # mc: outputs awaiting the logits
        self._handles = [layer.module.register_forward_hook(self._make_hook(layer)) for layer in layers]
        if fisher == "mc":
            self._handles.append(model.register_forward_hook(self._on_model_output))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _active(self, module: nn.Module) -> bool:
        return self.enabled and module.training and torch.is_grad_enabled()

    def _make_hook(self, layer: KFACLayer):
        def hook(module, args, output):
            if not self._active(module):
                return
            layer.inputs.append(args[0].detach())
            if not output.requires_grad:
                return
            if self.fisher == "mc":
                self._outputs.append((layer, output))
            else:
                output.register_hook(layer.output_grads.append)
        return hook

    def _on_model_output(self, module, args, output):
        if not self._active(module) or not self._outputs:
            return
        if not isinstance(output, torch.Tensor) or not output.requires_grad:
            raise TypeError("fisher='mc' needs a model that returns a logits tensor")
        outputs, self._outputs = self._outputs, []
        handles = []

        def once(grad):
            handles.pop().remove()  # the inner backward below passes through the logits again
            self._mc_backward(output, outputs)

        handles.append(output.register_hook(once))

    def _mc_backward(self, logits: torch.Tensor, outputs: list[tuple[KFACLayer, torch.Tensor]]) -> None:
        """Backpropagate the sampled-label cross-entropy gradient to the layer outputs."""
        start = time.perf_counter()
        B, n_classes = logits.shape[0], logits.shape[-1]
        with torch.no_grad(), torch.autocast(logits.device.type, enabled=False):
            probs = logits.detach().float().softmax(dim=-1).reshape(-1, n_classes)  # (rows, classes)
            sampled = torch.multinomial(probs, 1, generator=self.generator)  # (rows, 1)
            grad = probs.scatter_add(1, sampled, -torch.ones_like(probs[:, :1])) / B
            grad = grad.reshape(logits.shape).to(logits.dtype)
        with torch.enable_grad():
            grads = torch.autograd.grad(logits, [s for _, s in outputs], grad_outputs=grad,
                                        retain_graph=True, allow_unused=True)
        self.seconds += time.perf_counter() - start
        for (layer, _), g in zip(outputs, grads):
            if g is not None:
                layer.output_grads.append(g)
