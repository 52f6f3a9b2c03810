"""Optimizers: the registry used by training, and K-FAC (eigen and iterative/CG).

Attributes are imported lazily so that ``brownformer.config`` can read the registry's keys
without importing torch.
"""
__all__ = ["OPTIMIZERS", "REGISTRY", "CompositeOptimizer", "build_optimizer", "implementation_flags", "KFAC"]


def __getattr__(name):
    if name in ("OPTIMIZERS", "REGISTRY", "build_optimizer", "implementation_flags"):
        from brownformer.optim import registry
        return getattr(registry, name)
    if name == "CompositeOptimizer":
        from brownformer.optim._composite import CompositeOptimizer
        return CompositeOptimizer
    if name == "KFAC":
        from brownformer.optim.kfac import KFAC
        return KFAC
    raise AttributeError(name)
