"""Probes: capture token states, attention, weights and gradient noise during training, and turn
the capture store into trajectory files (docs/ARTIFACTS.md, "Trajectory files").

Names are imported lazily (PEP 562): the CLI builds its help from `describe_layout` without loading
torch, which the recorder and the extractor need.
"""
import importlib

_EXPORTS = {"extract_trajectories": "extract", "describe_layout": "layout", "ProbeRecorder": "recorder",
            "capture_schedule": "schedule", "extract_replicas": "replicas"}

__all__ = ["capture_schedule", "ProbeRecorder", "extract_trajectories", "describe_layout", "extract_replicas"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"brownformer.probes.{_EXPORTS[name]}"), name)
