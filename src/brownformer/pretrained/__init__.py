"""Bring your own transformer: the paper's statistics on a local Hugging Face checkpoint (offline).

`analyze_pretrained` (stage.py) captures a pretrained model through an architecture adapter
(adapters.py), writes the project's trajectory files and decides each claim. transformers and
safetensors come from the `pretrained` extra; they are imported only when a model is loaded. The names
below are imported on first use, so that `settings` (read by the Snakefile) loads without torch.
"""
from importlib import import_module

__all__ = ["analyze_pretrained", "PretrainedRequest", "InputSpec", "ADAPTERS", "Adapter", "ModuleMap",
           "adapter_for", "capture_model", "UnknownModelType", "AttentionUnavailable", "ModelUnavailable",
           "resolve_model", "unavailable_result"]

_HOME = {"analyze_pretrained": "stage", "PretrainedRequest": "stage", "InputSpec": "inputs", "ADAPTERS": "adapters",
         "Adapter": "adapters", "ModuleMap": "adapters", "adapter_for": "adapters", "UnknownModelType": "adapters",
         "capture_model": "hooked_forward", "AttentionUnavailable": "hooked_forward", "ModelUnavailable": "packaged",
         "resolve_model": "packaged", "unavailable_result": "stage"}


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_HOME[name]}", __name__), name)
