"""Persistence of ``KFAC``: its settings, counters, snapshot and per-layer tensors in ``state_dict``."""
from __future__ import annotations

from collections import defaultdict

import torch

from brownformer.optim import _kfac_control as control
from brownformer.optim._kfac_groups import LAYER_KEYS

SETTINGS = ("inverse", "factor_decay", "factor_every", "inverse_every", "cg_max_iter", "cg_tol", "warm_start",
            "weight_sharing", "fisher", "loss_reduction", "adapt_every", "max_failures", "relative_damping")


class KFACPersistence:
    """``state_dict`` / ``load_state_dict`` of :class:`brownformer.optim.kfac.KFAC` (a mixin)."""

    def state_dict(self) -> dict:
        """torch's state dict plus ``"kfac"``: every setting, counter and snapshot the next steps use."""
        state = super().state_dict()  # type: ignore[misc]
        state["kfac"] = {**{k: getattr(self, k) for k in SETTINGS}, "factor_updates": self.factor_updates,
                         "failures": self.failures, "cg_budget": list(self.cg_budget),
                         "preconditioned_for": [None if g.preconditioned_for is None else list(g.preconditioned_for)
                                                for g in self.groups], "watch": self.watch.to_dict(),
                         "good": None if self.good is None else self.good.to_dict(),
                         "totals": {k: (v.item() if isinstance(v, torch.Tensor) else v) for k, v in self._totals.items()}}
        if self.generator is not None:
            state["generator"] = self.generator.get_state()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore; K-FAC tensors keep the factor dtype and are re-stacked per shape group; the saved
        eigenbases are used as they are (never recomputed), so a resumed run is bit-identical."""
        state_dict = dict(state_dict)
        generator_state = state_dict.pop("generator", None)
        settings = state_dict.pop("kfac", None)
        params = self._params()
        keep = {i: {k: v for k, v in s.items() if k in LAYER_KEYS}
                for i, s in state_dict["state"].items() if isinstance(s, dict)}
        super().load_state_dict(state_dict)  # type: ignore[misc]
        for i, tensors in keep.items():
            self.state[params[i]].update({k: v.to(params[i].device, copy=True) for k, v in tensors.items()})
        for group in self.groups:
            group.restack(self.state)
        if settings is not None:
            for key in SETTINGS:
                if key in settings:  # absent in checkpoints written before the setting existed
                    setattr(self, key, settings[key])
            self.fisher = {"mc": "sampled"}.get(self.fisher, self.fisher)
            self.capture.fisher, self.capture.loss_reduction = self.fisher, self.loss_reduction
            if self.fisher == "sampled" and self.generator is None:
                self.generator = self.capture.generator = torch.Generator(device=self.layers[0].module.weight.device)
            self.factor_updates, self.failures = settings["factor_updates"], settings.get("failures", 0)
            self.cg_budget = list(settings.get("cg_budget", []))
            for g, dampings in zip(self.groups, settings.get("preconditioned_for", [])):
                g.preconditioned_for = None if dampings is None else tuple(dampings)
            if "watch" in settings:
                self.watch.load(settings["watch"])
            self._iterative.tol, self._iterative.warm_start = self.cg_tol, self.warm_start
            good = settings.get("good")
            self.good = None if good is None else control.Snapshot.from_dict(good, self.layers[0].module.weight.device)
            self._totals = defaultdict(int, settings["totals"])
        if generator_state is not None and self.generator is not None:
            self.generator.set_state(generator_state)
        self.capture.enabled = self.param_groups[0]["step"] % self.factor_every == 0
