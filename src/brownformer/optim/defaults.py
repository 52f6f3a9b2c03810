"""K-FAC's constructor defaults, torch-free: their one home, read by ``kfac.KFAC`` and, through the registry,
by the config's readers (``config.run_spec`` needs the default momentum without importing the optimizer).

Defaults measured against AdamW's defaults (tests/optim/test_kfac_defaults.py; docs/methods/kfac.md).
"""
from __future__ import annotations

__all__ = ["DEFAULT_LR", "DEFAULT_DAMPING", "DEFAULT_MOMENTUM", "DEFAULT_REST_LR"]

DEFAULT_LR = 0.03  # lr 0.1 let the bound set every step
DEFAULT_DAMPING = 1e-2  # damping 1e-3 let the eigen solve amplify low-curvature directions
DEFAULT_MOMENTUM = 0.5  # the KL bound acts on each step's X: momentum 0.9 adds up ~10 bound steps (measured worse)
DEFAULT_REST_LR = 1e-3  # torch.optim.AdamW's default, for the parameters K-FAC does not precondition
