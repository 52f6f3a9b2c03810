"""Bring your own transformer: the paper's statistics on a local Hugging Face checkpoint (offline).

`analyze_pretrained` (stage.py) captures a pretrained model through an architecture adapter
(adapters.py), writes the project's trajectory files and decides each claim. transformers and
safetensors come from the `pretrained` extra; they are imported only when a model is loaded.
"""
from .adapters import ADAPTERS, Adapter, ModuleMap, UnknownModelType, adapter_for
from .capture import AttentionUnavailable, capture_model
from .inputs import InputSpec
from .stage import PretrainedRequest, analyze_pretrained

__all__ = ["analyze_pretrained", "PretrainedRequest", "InputSpec", "ADAPTERS", "Adapter", "ModuleMap",
           "adapter_for", "capture_model", "UnknownModelType", "AttentionUnavailable"]
