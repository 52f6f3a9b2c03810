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

``fisher="sampled"`` (the true Fisher; ``"mc"`` is its old name): a forward hook on the model keeps
the output ``z`` (``(B, ..., C)``) and registers a tensor hook on it. When ``loss.backward()`` reaches
``z`` with the loss's gradient ``dL/dz``, the hook draws labels from the model's own likelihood and
runs ``torch.autograd.grad(z, [s_l], grad_outputs=e / R, retain_graph=True)`` (``R`` as the loss
reduction, ``FactorCapture``): the gradients of the sampled-label loss (Martens & Grosse 2015 sec. 5)
w.r.t. every captured layer output. The likelihood is read from the loss on the device, per batch,
without a host sync: when ``q = softmax(z) - R dL/dz`` is a probability vector in every row the loss is
a cross-entropy (``q`` its target, one-hot or smoothed) and ``e = softmax(z) - onehot(y~)`` with
``y~ ~ softmax(z)`` (categorical); otherwise the output is read as the mean of a unit-variance
Gaussian (a squared-error loss) and ``e ~ N(0, I)``. That costs one extra backward pass to the layer
outputs (no weight gradients), roughly a third of a forward+backward, on factor-update steps only.
The model must return its output as a tensor.
"""

from __future__ import annotations

import logging
import re
import time
import weakref
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from brownformer.optim._kfac_packed import ForwardOverride, PackedProjection, is_packed, packed_forward

logger = logging.getLogger(__name__)

_CATEGORICAL_TOL = 0.02  # |row sum of q - 1| and -min(q) below this: a cross-entropy (bf16 gradients included)
_ATTENTION = re.compile(r"attn|attention")
_MLP = re.compile(r"mlp|ffn|feed_?forward")
_HEAD_PROJECTIONS = {"q", "k", "v", "q_proj", "k_proj", "v_proj", "query", "key", "value"}


def _is_distribution(q: torch.Tensor) -> torch.Tensor:
    """0-d bool: every row of ``(rows, classes)`` ``q`` is a probability vector (within ``_CATEGORICAL_TOL``)."""
    return (q.min() > -_CATEGORICAL_TOL) & ((q.sum(dim=1) - 1).abs().max() < _CATEGORICAL_TOL)


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


def _module_scope(name: str, module: nn.Module, attention_owned: set[int]) -> str:
    """``layer_scope`` of a module, where the parts of an ``nn.MultiheadAttention`` are attention whatever their name."""
    return "attention" if isinstance(module, nn.MultiheadAttention) or id(module) in attention_owned \
        else layer_scope(name)


def find_layers(model: nn.Module, *, scope: str, per_head: bool, n_heads: int | None) -> list[KFACLayer]:
    """The in-scope ``nn.Linear`` layers of ``model`` (see the module docstring for the rule), and the packed
    Q, K, V projection of every ``nn.MultiheadAttention`` (``_kfac_packed``; named ``<module>.in_proj``)."""
    layers, seen = [], set()
    attention_owned = {id(m.out_proj) for m in model.modules() if isinstance(m, nn.MultiheadAttention)}
    for name, module in model.named_modules():
        if is_packed(module) and scope in ("all", "attention"):
            embed = module.embed_dim  # one G block per Q, K, V (per head with per_head)
            head_size = embed // module.num_heads if per_head else embed
            layers.append(KFACLayer(name=f"{name}.in_proj", module=PackedProjection(module), head_size=head_size))
            seen.add(id(module.in_proj_weight))
            continue
        if not isinstance(module, nn.Linear) or not module.weight.requires_grad:
            continue
        if scope != "all" and _module_scope(name, module, attention_owned) != scope:
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


def unpreconditioned_weights(model: nn.Module, layers: list[KFACLayer], scope: str) -> list[tuple[str, str]]:
    """``(name, reason)`` for every trainable parameter of 2 or more dimensions that no layer preconditions."""
    mine = {id(p) for layer in layers for p in layer.module.parameters()}
    out = []
    for module_name, module in model.named_modules():
        for param_name, p in module.named_parameters(recurse=False):
            if not p.requires_grad or p.dim() < 2 or id(p) in mine:
                continue
            name = f"{module_name}.{param_name}" if module_name else param_name
            if isinstance(module, nn.Linear) and param_name == "weight":
                reason = f"an nn.Linear outside scope {scope!r}"
            elif isinstance(module, nn.MultiheadAttention):
                reason = "separate Q, K, V projections of other input sizes (kdim/vdim) are not supported" \
                    if module.in_proj_weight is None else f"attention outside scope {scope!r}"
            else:
                reason = f"a parameter of {type(module).__name__}, not an nn.Linear weight"
            out.append((name, reason))
    return out
def _remove_handles(handles: list) -> None:
    for handle in handles:
        handle.remove()
    handles.clear()


# model -> the capture whose hooks are on it: a second K-FAC on the same model takes the hooks over
_ACTIVE: "weakref.WeakKeyDictionary[nn.Module, weakref.ref]" = weakref.WeakKeyDictionary()


class FactorCapture:
    """Registers the hooks and keeps each layer's inputs and output gradients until ``step``.

    The hooks reach the capture through a weak reference, so a deleted optimizer leaves no hook that
    keeps capturing (its hooks are removed when it is garbage-collected), and a second capture on
    the same model removes the first one's hooks (one K-FAC preconditions a model at a time).

    ``loss_reduction`` fixes ``R``, the number of terms the loss averages (``_kfac_math``): ``"mean"``
    counts every row of the model output (``B`` for ``(B, C)`` logits, ``B T`` for ``(B, T, C)``:
    ``F.cross_entropy``'s default), ``"batch"`` only its leading dimension ``B`` (a per-example loss
    summed over tokens). ``scale`` holds the ``R`` of the last forward pass.
    """

    def __init__(self, model: nn.Module, layers: list[KFACLayer], *, fisher: str, loss_reduction: str,
                 generator: torch.Generator | None = None):
        self.layers = layers
        self.fisher, self.generator, self.loss_reduction = fisher, generator, loss_reduction
        self.enabled = True
        self.seconds = 0.0
        self.scale: int | None = None
        self._outputs: list[tuple[KFACLayer, torch.Tensor]] = []  # mc: outputs awaiting the logits
        self._reduction_checked = False
        previous = _ACTIVE.get(model)
        if previous is not None and previous() is not None:
            logger.warning("a second K-FAC on the same model: the first one's hooks are removed")
            previous().remove()
        ref = weakref.ref(self)
        self._handles = [ForwardOverride(layer.module.owner, packed_forward(layer.module.owner, _enabled(ref),
                                                                             _projection_hook(ref, layer)))
                         if isinstance(layer.module, PackedProjection)
                         else layer.module.register_forward_hook(_layer_hook(ref, layer)) for layer in layers]
        self._handles.append(model.register_forward_hook(_model_hook(ref)))
        _ACTIVE[model] = ref
        self._finalizer = weakref.finalize(self, _remove_handles, self._handles)

    def remove(self) -> None:
        """Remove every hook; the optimizer then only uses the factors it already has."""
        _remove_handles(self._handles)

    @property
    def n_hooks(self) -> int:
        return len(self._handles)

    def _active(self, module: nn.Module) -> bool:
        return self.enabled and module.training and torch.is_grad_enabled()

    def _on_layer(self, layer: KFACLayer, module, args, output) -> None:
        if not self._active(module):
            return
        layer.inputs.append(args[0].detach())
        if not output.requires_grad:
            return
        if self.fisher == "sampled":
            self._outputs.append((layer, output))
        else:
            output.register_hook(layer.output_grads.append)

    def _on_model_output(self, module, args, output) -> None:
        if not self._active(module):
            return
        if isinstance(output, torch.Tensor) and output.dim() >= 1:
            self.scale = output.shape[0] if self.loss_reduction == "batch" or output.dim() == 1 \
                else output.numel() // output.shape[-1]
        if self.fisher != "sampled" or not self._outputs:
            return
        if not isinstance(output, torch.Tensor) or not output.requires_grad:
            raise TypeError("fisher='sampled' needs a model that returns its output as a tensor")
        outputs, self._outputs = self._outputs, []
        handles = []
        scale = self.scale

        def once(grad):
            handles.pop().remove()  # the inner backward below passes through the logits again
            self._sampled_backward(output, outputs, scale, grad)

        handles.append(output.register_hook(once))

    def _check_reduction(self, probs, loss_grad, scale: int, logits) -> None:
        """Raise when the loss is a hard-label cross-entropy at another reduction than ``loss_reduction``.

        For a cross-entropy averaged over ``R_true`` terms, ``q_R = softmax(z) - R dL/dz`` is
        ``(1 - R / R_true) softmax(z) + (R / R_true) onehot``: the one-hot target exactly at ``R_true`` only. So when
        the declared ``R`` does not give one-hot rows but another candidate (every row, the batch, 1) does, the
        reduction is wrong (``G`` would be scaled wrongly, or the sampled Fisher silently Gaussian). Other losses
        (a squared error, a loss on pooled outputs, smoothed labels) are left to the usual reading."""
        def one_hot(r):
            q = probs - loss_grad * r
            return bool(_is_distribution(q) & (q.amax(dim=1).min() > 1 - _CATEGORICAL_TOL))
        if one_hot(scale):
            return
        candidates = {"mean": probs.shape[0], "batch": logits.shape[0], "sum (no averaging)": 1}
        for name, r in candidates.items():
            if r != scale and one_hot(r):
                raise ValueError(f"loss_reduction={self.loss_reduction!r} (R = {scale}) does not match the loss: it is "
                                 f"a cross-entropy averaged over R = {r} terms ({name}); pass the matching "
                                 "loss_reduction or average the loss so")

    def _sampled_backward(self, logits: torch.Tensor, outputs: list[tuple[KFACLayer, torch.Tensor]], scale: int,
                          loss_grad: torch.Tensor) -> None:
        """Backpropagate the sampled-label loss gradient (divided by ``R``, as the loss) to the layer outputs."""
        start = time.perf_counter()
        n_classes = logits.shape[-1]
        with torch.no_grad(), torch.autocast(logits.device.type, enabled=False):
            probs = logits.detach().float().softmax(dim=-1).reshape(-1, n_classes)  # (rows, classes)
            target = probs - loss_grad.detach().float().reshape(-1, n_classes) * scale  # cross-entropy's target
            categorical = _is_distribution(target)
            if not self._reduction_checked:  # once: one host read, so a mismatched reduction cannot pass silently
                self._reduction_checked = True
                self._check_reduction(probs, loss_grad.detach().float().reshape(-1, n_classes), scale, logits)
            # a non-finite row (a diverged step; the optimizer handles it) must not stop the sampling
            # inverse-CDF sampling: torch.multinomial checks its input on the host (a read per step)
            cdf = torch.nan_to_num(probs, nan=1.0, posinf=1.0, neginf=0.0).clamp_min(1e-30).cumsum(dim=1)  # (rows, C)
            u = torch.rand(cdf.shape[0], 1, generator=self.generator, device=cdf.device, dtype=cdf.dtype)
            sampled = torch.searchsorted(cdf, u * cdf[:, -1:]).clamp_max(n_classes - 1)  # (rows, 1)
            noise = torch.randn(probs.shape, generator=self.generator, device=probs.device)
            grad = torch.where(categorical, probs.scatter_add(1, sampled, -torch.ones_like(probs[:, :1])), noise) / scale
            grad = grad.reshape(logits.shape).to(logits.dtype)
        with torch.enable_grad():
            grads = torch.autograd.grad(logits, [s for _, s in outputs], grad_outputs=grad,
                                        retain_graph=True, allow_unused=True)
        self.seconds += time.perf_counter() - start
        for (layer, _), g in zip(outputs, grads):
            if g is not None:
                layer.output_grads.append(g)


def _layer_hook(ref: weakref.ref, layer: KFACLayer):
    def hook(module, args, output):
        capture = ref()
        if capture is not None:
            capture._on_layer(layer, module, args, output)
    return hook


def _model_hook(ref: weakref.ref):
    def hook(module, args, output):
        capture = ref()
        if capture is not None:
            capture._on_model_output(module, args, output)
    return hook


def _enabled(ref: weakref.ref):
    def enabled():
        capture = ref()
        return capture is not None and capture.enabled
    return enabled


def _projection_hook(ref: weakref.ref, layer: KFACLayer):
    def hook(x, proj):
        capture = ref()
        if capture is not None:
            capture._on_layer(layer, layer.module, (x,), proj)
    return hook
