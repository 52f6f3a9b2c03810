"""Optimizers: the registry used by training, and K-FAC (eigen and iterative/CG)."""
from brownformer.optim.registry import OPTIMIZERS, CompositeOptimizer, build_optimizer

__all__ = ["OPTIMIZERS", "CompositeOptimizer", "build_optimizer", "KFAC"]


def __getattr__(name):  # lazy so the registry works while kfac.py is being developed
    if name == "KFAC":
        from brownformer.optim.kfac import KFAC
        return KFAC
    raise AttributeError(name)
