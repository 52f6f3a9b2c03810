"""Few padded blocks for the conjugate gradient: fewer, larger batched products per iteration.

A transformer's layers come in a handful of shapes (Q/K/V/O, MLP in, MLP out, patch embedding,
head), and every CG iteration costs about ten tensor operations per shape: on a CPU those calls,
not the arithmetic, dominate. Systems ``G X A + lambda X = V`` of different shapes are embedded in
one ``(O, I)`` shape by zero-padding ``G``, ``A``, ``V`` (and the warm start): on the padding the
operator is ``lambda X``, the right-hand side is 0, so CG keeps it exactly 0 and the solution on
the original block is the same system's solution (all inner products are unchanged).

Shapes are merged greedily, largest first, while the padded area stays within ``MAX_PADDING`` of
the system's own area (or the shape holds at most ``FEW`` systems: a head or a patch embedding),
so padding never multiplies the arithmetic of the big layers. Shapes of ``FEW`` systems that no block
holds (a small model's layers of one or two systems each) share a block when the padded products cost
less than one more block's calls (``BLOCK_WORK``).
"""
from __future__ import annotations

import torch

MAX_PADDING = 2.1  # padded area / own area: fc1 (64, 33) and fc2 (32, 65) share (64, 65) at width 32
FEW = 2  # shapes with this many systems or fewer join any block at least as large
# multiply-adds that cost about what one more block costs in calls per CG iteration on one CPU thread (~14 calls of
# ~2.5 us against ~30 multiply-adds per ns in small batched products; measured on the README snippet's layers)
BLOCK_WORK = 1e6


def _work(k: int, o: int, n: int) -> int:
    """Multiply-adds of one CG iteration's four products (operator and preconditioner) on ``k`` ``(o, n)`` systems."""
    return 2 * k * o * n * (o + n)


def plan_blocks(shapes: list[tuple[int, int, int]]) -> list[tuple[int, int, list[int]]]:
    """Group item shapes ``(k, out, in)`` into blocks ``(O, I, [item indices])``."""
    order = sorted(range(len(shapes)), key=lambda i: -shapes[i][1] * shapes[i][2])
    blocks: list[list] = []
    for i in (i for i in order if shapes[i][0] > FEW):
        _, o, n = shapes[i]
        for block in blocks:
            big = max(block[0], o) * max(block[1], n)
            if all(big <= MAX_PADDING * shapes[j][1] * shapes[j][2] for j in block[2] + [i]):
                block[0], block[1] = max(block[0], o), max(block[1], n)
                block[2].append(i)
                break
        else:
            blocks.append([o, n, [i], None])
    held = len(blocks)  # blocks of many systems; the few-system shapes below join one, or share blocks of their own
    for i in (i for i in order if shapes[i][0] <= FEW):  # a few systems: the smallest block that holds them
        k, o, n = shapes[i]
        holding = [b for b in blocks[:held] if b[0] >= o and b[1] >= n]
        if holding:
            min(holding, key=lambda b: b[0] * b[1])[2].append(i)
            continue
        saving = {j: _work(b[3], b[0], b[1]) + _work(k, o, n) + BLOCK_WORK - _work(b[3] + k, max(b[0], o), max(b[1], n))
                  for j, b in enumerate(blocks[held:], start=held)}
        j = max(saving, key=saving.get, default=None)
        if j is not None and saving[j] > 0:
            blocks[j][:2] = max(blocks[j][0], o), max(blocks[j][1], n)
            blocks[j][2].append(i)
            blocks[j][3] += k
        else:
            blocks.append([o, n, [i], k])
    return [(b[0], b[1], b[2]) for b in blocks]


def pad(tensors: list[torch.Tensor | None], blocks, shapes: list[tuple[int, int, int]], side: str
        ) -> list[torch.Tensor | None]:
    """Stack each block's items zero-padded: ``side`` ``"g"`` -> ``(O, O)``, ``"a"`` -> ``(I, I)``,
    ``"x"`` -> ``(O, I)``. A None item is zeros (a cold start); a block of only None stays None."""
    out = []
    for o, n, members in blocks:
        parts = [tensors[i] for i in members]
        if all(t is None for t in parts):
            out.append(None)
            continue
        r, c = {"g": (o, o), "a": (n, n), "x": (o, n)}[side]
        if len(parts) == 1 and parts[0].shape[1:] == (r, c):
            out.append(parts[0])
            continue
        ref = next(t for t in parts if t is not None)
        stack = ref.new_zeros(sum(shapes[i][0] for i in members), r, c)
        start = 0
        for i, t in zip(members, parts):
            if t is not None:
                stack[start:start + t.shape[0], : t.shape[1], : t.shape[2]] = t
            start += shapes[i][0]
        out.append(stack)
    return out


def unpad(stacks: list[torch.Tensor], blocks, shapes: list[tuple[int, int, int]]) -> list[torch.Tensor]:
    """Inverse of :func:`pad` for ``(k, out, in)`` items (views of the block stacks)."""
    out: list = [None] * len(shapes)
    for stack, (_, _, members) in zip(stacks, blocks):
        start = 0
        for i in members:
            k, o, n = shapes[i]
            out[i] = stack[start:start + k, :o, :n]
            start += k
    return out


def per_system(values: torch.Tensor, blocks, shapes) -> list[torch.Tensor]:
    """Per-system diagnostics in block order -> one ``(k_i,)`` tensor per item."""
    out: list = [None] * len(shapes)
    start = 0
    for _, _, members in blocks:
        for i in members:
            out[i] = values[start:start + shapes[i][0]]
            start += shapes[i][0]
    return out
