"""Same-shaped layers kept stacked: one batched factor update per group, per-layer views as state.

K-FAC on a transformer touches a few dozen small layers; a loop of small matrix products per
layer costs more in per-call overhead than in arithmetic. Layers with the same ``(out, in, bias,
dtype)`` form a :class:`LayerGroup` whose factors, eigendecompositions and CG solutions live in
stacked ``(k, ...)`` tensors; each layer's optimizer state holds *views* of them (``state[w]
["factor_a"] is stack[j]``), so ``state_dict()`` has the usual per-layer keys and in-place edits of
a layer's state reach the stack. :meth:`LayerGroup.bind` re-establishes the views after
``load_state_dict``.

Batch factors (Martens & Grosse 2015; Eschenhagen et al. 2023 for ``weight_sharing``) are computed
from the inputs and output gradients the hooks kept (``_kfac_capture``): one ``bmm`` per factor
per group, with layers fed by the same input tensor (Q, K, V) sharing one ``A`` computation. When
a layer saw several forward/backward passes (gradient accumulation) or a pass without backward,
the per-layer path averages the passes' factors exactly as the batched path would for one pass.
"""

from __future__ import annotations

import torch

from brownformer.optim._kfac_capture import KFACLayer
from brownformer.optim._kfac_math import (block_diagonal, input_factor, output_factor, stacked_input_factor,
                                          stacked_output_factor)

FACTOR_KEYS = ("factor_a", "factor_g")
EIGEN_KEYS = ("eigenvalues_a", "eigenvectors_a", "eigenvalues_g", "eigenvectors_g")
PRECONDITIONER_KEYS = ("preconditioner_g", "preconditioner_a")  # cg: ~(G + gamma_G I)^-1, ~(A + gamma_A I)^-1
LAYER_KEYS = FACTOR_KEYS + ("cg_solution",) + EIGEN_KEYS + PRECONDITIONER_KEYS


def factor_dtype(weight: torch.Tensor) -> torch.dtype:
    """float64 for a float64 model, float32 otherwise (also under bf16/fp16 weights or autocast)."""
    return torch.float64 if weight.dtype == torch.float64 else torch.float32


def group_layers(layers: list[KFACLayer]) -> list["LayerGroup"]:
    """Partition layers into :class:`LayerGroup` s by ``(out, in, bias, dtype, device)``, in first-seen order."""
    groups: dict[tuple, list[KFACLayer]] = {}
    for layer in layers:
        w = layer.module.weight
        groups.setdefault((*w.shape, layer.has_bias, w.dtype, w.device), []).append(layer)
    return [LayerGroup(members) for members in groups.values()]


class LayerGroup:
    """``k`` same-shaped layers whose K-FAC tensors are stored stacked (see the module docstring)."""

    def __init__(self, layers: list[KFACLayer], *, persistent: bool = True):
        self.layers, self.persistent = layers, persistent  # not persistent: a scratch copy for one step
        w = layers[0].module.weight
        self.out_features, self.in_features = w.shape
        self.has_bias = layers[0].has_bias
        self.dtype, self.device = factor_dtype(w), w.device
        self.stacks: dict[str, torch.Tensor] = {}
        self.preconditioned_for: tuple | None = None  # cg: the dampings its preconditioner was refreshed for
        self._params: list | None = None  # the members' parameters in split order
        self._buffers: dict[str, tuple[torch.Tensor, list[torch.Tensor]]] = {}  # see buffer()
        self.head_mask = None  # (k, out, out) ones / per-head block pattern, only if a layer is per-head
        if any(m.head_size is not None for m in layers):
            ones = torch.ones(self.out_features, self.out_features, dtype=self.dtype, device=self.device)
            self.head_mask = torch.stack([ones if m.head_size is None else block_diagonal(ones, m.head_size)
                                          for m in layers])

    def __len__(self) -> int:
        return len(self.layers)

    # ---- storage -----------------------------------------------------------------------------
    def bind(self, state: dict, key: str, stack: torch.Tensor) -> torch.Tensor:
        """Make ``stack`` the group's ``key`` and every member's ``state[key]`` a view of it."""
        self.stacks[key] = stack
        for layer, view in zip(self.layers, stack.unbind(0)):  # one call for every view
            state[layer.module.weight][key] = view
        return stack

    def factors(self, state: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Stacked running ``(A, G)``, created as zeros on first use: the first batch factor replaces
        them exactly (``_kfac_math.factor_weight``)."""
        if "factor_a" not in self.stacks:
            n_in = self.in_features + int(self.has_bias)
            for key, n in (("factor_a", n_in), ("factor_g", self.out_features)):
                self.bind(state, key, torch.zeros(len(self), n, n, dtype=self.dtype, device=self.device))
        return self.stacks["factor_a"], self.stacks["factor_g"]

    def restack(self, state: dict) -> None:
        """Rebuild the stacks from per-layer state (after ``load_state_dict``).

        A key some members lack (a layer that never saw a batch) is filled with the identity
        (factors) or zeros (CG solution, a cold start); partial eigendecompositions are dropped and
        recomputed at the next step.
        """
        self.stacks, self.preconditioned_for = {}, None
        n_in = self.in_features + int(self.has_bias)
        fill = {"factor_a": lambda: torch.eye(n_in, dtype=self.dtype, device=self.device),
                "factor_g": lambda: torch.eye(self.out_features, dtype=self.dtype, device=self.device),
                "cg_solution": lambda: torch.zeros(self.out_features, n_in, dtype=self.dtype, device=self.device)}
        for key in LAYER_KEYS:
            present = [key in state[m.module.weight] for m in self.layers]
            if not any(present):
                continue
            if all(present) or key in fill:
                stack = torch.stack([state[m.module.weight][key].to(self.device, self.dtype) if here else fill[key]()
                                     for m, here in zip(self.layers, present)])
                self.bind(state, key, stack)
            else:
                for m in self.layers:
                    state[m.module.weight].pop(key, None)

    # ---- gradients ---------------------------------------------------------------------------
    def gradients(self, values: dict | None = None) -> torch.Tensor:
        """``V = [dL/dW, dL/db]`` of every member, ``(k, out, in[+1])`` in the factor dtype (or the same
        stacking of ``values[p]``, e.g. the parameters' change in a step)."""
        of = (lambda p: p.grad) if values is None else values.__getitem__
        w = torch.stack([of(m.module.weight) for m in self.layers])  # (k, out, in)
        if self.has_bias:
            b = torch.stack([of(m.module.bias) for m in self.layers])  # (k, out)
            w = torch.cat([w, b[:, :, None]], dim=2)  # (k, out, in+1)
        return w.to(self.dtype)

    def params(self) -> list[torch.Tensor]:
        """The members' parameters in split order, ``[W_0, b_0, W_1, ...]`` (``[W_0, W_1, ...]`` without biases)."""
        if self._params is None:
            self._params = [p for m in self.layers for p in ((m.module.weight, m.module.bias) if self.has_bias
                                                             else (m.module.weight,))]
        return self._params

    def split(self, x: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The members' parameters ``[W_0, b_0, W_1, ...]`` and their directions (views of ``x``
        ``(k, out, in[+1])``, made with one ``unbind`` per part) for the base update."""
        weights = x[:, :, : self.in_features].unbind(0)
        if not self.has_bias:
            return self.params(), list(weights)
        biases = x[:, :, self.in_features].unbind(0)
        return self.params(), [t for pair in zip(weights, biases) for t in pair]

    def buffer(self, name: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """A ``(k, out, in[+1])`` tensor of the factor dtype kept between steps under ``name``, and its views in split
        order (as :meth:`split` makes them). A step writes the stacked gradients or directions into it (one foreach
        copy for every group, or one ``out=`` product) instead of stacking, concatenating and splitting per group
        each step; what it holds is only valid until the next step writes it."""
        if name not in self._buffers:
            stack = torch.empty(len(self), self.out_features, self.in_features + int(self.has_bias), dtype=self.dtype,
                                device=self.device)
            self._buffers[name] = (stack, self.split(stack)[1])
        return self._buffers[name]

    # ---- batch factors -----------------------------------------------------------------------
    def batch_factors(self, weight_sharing: str, scale: int | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, list[bool]]:
        """Batch ``(A, G)`` ``(k, ., .)`` from the kept tensors, and which layers have both.

        ``scale`` is ``R`` of ``_kfac_math.output_factor`` (default: the batch size). A layer without a
        kept input or output gradient gets a placeholder and ``False``.
        """
        inputs = [m.inputs for m in self.layers]
        grads = [m.output_grads for m in self.layers]
        with torch.autocast(self.device.type, enabled=False):
            single = all(len(a) == 1 for a in inputs) and all(len(g) == 1 for g in grads)
            if single and len({a[0].shape for a in inputs}) == 1 and len({g[0].shape for g in grads}) == 1:
                batch_a, batch_g = self._stacked([a[0] for a in inputs], [g[0] for g in grads], weight_sharing, scale)
                return batch_a, batch_g, [True] * len(self)
            return self._per_layer(inputs, grads, weight_sharing, scale)

    def _stacked(self, inputs, grads, weight_sharing, scale):
        position, unique, index = {}, [], []
        for a in inputs:  # Q, K and V read the same memory: one A for the three (all kept alive here)
            key = (a.data_ptr(), a.dtype, a.shape, a.stride())
            if key not in position:
                position[key] = len(unique)
                unique.append(a)
            index.append(position[key])
        batch_a = stacked_input_factor(unique, bias=self.has_bias, weight_sharing=weight_sharing, dtype=self.dtype)
        if len(unique) < len(inputs):
            batch_a = batch_a[index]  # (k, in+1, in+1)
        batch_g = stacked_output_factor(grads, weight_sharing=weight_sharing, dtype=self.dtype, scale=scale)
        if self.head_mask is not None:
            batch_g.mul_(self.head_mask)
        return batch_a, batch_g

    def _per_layer(self, inputs, grads, weight_sharing, scale):
        a_list, g_list, updated = [], [], []
        for m, a_kept, g_kept in zip(self.layers, inputs, grads):
            if not a_kept or not g_kept:
                n_in = self.in_features + int(self.has_bias)
                a_list.append(torch.eye(n_in, dtype=self.dtype, device=self.device))
                g_list.append(torch.eye(self.out_features, dtype=self.dtype, device=self.device))
                updated.append(False)
                continue
            a_list.append(sum(input_factor(a.to(self.dtype), bias=self.has_bias, weight_sharing=weight_sharing)
                              for a in a_kept) / len(a_kept))
            g = sum(output_factor(g.to(self.dtype), weight_sharing=weight_sharing, scale=scale)
                    for g in g_kept) / len(g_kept)
            g_list.append(g if m.head_size is None else block_diagonal(g, m.head_size))
            updated.append(True)
        return torch.stack(a_list), torch.stack(g_list), updated

