"""What one capture reads from a model: token states, attention, attention weights, gradient noise.

Every function here works on a *probe copy* of the training model (no optimizer hooks, eval mode)
and never touches `.grad`, so calling them cannot change training.

Per layer l (block l of `model.blocks`):
    resid[l]     residual stream entering block l (resid[L] = output of the last block)
    ln_hat[l]    LN1's input normalised without the affine: (x - mean) / sqrt(var + eps), norm ~ sqrt(d);
                 for ln "none" (no LayerNorm) the raw stream scaled to norm sqrt(d), x sqrt(d) / |x|
    ln_out[l]    LN1's output (after gamma, beta; the raw stream for ln "none")
    attn[l]      softmax(Q K^T / sqrt(d_k)) per head, causal for the LM
LN1's input is resid[l] for pre-LN and ln "none", and x + Attn(x) for post-LN.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from brownformer.models import loss_fn
from brownformer.probes.layout import MATRICES  # its home is torch-free (the extraction reads it); re-exported

__all__ = ["MATRICES", "capture_activations", "attention_weights", "gradient_noise",
           "gradient_noise_reference", "projection_matrix", "matrix_view", "sphere_normalize"]


def sphere_normalize(x: torch.Tensor, *, centered: bool, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm without affine (centered) or x sqrt(d) / |x| (not centered); result norm ~ sqrt(d)."""
    d = x.shape[-1]
    if centered:
        return F.layer_norm(x, (d,), eps=eps)
    return x * math.sqrt(d) / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


@torch.no_grad()
def capture_activations(model: nn.Module, inputs: torch.Tensor) -> dict[str, torch.Tensor]:
    """One forward pass over the probe inputs, recording the tensors of the module docstring.

    Returns:
        {"resid": (L+1, B, n, d), "ln_hat": (L, B, n, d), "ln_out": (L, B, n, d),
         "attn": (L, H, B, n, n)}, float32 on the model's device.
    """
    blocks = list(model.blocks)
    resid, ln_hat, ln_out, handles = [], [], [], []

    def on_block_input(module, args):
        resid.append(args[0].detach())

    def on_ln1(module, args, out):
        x = args[0].detach()
        if isinstance(module, nn.LayerNorm):
            ln_hat.append(F.layer_norm(x, module.normalized_shape, eps=module.eps))
        else:  # ln "none": no LayerNorm, project the raw stream onto the sphere of radius sqrt(d)
            ln_hat.append(sphere_normalize(x, centered=False))
        ln_out.append(out.detach())

    for block in blocks:
        handles.append(block.register_forward_pre_hook(on_block_input))
        handles.append(block.ln1.register_forward_hook(on_ln1))
        block.attn.store_probs = True
    handles.append(blocks[-1].register_forward_hook(lambda m, a, out: resid.append(out.detach())))
    try:
        model(inputs)
        attn = torch.stack([b.attn.probs for b in blocks])  # (L, B, H, n, n)
    finally:
        for h in handles:
            h.remove()
        for block in blocks:
            block.attn.store_probs, block.attn.probs = False, None
    return {"resid": torch.stack(resid), "ln_hat": torch.stack(ln_hat), "ln_out": torch.stack(ln_out),
            "attn": attn.transpose(1, 2).contiguous()}  # attn: (L, H, B, n, n)


def projection_matrix(seed: int, layer: int, matrix: str, in_features: int, dim: int) -> np.ndarray:
    """Fixed Gaussian row projection R (in_features, dim) / sqrt(dim) (Johnson-Lindenstrauss).

    Seeded by (seed, layer, matrix) so every capture and every run projects a matrix the same way.
    """
    rng = np.random.default_rng([seed, 7919, layer, MATRICES.index(matrix)])
    return (rng.standard_normal((in_features, dim)) / math.sqrt(dim)).astype(np.float32)


def matrix_view(w: torch.Tensor, projection: torch.Tensor | None) -> torch.Tensor:
    """A weight (or gradient) matrix (out, in) as stored: itself, or its rows projected (out, dim)."""
    w = w.detach()
    return w if projection is None else w @ projection.to(w.dtype)


def attention_weights(model: nn.Module, projections: dict[tuple[int, str], torch.Tensor | None]) -> torch.Tensor:
    """W_Q, W_K, W_V, W_O of every layer: (L, 4, out, in or dim), in the model's dtype."""
    return torch.stack([
        torch.stack([matrix_view(getattr(b.attn, m).weight, projections[(l, m)]) for m in MATRICES])
        for l, b in enumerate(model.blocks)])


def gradient_noise(model: nn.Module, minibatches: list[tuple[torch.Tensor, torch.Tensor]],
                   large_batch: tuple[torch.Tensor, torch.Tensor],
                   projections: dict[tuple[int, str], torch.Tensor | None]) -> torch.Tensor:
    """Minibatch gradient minus large-batch gradient for every attention weight matrix.

    xi_j = grad L_{B_j}(W) - grad L_{B_large}(W), j = 1..M, the stochastic-gradient noise whose law
    (Gaussian or heavy-tailed; Simsekli et al. 2019) decides what kind of diffusion SGD is.

    All batches go through ONE forward and backward: examples do not interact in the forward pass
    (eval mode, per-token LayerNorm), so backpropagating sum_j L_{B_j} + L_{B_large} gives every
    example the output gradient g it has in its own batch's loss, and the weight gradient of a
    linear layer y = W a is, per batch j, grad_W L_{B_j} = sum_{i in B_j, t} g_{i,t} a_{i,t}^T.
    Uses torch.autograd.grad on the layers' outputs, so no parameter's `.grad` is read or written.

    Returns:
        (L, 4, M, p) in the model's dtype, p = out * in (or out * dim when projected), matrices in MATRICES order.
    """
    batches = [*minibatches, large_batch]
    x = torch.cat([b[0] for b in batches])  # (sum of batch sizes, ...)
    y = torch.cat([b[1] for b in batches])
    bounds = np.cumsum([0] + [len(b[0]) for b in batches])
    keys = [(l, m) for l in range(len(model.blocks)) for m in MATRICES]
    layers = [getattr(model.blocks[l].attn, m) for l, m in keys]
    seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    handles = [layer.register_forward_hook(lambda mod, a, out, i=i: seen.__setitem__(i, (a[0].detach(), out)))
               for i, layer in enumerate(layers)]
    try:
        with torch.enable_grad():
            logits = model(x)
            loss = sum(loss_fn(logits[lo:hi], y[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:]))
            outs = torch.autograd.grad(loss, [seen[i][1] for i in range(len(layers))])
    finally:
        for h in handles:
            h.remove()
    rows = []
    for i, key in enumerate(keys):
        a, g = seen[i][0], outs[i]  # (Ntot, T, in), (Ntot, T, out)
        per_batch = [torch.einsum("nto,nti->oi", g[lo:hi], a[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]
        flat = torch.stack([matrix_view(G, projections[key]).reshape(-1) for G in per_batch])  # (M+1, p)
        rows.append(flat[:-1] - flat[-1])  # (M, p)
    noise = torch.stack(rows)  # (4L, M, p)
    L = len(model.blocks)
    return noise.reshape(L, len(MATRICES), *noise.shape[1:])  # (L, 4, M, p)


def gradient_noise_reference(model: nn.Module, minibatches, large_batch, projections) -> torch.Tensor:
    """The same quantity one batch at a time with torch.autograd.grad on the weights (for tests)."""
    weights = [getattr(b.attn, m).weight for b in model.blocks for m in MATRICES]
    keys = [(l, m) for l in range(len(model.blocks)) for m in MATRICES]

    def flat_grads(x, y):
        with torch.enable_grad():
            grads = torch.autograd.grad(loss_fn(model(x), y), weights)
        return torch.stack([matrix_view(g, projections[k]).reshape(-1) for g, k in zip(grads, keys)])  # (4L, p)

    ref = flat_grads(*large_batch)
    noise = torch.stack([flat_grads(x, y) - ref for x, y in minibatches], dim=1)  # (4L, M, p)
    return noise.reshape(len(model.blocks), len(MATRICES), *noise.shape[1:])
