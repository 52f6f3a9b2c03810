"""Per-step lookups of ``KFAC`` without walks over the parameter groups: cached, rebuilt only on change.

A step needs, per shape group, the param group of each layer (its ``damping``, ``initial_lr``) and the
index of each parameter's group (for the update). They change only when the param groups do, or (the
values) when a setting is edited: the tensors are cached by their values.
"""
from __future__ import annotations

import torch


class KFACLookups:
    """Mixin of :class:`brownformer.optim.kfac.KFAC` (uses its ``param_groups`` and two cache dicts)."""

    def _group_of(self, layer) -> dict:
        if self._layer_groups is None or self._layer_groups[0] != len(self.param_groups):
            owner = {id(p): group for group in self.param_groups for p in group["params"]}
            self._layer_groups = (len(self.param_groups), owner)
        group = self._layer_groups[1].get(id(layer.module.weight))
        if group is None:
            raise ValueError(f"layer {layer.name!r} is in no param group")
        return group

    def _cached(self, key: tuple, owner, make):
        """``make()`` cached under ``key`` while ``owner`` (whose id is in ``key``) is the object it was made for."""
        entry = self._index_cache.get(key)
        if entry is None or entry[0] is not owner:
            if len(self._index_cache) > 256:  # partial shape groups are new objects every step
                self._index_cache.clear()
            entry = self._index_cache[key] = (owner, make())
        return entry[1]

    def _group_index(self, sub, params: list) -> list[int]:
        """Index in ``param_groups`` of each of ``params`` (a shape group's, in split order)."""
        def make():
            index = {id(p): i for i, group in enumerate(self.param_groups) for p in group["params"]}
            return [index[id(p)] for p in params]
        return self._cached(("index", id(sub), len(self.param_groups)), sub, make)

    def _layer_tensor(self, layers, key: str, dtype, device, power: int = 1) -> torch.Tensor:
        """``(k, 1, 1)`` per-layer values of a group setting (to ``power``), rebuilt only when they change."""
        groups = self._cached(("groups", id(layers), len(self.param_groups)), layers,
                              lambda: [self._group_of(m) for m in layers])
        values = tuple(group[key] for group in groups)
        cache_key = (key, values, dtype, device, power)
        if cache_key not in self._tensor_cache:
            if len(self._tensor_cache) > 64:  # dampings adapt: keep the cache small
                self._tensor_cache.clear()
            self._tensor_cache[cache_key] = torch.tensor(values, dtype=dtype, device=device)[:, None, None] ** power
        return self._tensor_cache[cache_key]
