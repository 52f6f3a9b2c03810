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

Hooks: a forward-pre hook keeps the layer input ``a``; a forward hook registers a tensor hook on
the layer output ``s`` that receives ``g = dL/ds`` during ``loss.backward()`` and adds the
factor contributions of that (``a``, ``g``) pair (a tensor hook on ``s`` is used instead of a
module full-backward hook because it also works when the input needs no gradient and it does not
fire inside the Monte-Carlo backward below). Statistics are accumulated in float32 (float64 for a
float64 model) with autocast disabled, so bf16 autocast never reaches the factors.

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

from brownformer.optim._kfac_math import block_diagonal, input_factor, output_factor

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
    """One preconditioned layer and the factor sums collected since the last ``step``."""

    name: str
    module: nn.Linear
    head_size: int | None = None
    sum_a: torch.Tensor | None = field(default=None, repr=False)
    sum_g: torch.Tensor | None = field(default=None, repr=False)
    count_a: int = 0
    count_g: int = 0

    @property
    def has_bias(self) -> bool:
        return self.module.bias is not None and self.module.bias.requires_grad

    @property
    def shape(self) -> tuple[int, int]:
        """``(out, in[+1])`` of the augmented weight matrix ``[W, b]``."""
        out_features, in_features = self.module.weight.shape
        return out_features, in_features + int(self.has_bias)

    def reset(self) -> None:
        self.sum_a = self.sum_g = None
        self.count_a = self.count_g = 0


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
    """Registers the hooks and accumulates per-layer factor sums between optimizer steps."""

    def __init__(self, model: nn.Module, layers: list[KFACLayer], *, weight_sharing: str,
                 fisher: str, generator: torch.Generator | None = None):
        self.model, self.layers = model, layers
        self.weight_sharing, self.fisher, self.generator = weight_sharing, fisher, generator
        self.enabled = True
        self.seconds = 0.0
        self._outputs: list[tuple[KFACLayer, torch.Tensor]] = []  # mc: outputs awaiting the logits
        self._handles = []
        for layer in layers:
            self._handles.append(layer.module.register_forward_pre_hook(self._make_pre_hook(layer)))
            self._handles.append(layer.module.register_forward_hook(self._make_output_hook(layer)))
        if fisher == "mc":
            self._handles.append(model.register_forward_hook(self._on_model_output))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _active(self, module: nn.Module) -> bool:
        return self.enabled and module.training and torch.is_grad_enabled()

    @staticmethod
    def _stat_dtype(module: nn.Linear) -> torch.dtype:
        return torch.float64 if module.weight.dtype == torch.float64 else torch.float32

    def _make_pre_hook(self, layer: KFACLayer):
        def hook(module, args):
            if not self._active(module):
                return
            start = time.perf_counter()
            a = args[0].detach()
            with torch.autocast(a.device.type, enabled=False):
                factor = input_factor(a.to(self._stat_dtype(module)), bias=layer.has_bias,
                                      weight_sharing=self.weight_sharing)
            layer.sum_a = factor if layer.sum_a is None else layer.sum_a + factor
            layer.count_a += 1
            self.seconds += time.perf_counter() - start
        return hook

    def _make_output_hook(self, layer: KFACLayer):
        def hook(module, args, output):
            if not self._active(module) or not output.requires_grad:
                return
            if self.fisher == "mc":
                self._outputs.append((layer, output))
            else:
                output.register_hook(lambda g: self._add_g(layer, g))
        return hook

    def _add_g(self, layer: KFACLayer, g: torch.Tensor) -> None:
        start = time.perf_counter()
        with torch.autocast(g.device.type, enabled=False):
            factor = output_factor(g.detach().to(self._stat_dtype(layer.module)),
                                   weight_sharing=self.weight_sharing)
            if layer.head_size is not None:
                factor = block_diagonal(factor, layer.head_size)
        layer.sum_g = factor if layer.sum_g is None else layer.sum_g + factor
        layer.count_g += 1
        self.seconds += time.perf_counter() - start

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
                self._add_g(layer, g)
